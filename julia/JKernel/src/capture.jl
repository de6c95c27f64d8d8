# capture.jl: fd 1 and fd 2 as pipes, drain markers, write buffering.
#
# Output: fd 1 and fd 2 are pipes whose read ends only the supervisor holds
# (JUTUL_JKERNEL_STDOUT_FD names the write end for fd 1; fd 2 already is one), and the
# supervisor reads them itself. A task here could not: it shares the thread with every writer,
# so a C library printing more than the pipe holds in one call, or any print flood once a
# child process has made the pipe blocking (libuv makes a child's stdio blocking, and the open
# file description is shared), would stop the thread for good, interrupts included. The pipes
# are made blocking on purpose, so that C's writes wait for the reader rather than fail.
#
# Order: `drain_output` flushes Julia's and C's buffers, writes a marker into each pipe and
# returns its number; the frame that must follow the output (a result, a display, an input
# request) is sent inside `MRK <number>`, and the supervisor handles it only once it has read
# both pipes up to that marker. So all of a cell's output comes before its result. When both
# pipes are empty after the flush (Linux's FIONREAD on our own descriptors of them), the
# supervisor has already read every byte written before, and passed it on, so the frames that
# end an evaluation (its value or error, and its result) need no marker: they go inside
# `MRK 0`, and a cell or comm callback that prints nothing costs no pipe write here and no
# pipe read in the supervisor at its end (supervisor/pipes.py, `pass_tails`). A frame in the
# middle of an evaluation (a display, a comm message, an input request) always gets its
# marker: the marker also holds back what is printed after the frame until the frame was
# handled, and without one the supervisor could read that output first. When both pipes were
# read to the end, that is all the marker has to do, and it can come after the frame: the
# frame goes in `MRN <number>`, the marker right behind it, and the supervisor handles the
# frame at once instead of reading both pipes up to the marker first (a comm echo, which
# sends one such frame, took 1-9% less: docs/benchmarks.md).
#
# Without JUTUL_JKERNEL_STDOUT_FD (Windows: no inherited pipes), fd 1 and fd 2 are redirected
# into in-process pipes and a pump task per stream forwards them as OUT frames; the drain then
# waits until both pumps passed their marker. User code sees `stdout` and `stderr` as Base
# `IOContext`s over the pipes that carry `:color` (when Julia runs with --color=yes) and
# `:jupyter_stream`, as IJulia's do (see StdioContext below).

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
    while from <= to
        upto = min(to, from + OUT_CHUNK - 1)
        send_frame(FrameKind.OUT, name, view(buf, from:upto))
        from = upto + 1
    end
end

function flush_all()
    for io in (stdout, stderr, PIPES["stdout"], PIPES["stderr"])
        flush_quietly(io)
    end
    Libc.flush_cstdio()
end

"""`flush(io)` (of a pipe: `flush_pending`), whatever it throws but an interrupt (a named
function: `quietly`'s closure would compile at the first drain)."""
function flush_quietly(io)
    try
        io isa Base.PipeEndpoint ? flush_pending(io) : flush(io)
    catch e
        e isa InterruptException && rethrow()
    end
    nothing
end

"""
    flush_pending(pipe)

`flush(pipe)` only if something written to it has not reached the OS yet: bytes in its send
buffer (`set_buffering!`), or a write libuv still queues (the pipe was full). Base's flush
otherwise writes zero bytes and waits for libuv's callback (base/stream.jl `flush(::LibuvStream)`
on release-1.10, release-1.12 and master): a syscall and a turn of the event loop, for nothing,
and a drain flushed each pipe twice (`flush_all`), every cell and every comm message.
"""
function flush_pending(pipe::Base.LibuvStream)
    writes_pending(pipe) && flush(pipe)
    nothing
end
flush_pending(io) = (flush(io); nothing)

"""Whether `pipe` holds written bytes the OS does not have yet (see `flush_pending`)."""
function writes_pending(pipe::Base.LibuvStream)
    Base.iolock_begin()
    buf = pipe.sendbuf
    # libuv counts the bytes of the writes it still queues (uv_stream_t.write_queue_size);
    # a write that went through whole at once was never queued.
    pending = (buf !== nothing && bytesavailable(buf) > 0) ||
              (pipe.handle != C_NULL &&
               ccall(:uv_stream_get_write_queue_size, Csize_t, (Ptr{Cvoid},), pipe.handle) > 0)
    Base.iolock_end()
    return pending
end

"""
    drain_output(ending = false) -> mark

Flush every buffer and put a marker behind what was written so far. Return its number for the
frame that must follow that output (`send_frame(...; mark)`: `MRK <number>`); 0 where the pumps
forward the output (they have passed the marker when this returns). Where the supervisor has
read both pipes to the end (`pipes_read`), no marker is written now: the frames that end an
evaluation (`ending`) need none (`PIPES_READ`: the frame goes in `MRK 0`), and the others get
theirs right after them (`MARK_AFTER`: `send_frame` sends the frame in `MRN <number>` and then
writes the marker, which holds back what is printed after the frame).
"""
function drain_output(ending::Bool = false)
    flush_all()
    if SUPERVISOR_READS[] && pipes_read()
        return ending ? PIPES_READ : MARK_AFTER
    end
    want = write_marker()
    SUPERVISOR_READS[] && return want
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
    return 0
end

"""Write the next drain marker into both pipes; return its number."""
function write_marker()
    n = MARKS_SENT[] += 1
    put_marker()
    return n
end

"""Write a drain marker into both pipes (its number taken already)."""
function put_marker()
    for name in ("stdout", "stderr")
        w = PIPES[name]
        write(w, MARK)
        flush_pending(w)   # buffered writes (set_buffering!) hold it back until flushed
    end
end

# FIONREAD: the bytes waiting in a pipe, which either end may ask on Linux (fs/pipe.c
# pipe_ioctl reads the pipe both ends share). 0x541B on the architectures listed; others
# number it differently, and BSD pipes answer for one end only, so elsewhere every drain
# writes its marker.
const FIONREAD = 0x541B
const PIPES_READ = -1   # drain_output's mark when no marker was needed (send_frame: MRK 0)
const MARK_AFTER = -2   # ... when the marker goes right after the frame (send_frame: MRN)
const FIONREAD_WORKS = Sys.islinux() && Sys.ARCH in (:x86_64, :i686, :aarch64, :armv7l, :riscv64)

"""
    pipes_read() -> Bool

Whether both output pipes are empty: the supervisor has read every byte written to them (a
failed ioctl says no).
"""
function pipes_read()
    isempty(PIPE_FDS) && return false
    n = Ref{Cint}(0)
    # Under the I/O lock, which every Julia write to a pipe holds for its whole (blocking)
    # write: no code of ours is half written while we look, so whatever the supervisor keeps
    # as a possible start of one is output (supervisor/pipes.py, pass_tails).
    Base.iolock_begin()
    try
        for fd in PIPE_FDS
            ccall(:ioctl, Cint, (RawFD, Culong, Ref{Cint}), fd, FIONREAD, n) == 0 && n[] == 0 ||
                return false
        end
    finally
        Base.iolock_end()
    end
    return true
end

"""The number of the last marker, for a frame sent after a failure (0 if the pumps forward)."""
last_mark() = SUPERVISOR_READS[] ? MARKS_SENT[] : 0

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
            cell = CURRENT[]
            running = cell != 0 || !isempty(BESIDE)
            before = WRITTEN[]
            gen = IDLE_GENERATION[]
            sleep(running ? FLUSH_INTERVAL : IDLE_BEFORE_WARM_UP)
            time() > DRAIN_DEADLINE[] && notify(DRAINED)
            if CURRENT[] == 0 && isempty(BESIDE)
                if !running && WARMING[] && gen == IDLE_GENERATION[] && !isready(QUEUE)
                    put!(QUEUE, WarmUpTick(gen))   # idle for a whole interval
                end
                continue
            end
            flush_all()
            rate_window(cell, running) || continue
            rate = WRITTEN[] - before
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

"""
    rate_window(cell, running) -> Bool

Whether the bytes written in the flusher's window that began with `CURRENT[] == cell` (and
something `running`) are the output rate of what runs now. Bytes counted across two cells are
no rate: a flood that ended the last cell would turn buffering on for the next one, which
prints (say) one line at a time. The window must have run one cell throughout, and still:
flush_all yields, and a cell that started after an idle window began (`cell` 0) may have ended
meanwhile, when CURRENT is 0 again (the first flood of a fresh session, every time on 1.5.3).
"""
rate_window(cell::Int, running::Bool) =
    running && CURRENT[] == cell && (cell != 0 || !isempty(BESIDE))

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
                # Unhook the buffer before writing out what it holds: the write waits, and a
                # task printing meanwhile would append to a buffer that is then dropped (one
                # line lost per flood that ended while a cell still printed). Nothing yields
                # between the two, so what the buffer held is queued before any later write.
                Base.iolock_begin()
                held = w.sendbuf
                w.sendbuf = nothing
                Base.iolock_end()
                held !== nothing && bytesavailable(held) > 0 && write(w, take!(held))
            end
        end
    end
end

"""
    end_current_cell!()

The main shell's cell is over: write buffering goes off and `CURRENT[]` to 0 with no yield in
between. Switched off any earlier, a flusher tick ending while the cell's last frames are sent
(each write to the socket yields) counts the cell's flood as the rate of a cell still running,
turns buffering back on, and the next cell starts buffered: its lines wait for a flush instead
of showing as printed (test_a_cell_after_a_flood_starts_with_direct_writes). `set_buffering!`
yields only to write what the buffer held, after which a tick may have turned it on again.
"""
function end_current_cell!()
    while BUFFERED[]
        set_buffering!(false)
    end
    CURRENT[] = 0
    nothing
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

# ---- Julia's `stdout` and `stderr` ----
#
# Base code calls them from a world where no method of ours exists: since 1.10 `using` loads and
# compiles packages in the world recorded when Base started (base/loading.jl,
# `invoke_in_world(_require_world_age[], __require, ...)`), and that code passes `stderr` to
# `pipeline(cmd; stderr = stderr)` and prints its progress to it (1.11+ `precompilepkgs`). A
# type of ours there fails with "no method matching pipe_writer ... method too new"
# (IJulia#1089, julia#51280, julia-vscode#4042). So they are Base objects only: an `IOContext`
# over the pipe, which is an `AbstractPipe` whose `pipe_writer` is Base's own, and which
# carries `:color` for `printstyled`, the logging macros and `showerror`.
#
# Its type parameter is the abstract `Base.LibuvStream`, a parametrisation Base builds only from
# these two objects: `IOContext(io::IO, dict)` takes `typeof(io)` of a plain stream, so no
# other context is one. A context derived from ours, such as `IOContext(stderr, :k => v)`, is
# `IOContext{PipeEndpoint}` up to release-1.10 (base/show.jl unwraps to `typeof(io.io)`) and
# ours again from release-1.12 on (`IOContext(io::IOContext, dict) = typeof(io)(io.io, dict)`,
# base/show.jl release-1.12 and master); the methods below are right for both, since they ask
# only which pipe is inside. In the current world they add what the kernel needs; in Base's
# loading world they do not exist, and Base's own `AbstractPipe` methods write straight to the
# pipe (stderr then goes to fd 2, still stderr, ordered against stdout only as two pipes are).

"""The type of Julia's `stdout` and `stderr` in a kernel: a Base type (see above)."""
const StdioContext = IOContext{Base.LibuvStream}

# The properties are IJulia's for its stdio (JuliaLang/IJulia.jl src/stdio.jl, `IJuliaStdio`):
# `:color`, and `:jupyter_stream` naming the stream ("stdout", "stderr"). They sit in the
# IOContext's own dict, so every derivation keeps them: `IOContext(stdout, :compact => true)`
# and the logger's `IOContext(buf, stream)` (Base.ioproperties(::IOContext) is the dict,
# JuliaLang/julia release-1.12 and master base/show.jl; `unwrapcontext` on release-1.10). IJulia's
# own wrapper is no IOContext, and on 1.12+ its derivations keep only `:color`.
function stdio_context(pipe::Base.LibuvStream, color::Bool, name::String)
    dict = Base.ImmutableDict{Symbol,Any}(:color, color)
    return StdioContext(pipe, Base.ImmutableDict{Symbol,Any}(dict, :jupyter_stream, name))
end

# Julia's `stderr` travels in the stdout pipe, between TO_STDERR and TO_STDOUT, when the
# supervisor reads the pipes: it reads two pipes in no particular order, and a cell's prints to
# stdout and stderr must keep theirs. fd 2 itself (C, child processes: `pipe_writer`) stays
# the stderr pipe.
tagged(s::StdioContext) = SUPERVISOR_READS[] && s.io === STDERR_PIPE[]

# `s.io` is typed `LibuvStream`: each method below branches on the one concrete type it holds
# (the pipes are PipeEndpoints), so that the call dispatches statically and a flood of printlns
# stays as fast as it was with a concretely typed wrapper (bench "200,000 println lines").
# Writes are counted for the buffering switch (flusher_loop): how fast Julia code prints.
function Base.unsafe_write(s::StdioContext, p::Ptr{UInt8}, n::UInt)
    WRITTEN[] += n
    if SHELLS_USED[]
        c = current_ctx()
        # (no heads where the pumps forward the output: Windows routes it by time)
        c === nothing || isempty(c.out_head) ||
            return write_between(s.io === STDERR_PIPE[] ? c.err_head : c.out_head, p, n)
    end
    io = s.io
    if !tagged(s)
        return io isa Base.PipeEndpoint ? unsafe_write(io, p, n) : unsafe_write(io, p, n)
    end
    return write_between(TO_STDERR, p, n)
end

"""
    write_between(head, p, n)

Write `n` bytes at `p` into the stdout pipe between `head` and TO_STDOUT, in one write, so that
no other task's output comes between: Julia's stderr (head TO_STDERR), or a beside evaluation's
stdout or stderr (its EvalCtx's `out_head` / `err_head`: ROUTE, its id in 16 hex digits, `o` or
`e`; supervisor/pipes.py reads them).
"""
function write_between(head::Vector{UInt8}, p::Ptr{UInt8}, n::UInt)
    a, b = length(head), length(TO_STDOUT)
    buf = Vector{UInt8}(undef, a + n + b)
    copyto!(buf, 1, head, 1, a)
    GC.@preserve buf unsafe_copyto!(pointer(buf, a + 1), p, n)
    copyto!(buf, a + n + 1, TO_STDOUT, 1, b)
    write(PIPES["stdout"], buf)
    return Int(n)
end

"""The pipe code that routes what follows to beside evaluation `id`'s `stream` ('o' or 'e')."""
route_head(id::Int, stream::Char) = SUPERVISOR_READS[] ?
    vcat(ROUTE, codeunits(string(id; base = 16, pad = 16)), UInt8(stream)) : UInt8[]

function Base.write(s::StdioContext, b::UInt8)
    (tagged(s) || output_ctx() !== nothing) && return write(s, UInt8[b])
    WRITTEN[] += 1
    io = s.io
    return io isa Base.PipeEndpoint ? write(io, b) : write(io, b)
end
function Base.flush(s::StdioContext)
    (tagged(s) || SHELLS_USED[]) && flush_pending(PIPES["stdout"])
    io = s.io
    return io isa Base.PipeEndpoint ? flush_pending(io) : flush(io)
end
Base.lock(s::StdioContext) = (io = s.io; io isa Base.PipeEndpoint ? lock(io) : lock(io))
Base.unlock(s::StdioContext) = (io = s.io; io isa Base.PipeEndpoint ? unlock(io) : unlock(io))

# One write per println, as a terminal shows it: Base's println writes its text and then the
# newline, and the supervisor, reading the pipe while Julia writes, would pass them on as two
# outputs (a notebook then stores two stream outputs for one line). While writes are buffered
# (a cell printing heavily) both land in the buffer anyway, and Base's println is faster.
function Base.println(s::StdioContext, xs...)
    BUFFERED[] && !tagged(s) && return invoke(println, Tuple{IO,Vararg{Any}}, s, xs...)
    buf = IOBuffer()
    ctx = IOContext(buf, s)   # the same :color as the stream itself
    for x in xs
        print(ctx, x)
    end
    write(buf, '\n')
    write(s, take!(buf))
    return nothing
end

@static if !isdefined(Base, :RedirectStdStream)
    # Julia 1.5 and 1.6 redirect only to a LibuvStream or IOStream (1.5.3 base/stream.jl,
    # `redirect_stdout(handle::Union{LibuvStream, IOStream})`), so the usual
    # `old = stdout; redirect_stdout(pipe); ...; redirect_stdout(old)` (Suppressor.jl) would fail
    # to restore. 1.7 and newer take any AbstractPipe, an IOContext included:
    # `(f::RedirectStdStream)(io::AbstractPipe)` redirects the fd to `pipe_writer(io)` and sets
    # the global to `io` itself (JuliaLang/julia release-1.10, release-1.12 and master
    # base/stream.jl).
    function Base.redirect_stdout(s::StdioContext)
        redirect_stdout(s.io)
        Core.eval(Base, :(stdout = $s))
        return s
    end
    function Base.redirect_stderr(s::StdioContext)
        redirect_stderr(s.io)
        Core.eval(Base, :(stderr = $s))
        return s
    end
end

# The stream under Julia's `stderr` at start-up, which writes to fd 2 (the supervisor's pipe).
# What Base hands us there differs by version, so look rather than assume: 1.5.3 gives the bare
# `PipeEndpoint`; 1.6 and newer wrap a non-TTY stream as `IOContext(stderr, :color => ...)` when
# a colour flag is given (JuliaLang/julia#36689; base/libuv.jl `reinit_stdio` on release-1.10,
# release-1.12 and master), and the kernelspec passes --color=yes. Anything else (a file, a
# stream type of a later Base) gets a pipe stream of our own on a duplicate of fd 2.
function stream_on_fd2(io::IO)
    while io isa IOContext
        io = io.io
    end
    io isa Base.LibuvStream && return io
    diag("stderr at start-up is ", typeof(io), ", not a libuv stream: writing to a copy of fd 2")
    return Base.PipeEndpoint(Base.Libc.dup(RawFD(2)))
end

function redirect_output!()
    # The original stdout is the startup log: keep it as the diagnostic channel. What Julia
    # buffered for it so far (a -L file's println) goes there before the swap.
    quietly(() -> flush(stdout))
    DIAG[] = stdout
    fd = tryparse(Int, get(ENV, "JUTUL_JKERNEL_STDOUT_FD", ""))
    mark = get(ENV, "JUTUL_JKERNEL_MARK", "")
    delete!(ENV, "JUTUL_JKERNEL_STDOUT_FD")
    delete!(ENV, "JUTUL_JKERNEL_MARK")
    if fd !== nothing && occursin(r"^[0-9a-f]{16}$", mark)
        # The supervisor reads both pipes: fd 2 is one from the start, and `fd` is the write
        # end of the other, moved onto fd 1 here (so start-up messages stayed in the log).
        SUPERVISOR_READS[] = true
        # The codes after the prefix are supervisor/pipes.py's DRAIN, TO_STDERR and TO_STDOUT.
        prefix = "\0\x1fJJK" * mark
        append!(empty!(MARK), codeunits(prefix * "\x1f\0"))
        append!(empty!(TO_STDERR), codeunits(prefix * "e\0"))
        append!(empty!(TO_STDOUT), codeunits(prefix * "o\0"))
        append!(empty!(ROUTE), codeunits(prefix * "r\0"))
        wr_out = Base.PipeEndpoint(RawFD(fd))
        ccall(:fcntl, Cint, (Cint, Cint, Cint), fd, 2, 1)   # F_SETFD FD_CLOEXEC: fd 1 is enough
        redirect_stdout(wr_out)
        wr_err = stream_on_fd2(stderr)
        # Our own descriptors of both pipes, which no redirect_stdout/stderr in a cell moves
        # (see pipes_read): the stdout pipe's stays open under wr_out, fd 2 is duplicated.
        if FIONREAD_WORKS
            err_fd = Base.Libc.dup(RawFD(2))
            ccall(:fcntl, Cint, (RawFD, Cint, Cint), err_fd, 2, 1)   # F_SETFD FD_CLOEXEC
            append!(empty!(PIPE_FDS), (RawFD(fd), err_fd))
        end
        # libuv opened both non-blocking: C's writes to a full pipe would fail and be lost.
        # Blocking, every writer waits for the supervisor instead (as after any child process).
        for w in (wr_out, wr_err)
            ccall(:uv_stream_set_blocking, Cint, (Ptr{Cvoid}, Cint), w.handle, 1) == 0 ||
                diag("could not make ", w, " blocking")
        end
    else
        rd_out, wr_out = redirect_stdout()
        rd_err, wr_err = redirect_stderr()
    end
    PIPES["stdout"] = wr_out
    PIPES["stderr"] = wr_err
    STDERR_PIPE[] = wr_err
    line_buffer_c_stdout!()
    # Only the Julia objects change: fd 1 and 2 (C, child processes) already are the pipes.
    Core.eval(Base, :(stdout = $(stdio_context(wr_out, COLOR[], "stdout"))))
    Core.eval(Base, :(stderr = $(stdio_context(wr_err, COLOR[], "stderr"))))
    # The default logger captured the old stderr object: replace it with Base's own logger
    # (a logger of ours would be called from Base's loading world too).
    global_logger(ConsoleLogger(stderr))
    if !SUPERVISOR_READS[]
        @async pump(rd_out, "stdout")
        @async pump(rd_err, "stderr")
    end
end
