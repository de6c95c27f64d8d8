# capture.jl: fd 1 and fd 2 into pipes, pumps that forward them, drain markers.
#
# Output: fd 1 is redirected into an in-process pipe. fd 2 is a pipe the supervisor made and
# also holds the read end of (JUTUL_JKERNEL_STDERR_FD names the server's copy), so what Julia
# writes while dying can still be read; without that variable fd 2 is redirected in-process
# too. A pump task per stream forwards what arrives as OUT frames. At the end of an evaluation
# the server flushes Julia's and C's buffers and writes a marker into each pipe; RES is sent
# only once both pumps have passed their marker, so all of an evaluation's output is on the
# wire before its result. User code sees `stdout` and `stderr` as KernelStdio wrappers of those
# pipes that carry `:color` when Julia runs with --color=yes.

"""
    pump(rd, name)

Forward bytes from the read end of a redirected stream as OUT frames, counting drain markers.
"""
function pump(rd, name::String)
    held = UInt8[]
    guarded("pump " * name) do
        while true
            chunk = readavailable(rd)
            if isempty(chunk) && eof(rd)
                return false
            end
            disable_sigint() do
                append!(held, chunk)
                forward_output!(held, name)
            end
        end
    end
end

function forward_output!(held::Vector{UInt8}, name::String)
    m = length(MARK)
    start = 1
    i = 1
    n = length(held)
    while true
        z = findnext(isequal(0x00), held, i)
        if z === nothing
            send_output(name, held, start, n)
            empty!(held)
            return
        end
        if z + m - 1 > n
            # a marker may be split across reads: keep its first part for the next chunk
            if view(held, z:n) == view(MARK, 1:n-z+1)
                send_output(name, held, start, z - 1)
                deleteat!(held, 1:z-1)
                return
            end
            i = z + 1
        elseif view(held, z:z+m-1) == MARK
            send_output(name, held, start, z - 1)
            MARKS_SEEN[name] += 1
            notify(DRAINED)
            start = i = z + m
        else
            i = z + 1
        end
    end
end

function send_output(name::String, buf::Vector{UInt8}, from::Int, to::Int)
    FORWARDED[] += max(0, to - from + 1)
    while from <= to
        upto = min(to, from + OUT_CHUNK - 1)
        send_frame("OUT", name, view(buf, from:upto))
        from = upto + 1
    end
end

function flush_all()
    for io in (stdout, stderr, PIPES["stdout"], PIPES["stderr"])
        quietly(() -> flush(io))
    end
    Libc.flush_cstdio()
end

"""
    drain_output()

Flush every buffer and wait until the pumps forwarded everything written so far.
"""
function drain_output()
    flush_all()
    MARKS_SENT[] += 1
    want = MARKS_SENT[]
    for name in ("stdout", "stderr")
        w = PIPES[name]
        write(w, MARK)
        flush(w)
    end
    DRAIN_DEADLINE[] = time() + DRAIN_TIMEOUT   # the flusher task wakes us if it passes
    try
        while MARKS_SEEN["stdout"] < want || MARKS_SEEN["stderr"] < want
            if time() > DRAIN_DEADLINE[]
                diag("output drain timed out after ", DRAIN_TIMEOUT, " s")
                MARKS_SEEN["stdout"] = MARKS_SEEN["stderr"] = want
                break
            end
            wait(DRAINED)
        end
    finally
        DRAIN_DEADLINE[] = Inf
    end
end

"""
    flusher_loop()

The server's clock, one long-lived task: while a cell runs it flushes buffered output every
`FLUSH_INTERVAL` and switches write buffering by output rate; it ends a drain that waits too
long; when Julia has been idle for `IDLE_BEFORE_WARM_UP` it queues a warm-up tick. (Timer
callbacks or a task per tick would leave finished tasks behind, and a SIGINT that lands in a
finished task can kill Julia 1.5; this task catches and forwards it.)
"""
function flusher_loop()
    guarded("flusher") do
        while true
            running = CURRENT[] != 0
            before = FORWARDED[]
            gen = IDLE_GENERATION[]
            sleep(running ? FLUSH_INTERVAL : IDLE_BEFORE_WARM_UP)
            time() > DRAIN_DEADLINE[] && notify(DRAINED)
            if CURRENT[] == 0
                if !running && WARMING[] && gen == IDLE_GENERATION[] && !isready(QUEUE)
                    put!(QUEUE, (-gen, "", "", false))   # idle for a whole interval
                end
                continue
            end
            flush_all()
            rate = FORWARDED[] - before
            if !BUFFERED[] && rate >= BUFFER_ON_BYTES
                set_buffering!(true)
            elseif BUFFERED[] && rate < BUFFER_OFF_BYTES
                # a pump stalled on a slow reader looks quiet too: wait for a steady lull
                QUIET_TICKS[] += 1
                QUIET_TICKS[] >= BUFFER_OFF_TICKS && set_buffering!(false)
            else
                QUIET_TICKS[] = 0
            end
        end
    end
end

function set_buffering!(on::Bool)
    QUIET_TICKS[] = 0
    BUFFERED[] == on && return
    BUFFERED[] = on
    # `sendbuf` is a Base internal: if a Julia version changes it, lose the speed-up, not cells.
    quietly() do
        for name in ("stdout", "stderr")
            w = PIPES[name]
            if on
                Base.buffer_writes(w, STDOUT_BUFFER)
            else
                flush(w)
                Base.iolock_begin()
                w.sendbuf = nothing
                Base.iolock_end()
            end
        end
    end
end

"""
    line_buffer_c_stdout!()

C's stdio makes stdout fully buffered when it is a pipe, so `puts` from a library would show up
after Julia output printed later. Line buffering is what a terminal gives it.
"""
function line_buffer_c_stdout!()
    @static if Sys.islinux()
        quietly() do
            Libc.flush_cstdio()
            cstdout = unsafe_load(cglobal(:stdout, Ptr{Cvoid}))
            ccall(:setvbuf, Cint, (Ptr{Cvoid}, Ptr{UInt8}, Cint, Csize_t), cstdout, C_NULL, 1, 0)
        end
    end
end

"""
    KernelStdio(pipe, color)

What user code sees as `stdout` / `stderr`: the pipe the pump reads, plus the IOContext
property a terminal would give it (`:color`), so `printstyled`, the logging macros and
`showerror(stderr, ...)` colour their output as in the REPL and IJulia (which wraps its streams
the same way, src/stdio.jl). An `AbstractPipe`, so writes, `flush` and child processes go to
the pipe itself, and `redirect_stdout(old)` after a user's own redirect restores it.
"""
struct KernelStdio{T<:IO} <: Base.AbstractPipe
    ctx::IOContext{T}
end
KernelStdio(pipe::IO, color::Bool) = KernelStdio(IOContext(pipe, :color => color))

Base.pipe_writer(s::KernelStdio) = s.ctx.io
Base.pipe_reader(s::KernelStdio) = s.ctx.io
Base.lock(s::KernelStdio) = lock(s.ctx.io)
Base.unlock(s::KernelStdio) = unlock(s.ctx.io)
Base.get(s::KernelStdio, key, default) = get(s.ctx, key, default)
Base.haskey(s::KernelStdio, key) = haskey(s.ctx, key)
Base.getindex(s::KernelStdio, key) = getindex(s.ctx, key)
Base.in(kv::Pair, s::KernelStdio) = in(kv, s.ctx)
Base.displaysize(s::KernelStdio) = displaysize(s.ctx)
# IOContext(buf, stdout), as ConsoleLogger builds it, takes every property, not only :color.
@static if isdefined(Base, :unwrapcontext)
    Base.unwrapcontext(s::KernelStdio) = Base.unwrapcontext(s.ctx)
end

@static if !isdefined(Base, :RedirectStdStream)
    # Julia 1.5 and 1.6 redirect only to a LibuvStream or IOStream (1.5.3 base/stream.jl,
    # `redirect_stdout(handle::Union{LibuvStream, IOStream})`), so the usual
    # `old = stdout; redirect_stdout(pipe); ...; redirect_stdout(old)` (Suppressor.jl) would fail
    # to restore. 1.7 and newer take any AbstractPipe: `(f::RedirectStdStream)(io::AbstractPipe)`
    # in base/stream.jl (read in master, index ids 58584308272 and 1064575095).
    function Base.redirect_stdout(s::KernelStdio)
        redirect_stdout(Base.pipe_writer(s))
        Core.eval(Base, :(stdout = $s))
        return s
    end
    function Base.redirect_stderr(s::KernelStdio)
        redirect_stderr(Base.pipe_writer(s))
        Core.eval(Base, :(stderr = $s))
        return s
    end
end

function redirect_output!()
    # The original stdout is the startup log: keep it as the diagnostic channel. What Julia
    # buffered for it so far (a -L file's println) goes there before the swap.
    quietly(() -> flush(stdout))
    DIAG[] = stdout
    rd_out, wr_out = redirect_stdout()
    fd = tryparse(Int, get(ENV, "JUTUL_JKERNEL_STDERR_FD", ""))
    delete!(ENV, "JUTUL_JKERNEL_STDERR_FD")
    if fd === nothing
        rd_err, wr_err = redirect_stderr()
    else
        # fd 2 already is a pipe the supervisor made, and `fd` its read end. The supervisor keeps
        # a copy of that read end, so what Julia writes to fd 2 while dying (fatal signal
        # reports, "fatal: error thrown ...") stays readable after the process is gone.
        rd_err, wr_err = Base.PipeEndpoint(RawFD(fd)), stderr
        ccall(:fcntl, Cint, (Cint, Cint, Cint), fd, 2, 1)   # F_SETFD FD_CLOEXEC: not for children
    end
    PIPES["stdout"] = wr_out
    PIPES["stderr"] = wr_err
    line_buffer_c_stdout!()
    # Only the Julia objects change: fd 1 and 2 (C, child processes) already are the pipes.
    Core.eval(Base, :(stdout = $(KernelStdio(wr_out, COLOR[]))))
    Core.eval(Base, :(stderr = $(KernelStdio(wr_err, COLOR[]))))
    # The default logger captured the old stderr object: replace it.
    global_logger(ConsoleLogger(stderr))
    @async pump(rd_out, "stdout")
    @async pump(rd_err, "stderr")
end
