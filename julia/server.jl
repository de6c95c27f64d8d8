# server.jl: the Julia end of jutul-jkernel. Standard library only; Julia 1.5.3 or newer.
#
#     julia [flags] server.jl <port>
#
# with JUTUL_JKERNEL_TOKEN set in the environment (never in argv), and
# JUTUL_JKERNEL_STARTUP_FILE=no when the user's startup file must not run (it runs at the start
# of the first evaluation otherwise; Julia itself always gets --startup-file=no). The server
# removes both from ENV and the port from ARGS. The server connects to
# 127.0.0.1:<port>, and from then on everything travels as frames: an ASCII header line
# `KIND arg... NBYTES\n` followed by exactly NBYTES payload bytes. jutul_jkernel/protocol.py
# defines the same kinds; change both or neither.
#
# Julia -> Python
#   RDY <token> 0                  handshake, always the first frame
#   INF <n>                        JSON: julia_version, pid, threads
#   OUT <stdout|stderr> <n>        live bytes written to fd 1 / fd 2 (Julia, C, child processes)
#   DSP <id> <n>                   JSON: display_data or update_display_data of evaluation <id>
#   CLR <id> <wait 0|1> 0          clear_output
#   VAL <id> <n>                   JSON MIME bundle of the value, only when richer than text/plain
#   ERR <id> <n>                   JSON {ename, evalue, traceback} before RES <id> err|int
#   RES <id> <ok|err|int> <n>      the one result of evaluation <id>: ok carries the REPL text
#                                  of the value (empty for nothing or a trailing `;`), err and int
#                                  the error text; capped at 64 KiB with a note of what was cut
#   INP <id> <password 0|1> <n>    evaluation <id> reads a line from stdin; payload: the prompt
#   ANS <id> <n>                   JSON answer to QRY <id>
#   PAY <id> <n>                   JSON execute_reply payload of evaluation <id> (IJulia.load:
#                                  {"source": "set_next_input", "text": ..., "replace": ...})
#   ACK <n> 0                      answer to SYN <n>; for evaluation <n>: an interrupt reached it
#                                  (the listener handed an INT frame over, or the evaluation
#                                  caught one that came by signal). No ACK: it is not yielding
# Python -> Julia
#   EXE <id> <n>                   code to evaluate (queued; evaluated one at a time, in order);
#                                  backtraces call it In[<id>]
#   EXN <id> <name> <n>            the same, naming the code <name> (e.g. In[3], Jupyter's count)
#   INT <id> 0                     interrupt evaluation <id>; ignored unless it is running
#   TXT <id> <n>                   the line typed in answer to INP <id>
#   NIN <id> <n>                   no line can be had for INP <id>; payload says why
#   QRY <id> <op> <cursor> <n>     op: complete | inspect | is_complete; payload: the code;
#                                  cursor counts Unicode code points, as Jupyter does
#   SYN <seq> 0                    answered with ACK <seq>
#
# Output: fd 1 is redirected into an in-process pipe. fd 2 is a pipe the supervisor made and
# also holds the read end of (JUTUL_JKERNEL_STDERR_FD names the server's copy), so what Julia
# writes while dying can still be read; without that variable fd 2 is redirected in-process
# too. A pump task per stream forwards what arrives as OUT frames. At the end of an evaluation
# the server flushes Julia's and C's buffers and writes a marker into each pipe; RES is sent
# only once both pumps have passed their marker, so all of an evaluation's output is on the
# wire before its result. User code sees `stdout` and `stderr` as KernelStdio wrappers of those
# pipes that carry `:color` when Julia runs with --color=yes.
#
# Interrupts: SIGINT is thrown into whichever task runs on thread 1, which is often not the
# evaluating one. Every long-lived task here catches InterruptException and forwards it to the
# evaluation with `schedule(task, InterruptException(); error=true)`; an interrupt that lands in
# a finished task reaches the same forwarding through Base.active_repl_backend (see
# install_interrupt_sink!). INT frames use the same path and need no signal. Frame writes run
# with SIGINT deferred so an interrupt cannot tear a frame. The server starts no short-lived
# tasks: on Julia 1.5 a SIGINT landing in a finished task while others are queued is fatal.
#
# The server exits when its socket closes, and on Linux when its parent dies.

module JKernel

# This module is I/O glue: LLVM optimisation buys nothing and costs start-up time.
@static if isdefined(Base.Experimental, Symbol("@optlevel"))
    Base.Experimental.@optlevel 0
end

using Sockets
using REPL
using Base64: base64encode
using Logging: ConsoleLogger, global_logger

const RESULT_CAP = 64 * 1024          # bytes of a RES payload; streamed output is never capped
const RICH_CAP = 32 * 1024 * 1024     # bytes of one VAL / DSP bundle (images must not be cut)
const OUT_CHUNK = 1024 * 1024         # largest OUT payload
const STDOUT_BUFFER = 64 * 1024       # buffered Julia writes: 40x faster for tiny printlns
const FLUSH_INTERVAL = 0.05           # seconds between flushes while a cell runs (live output)
# Buffering reorders Julia's prints against child processes and C writing to the same fd, so it
# is switched on only while a cell prints heavily (bytes forwarded per FLUSH_INTERVAL).
const BUFFER_ON_BYTES = 16 * 1024
const BUFFER_OFF_BYTES = 2 * 1024
const BUFFER_OFF_TICKS = 4          # quiet intervals in a row before buffering goes off
const DRAIN_TIMEOUT = 5.0             # seconds to wait for a pump to pass its marker
const MAX_HEADER = 256
const MAX_PAYLOAD = 256 * 1024 * 1024
const RICH_MIMES = ("text/html", "text/markdown", "text/latex", "image/svg+xml",
                    "image/png", "image/jpeg", "application/json")
const BINARY_MIMES = ("image/png", "image/jpeg")
const DISPLAY_SIZE = (30, 100)

# ---- state (one server per process) ----

const SOCK = Ref{TCPSocket}()
const DIAG = Ref{IO}()                 # the process's original stdout: the startup log
const EVAL_TASK = Ref{Task}()
const CURRENT = Ref(0)                 # id of the running evaluation, 0 when idle
const LAST_ID = Ref(0)                 # parent of output produced between evaluations
const IN_USER = Ref(false)             # the evaluating task is inside user code
const PENDING_INTERRUPT = Ref(false)   # an interrupt arrived while the server held the task
const INTERRUPTED_BEFORE_START = Ref(0) # id of a queued evaluation interrupted before it ran
const QUEUE = Channel{Tuple{Int,String,String,Bool}}(Inf)   # id, code, name, a named cell
const INPUT_WAIT = Ref{Union{Nothing,Channel{Any}}}(nothing)
const PIPES = Dict{String,Any}()       # "stdout"/"stderr" => write end of our pipe
const MARK = Vector{UInt8}("\0\x1fJJK" * string(rand(UInt64); base = 16, pad = 16) * "\x1f\0")
const MARKS_SEEN = Dict("stdout" => 0, "stderr" => 0)
const MARKS_SENT = Ref(0)
const DRAINED = Condition()
const DRAIN_DEADLINE = Ref(Inf)      # when the running drain gives up (see flusher_loop)
const FORWARDED = Ref(0)               # output bytes forwarded, for the buffering switch
const BUFFERED = Ref(false)
const QUIET_TICKS = Ref(0)
const COLOR = Ref(false)               # Julia runs with --color=yes: stdout, stderr, tracebacks
const STARTUP_PENDING = Ref(false)     # the startup file still has to run (in the first cell)

# ---- small helpers ----

"""Run `f()`, ignoring its errors but never an interrupt (it must reach forward_interrupt)."""
function quietly(f)
    try
        f()
    catch e
        e isa InterruptException && rethrow()
    end
    nothing
end

diag(msg...) = quietly() do
    println(DIAG[], "jutul-jkernel server: ", msg...)
    flush(DIAG[])
end

"""
    guarded(f, name)

Run `f()` until it returns `false`. An InterruptException that lands here is forwarded to the
evaluation instead of killing this task; any other error is logged and `f` runs again, since
every task that uses this is one the server cannot do without.
"""
function guarded(f, name::String)
    while true
        try
            f() === false && return
        catch e
            if e isa InterruptException
                forward_interrupt()
            else
                diag("task ", name, " failed (resuming): ", sprint(showerror, e, catch_backtrace()))
                sleep(0.05)   # no hot loop if it fails again at once
            end
        end
    end
end

"""
    forward_interrupt()

Deliver an interrupt to the running evaluation, or drop it when nothing runs; return whether
it will reach the evaluation.
"""
function forward_interrupt()
    CURRENT[] == 0 && return false
    t = EVAL_TASK[]
    if IN_USER[] && t !== current_task() && !istaskdone(t)
        # schedule(...; error=true) first takes the task off whatever queue it waits in, so a
        # second interrupt just replaces the first.
        schedule(t, InterruptException(); error = true)
    else
        PENDING_INTERRUPT[] = true
    end
    return true
end

function json(io::IO, x::AbstractDict)
    print(io, '{')
    first = true
    for (k, v) in x
        first || print(io, ',')
        first = false
        json(io, string(k))
        print(io, ':')
        json(io, v)
    end
    print(io, '}')
end
function json(io::IO, x::Union{AbstractVector,Tuple})
    print(io, '[')
    for (i, v) in enumerate(x)
        i > 1 && print(io, ',')
        json(io, v)
    end
    print(io, ']')
end
json(io::IO, x::Bool) = print(io, x ? "true" : "false")
json(io::IO, x::Integer) = print(io, x)
json(io::IO, x::AbstractFloat) = isfinite(x) ? print(io, Float64(x)) : print(io, "null")
json(io::IO, ::Nothing) = print(io, "null")
function json(io::IO, s::AbstractString)
    print(io, '"')
    for c in s
        if !isvalid(c)
            print(io, '\ufffd')
        elseif c == '"'
            print(io, "\\\"")
        elseif c == '\\'
            print(io, "\\\\")
        elseif c == '\n'
            print(io, "\\n")
        elseif c < ' ' || c == '\x7f'
            print(io, "\\u", string(UInt32(c); base = 16, pad = 4))
        else
            print(io, c)
        end
    end
    print(io, '"')
end
json(x) = (io = IOBuffer(); json(io, x); take!(io))

"""Cut `s` to at most `cap` bytes on a character boundary, saying how much was cut."""
function capped(s::String, cap::Int = RESULT_CAP)
    sizeof(s) <= cap && return s
    i = thisind(s, cap - 200)
    cut = sizeof(s) - (i - 1)
    return string(s[1:prevind(s, i)], "\n[... ", cut, " more bytes cut: results are capped at ",
                  cap, " bytes; print large output instead]")
end

"""
    on_thread_one(f)

Run `f` on thread 1 and return its value. Display, clear_output, input and payloads wait on
the server's Conditions, which belong to thread 1 (where every server task runs, as SIGINT
does); a `Threads.@spawn` task on another thread hands the work over through a thread-safe
Channel instead, and waits for the answer.
"""
function on_thread_one(f)
    Threads.threadid() == 1 && return f()
    answer = Channel{Any}(1)
    put!(THREAD_ONE_WORK, (f, answer))
    result = take!(answer)
    result isa CapturedException && throw(result.ex)
    return result
end

const THREAD_ONE_WORK = Channel{Tuple{Any,Channel{Any}}}(Inf)

function thread_one_loop()
    guarded("thread one") do
        while true
            f, answer = take!(THREAD_ONE_WORK)
            result = try
                f()
            catch e
                CapturedException(e, catch_backtrace())
            end
            put!(answer, result)
        end
    end
end

# ---- frames ----

"""
    send_frame(kind, args, payload)

Write one frame; `args` is the header's arguments as one string ("" for none). Strings keep this
to one compiled specialization, which matters for start-up time.
"""
function send_frame(kind::String, args::String, payload::AbstractVector{UInt8} = UInt8[])
    io = IOBuffer()
    write(io, kind)
    isempty(args) || write(io, ' ', args)
    write(io, ' ', string(length(payload)), '\n')
    write(io, payload)
    buf = take!(io)
    # One write call submits the whole frame to libuv, so frames from different tasks never
    # interleave; SIGINT is deferred so it cannot abandon a half-submitted write.
    disable_sigint() do
        try
            write(SOCK[], buf)
        catch e
            e isa InterruptException && rethrow()
            RELEASING[] && return   # release_workers is under way and exits when done
            diag("socket write failed (", sprint(showerror, e), "); exiting")
            Base.invokelatest(release_workers)
            exit(0)
        end
    end
    return nothing
end
send_frame(kind::String, args::String, payload::String) = send_frame(kind, args, codeunits(payload))

protocol_failure(msg) = (diag("protocol error: ", msg, "; closing the connection"); exit(86))

const INCOMING = Dict("EXE" => 1, "EXN" => 2, "INT" => 1, "TXT" => 1, "NIN" => 1, "QRY" => 3, "SYN" => 1)

# Numbers on the wire are plain decimal, as protocol.py writes and checks them: tryparse alone
# would also take "0x10", "+1", "01" and trailing whitespace.
const WIRE_NUMBER = r"^(0|[1-9][0-9]{0,17})$"
wire_number(s) = occursin(WIRE_NUMBER, s) ? parse(Int, s) : nothing

"""Parse complete frames from `buf`; return how many bytes were consumed."""
function parse_frames!(buf::Vector{UInt8}, handle)
    pos = 1
    while true
        nl = findnext(isequal(UInt8('\n')), buf, pos)
        if nl === nothing
            length(buf) - pos + 1 >= MAX_HEADER &&
                protocol_failure("no header end within $MAX_HEADER bytes")
            return pos - 1
        end
        nl - pos >= MAX_HEADER && protocol_failure("header longer than $MAX_HEADER bytes")
        header = String(buf[pos:nl-1])
        parts = split(header, ' ')
        arity = get(INCOMING, parts[1], -1)
        arity < 0 && protocol_failure("unknown frame kind in header $(repr(header))")
        length(parts) == arity + 2 || protocol_failure("wrong argument count in header $(repr(header))")
        nbytes = wire_number(parts[end])
        (nbytes === nothing || nbytes > MAX_PAYLOAD) &&
            protocol_failure("bad NBYTES in header $(repr(header))")
        id = wire_number(parts[2])
        (id === nothing || id < 1) && protocol_failure("bad id in header $(repr(header))")
        length(buf) - nl < nbytes && return pos - 1
        payload = buf[nl+1:nl+nbytes]
        pos = nl + nbytes + 1
        handle(String(parts[1]), id, parts[3:end-1], payload)
    end
end

const QUERIES = Channel{Tuple{Int,String,String,Int}}(Inf)   # id, op, code, cursor
const QUERY_OPS = ("complete", "inspect", "is_complete")

"""Answer queries one at a time, beside evaluations (a long-lived task, as all of ours are)."""
function query_loop()
    guarded("queries") do
        while true
            id, op, code, cursor = take!(QUERIES)
            answer = try
                # latest world: completion must see methods (propertynames...) users define
                Base.invokelatest(answer_query, op, code, cursor)
            catch e
                e isa InterruptException && rethrow()
                Dict("error" => sprint(showerror, e))
            end
            send_frame("ANS", string(id), json(answer))
        end
    end
end

function listen_loop()
    buf = UInt8[]
    sock = SOCK[]
    guarded("listener") do
        while true
            data = readavailable(sock)   # one take from the buffer: an interrupt loses nothing
            if isempty(data) && eof(sock)
                Base.invokelatest(release_workers)   # first: the supervisor gives us 1 s
                diag("socket closed by the supervisor; exiting")
                exit(0)
            end
            append!(buf, data)
            used = disable_sigint(() -> parse_frames!(buf, handle_frame))
            deleteat!(buf, 1:used)
        end
    end
end

function handle_frame(kind::String, id::Int, args, payload::Vector{UInt8})
    if kind == "EXE"
        put!(QUEUE, (id, String(payload), "In[$id]", false))
    elseif kind == "EXN"
        put!(QUEUE, (id, String(payload), String(args[1]), true))
    elseif kind == "INT"
        if id == CURRENT[] && forward_interrupt()
            send_frame("ACK", string(id))
        elseif id > LAST_ID[]
            # Sent but not started (the first cell compiles the server for a second): it
            # starts interrupted, with no signal needed.
            INTERRUPTED_BEFORE_START[] = id
            send_frame("ACK", string(id))
        end
    elseif kind == "TXT" || kind == "NIN"
        ch = INPUT_WAIT[]
        if ch !== nothing && id == CURRENT[] && !isready(ch)   # public API, not ch.data (audit row 4)
            put!(ch, kind == "TXT" ? String(payload) : ErrorException(String(payload)))
        end
    elseif kind == "QRY"
        op = String(args[1])
        op in QUERY_OPS || protocol_failure("unknown query $(repr(op)) in QRY $id")
        cursor = wire_number(args[2])
        cursor === nothing && protocol_failure("bad cursor in QRY $id")
        put!(QUERIES, (id, op, String(payload), cursor))
    elseif kind == "SYN"
        send_frame("ACK", string(id))
    end
end

# ---- output capture ----

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

# ---- display ----

struct KernelDisplay <: AbstractDisplay end

const DISPLAY_COUNTER = Ref(0)

"""MIME bundle of `x`: text/plain always, plus every rich type `x` can show."""
function mime_bundle(x)
    data = Dict{String,Any}()
    for m in RICH_MIMES
        showable(MIME(m), x) && (data[m] = render(MIME(m), x))
    end
    data["text/plain"] = plain_text(x)
    return data
end

"""
    mime_bundle(x, mime)

The bundle `display(mime, x)` shows. As Julia's `display` documents, a string for a text MIME
type and a byte vector for a binary one are data already in that format; anything else must
be `showable(mime, x)`, or this throws the MethodError the REPL would.
"""
function mime_bundle(x, mime::MIME)
    m = string(mime)
    if x isa AbstractString && istextmime(mime)
        return Dict{String,Any}(m => String(x))
    elseif x isa AbstractVector{UInt8} && !istextmime(mime)
        return Dict{String,Any}(m => base64encode(x))
    end
    showable(mime, x) || throw(MethodError(Base.display, (mime, x)))   # Base tries the next display
    data = Dict{String,Any}(m => render(mime, x))
    m == "text/plain" || (data["text/plain"] = plain_text(x))
    return data
end

render(m::MIME, x) = string(m) in BINARY_MIMES ? base64encode(io -> show(io, m, x)) :
    sprint(io -> show(io, m, x))

function plain_text(x)
    io = IOBuffer()
    ctx = IOContext(io, :limit => true, :color => false, :displaysize => DISPLAY_SIZE,
                    :module => Main)
    show(ctx, MIME("text/plain"), x)
    return String(take!(io))
end

"""Send a display message of the running (or last) evaluation, after the output before it."""
send_display(msg::Dict{String,Any}) = on_thread_one(() -> send_display_here(msg))
function send_display_here(msg::Dict{String,Any})
    id = CURRENT[] == 0 ? LAST_ID[] : CURRENT[]
    id == 0 && return
    payload = json(msg)
    if length(payload) > RICH_CAP
        data = msg["data"]
        msg["data"] = Dict{String,Any}("text/plain" => capped(get(data, "text/plain", ""),
            RESULT_CAP) * "\n[rich output of $(length(payload)) bytes dropped: over $RICH_CAP]")
        payload = json(msg)
    end
    server_section() do
        drain_output()
        send_frame("DSP", string(id), payload)
    end
end

"""Run `f` with interrupts held back; an interrupt that arrived meanwhile is thrown after."""
function server_section(f)
    was = IN_USER[]
    IN_USER[] = false
    try
        disable_sigint(f)
    finally
        IN_USER[] = was
    end
    if was && PENDING_INTERRUPT[]
        PENDING_INTERRUPT[] = false
        throw(InterruptException())
    end
end

function display_message(x, mime, display_id, update::Bool)
    data = mime === nothing ? mime_bundle(x) : mime_bundle(x, MIME(string(mime)))
    msg = Dict{String,Any}("data" => data, "metadata" => Dict{String,Any}(), "update" => update)
    display_id === nothing || (msg["transient"] = Dict{String,Any}("display_id" => string(display_id)))
    send_display(msg)
end

Base.display(::KernelDisplay, x) = (display_message(x, nothing, nothing, false); nothing)
Base.display(::KernelDisplay, m::MIME, x) = (display_message(x, m, nothing, false); nothing)
Base.display(d::KernelDisplay, m::AbstractString, x) = display(d, MIME(m), x)
Base.displayable(::KernelDisplay, ::MIME) = true

"""
    JKernel.display(x; display_id=nothing, mime=nothing) -> display_id

Show `x` in the running cell, tagged with `display_id` (a fresh one if `true`) so that
[`update_display`](@ref) can replace it later.
See https://jupyter-client.readthedocs.io/en/latest/messaging.html#display-data
"""
function display(x; display_id = nothing, mime = nothing)
    if display_id === true
        DISPLAY_COUNTER[] += 1
        display_id = string("jkernel-", getpid(), "-", DISPLAY_COUNTER[])
    end
    display_message(x, mime, display_id, false)
    return display_id
end

"""
    JKernel.update_display(x; display_id, mime=nothing)

Replace what an earlier `JKernel.display(...; display_id)` showed, wherever it is.
"""
update_display(x; display_id, mime = nothing) =
    (display_message(x, mime, string(display_id), true); nothing)

"""
    JKernel.clear_output(wait=false)

Clear the output of the running cell; with `wait=true`, only when new output arrives.
"""
clear_output(wait::Bool = false) = on_thread_one(() -> clear_output_here(wait))
function clear_output_here(wait::Bool)
    id = CURRENT[] == 0 ? LAST_ID[] : CURRENT[]
    id == 0 && return
    server_section() do
        drain_output()
        send_frame("CLR", string(id, wait ? " 1" : " 0"))
    end
    nothing
end

# ---- progress ----

const PROGRESS_WIDTH = 30
const PROGRESS_INTERVAL = 0.1   # seconds between redraws: enough to look live, few messages

struct ProgressIterator{I}
    itr::I
    desc::String
end

mutable struct ProgressState
    total::Int          # -1 when the length is unknown
    count::Int
    started::Float64
    drawn::Float64
end

"""
    JKernel.progress(itr; desc="")

Iterate over `itr` while a progress bar redraws in place on stdout (`\r`, at most
10 times a second): JupyterLab and `jupyter console` update it where it is, a stored notebook
shows its last state. `for x in JKernel.progress(xs; desc="fitting") ... end`
"""
progress(itr; desc::AbstractString = "") = ProgressIterator(itr, String(desc))

Base.IteratorSize(::Type{ProgressIterator{I}}) where {I} = Base.IteratorSize(I)
Base.IteratorEltype(::Type{ProgressIterator{I}}) where {I} = Base.IteratorEltype(I)
Base.eltype(::Type{ProgressIterator{I}}) where {I} = eltype(I)
Base.length(p::ProgressIterator) = length(p.itr)
Base.size(p::ProgressIterator, d...) = size(p.itr, d...)

function Base.iterate(p::ProgressIterator)
    total = Base.IteratorSize(p.itr) isa Union{Base.HasLength,Base.HasShape} ? length(p.itr) : -1
    st = ProgressState(total, 0, time(), 0.0)
    draw_progress(p, st, false)
    return progress_step(p, st, iterate(p.itr))
end
Base.iterate(p::ProgressIterator, (inner, st)) = progress_step(p, st, iterate(p.itr, inner))

function progress_step(p::ProgressIterator, st::ProgressState, next)
    if next === nothing
        draw_progress(p, st, true)
        return nothing
    end
    st.count += 1
    now = time()
    if now - st.drawn >= PROGRESS_INTERVAL
        draw_progress(p, st, false)
    end
    return next[1], (next[2], st)
end

function draw_progress(p::ProgressIterator, st::ProgressState, final::Bool)
    done = final ? max(st.count, st.total) : st.count
    elapsed = time() - st.started
    io = IOBuffer()
    print(io, '\r')
    isempty(p.desc) || print(io, p.desc, ' ')
    if st.total >= 0
        frac = st.total == 0 ? 1.0 : min(1.0, done / st.total)
        filled = round(Int, frac * PROGRESS_WIDTH)
        print(io, '[', repeat('#', filled), repeat(' ', PROGRESS_WIDTH - filled), "] ",
              done, '/', st.total, ' ', lpad(round(Int, 100 * frac), 3), '%')
        if !final && 0 < frac < 1
            print(io, "  ETA ", format_seconds(elapsed / frac - elapsed))
        end
    else
        print(io, done, " done")
    end
    final && print(io, "  in ", format_seconds(elapsed), '\n')
    st.drawn = time()
    write(stdout, take!(io))
    flush(stdout)
end

format_seconds(s::Real) = s < 60 ? string(round(s; digits = 1), " s") :
    string(div(round(Int, s), 60), " min ", rem(round(Int, s), 60), " s")

# ---- stdin ----

mutable struct KernelStdin <: IO
    buf::IOBuffer
end

"""
    JKernel.input(prompt=""; password=false) -> String

Ask the frontend for one line (Jupyter's input_request); `readline()` does the same.
"""
input(prompt::AbstractString = ""; password::Bool = false) =
    on_thread_one(() -> input_here(prompt, password))
function input_here(prompt::AbstractString, password::Bool)
    id = CURRENT[]
    id == 0 && error("stdin can only be read while a cell runs")
    ch = Channel{Any}(1)
    server_section() do
        drain_output()
        INPUT_WAIT[] = ch
        send_frame("INP", string(id, password ? " 1" : " 0"), String(prompt))
    end
    reply = try
        take!(ch)
    finally
        INPUT_WAIT[] = nothing
    end
    reply isa Exception && throw(reply)
    return reply::String
end

function fill_line!(io::KernelStdin)
    bytesavailable(io.buf) > 0 && return
    line = input()
    write(io.buf, line, '\n')
    nothing
end
Base.eof(io::KernelStdin) = (fill_line!(io); false)
Base.isopen(::KernelStdin) = true
Base.bytesavailable(io::KernelStdin) = bytesavailable(io.buf)
Base.read(io::KernelStdin, ::Type{UInt8}) = (fill_line!(io); read(io.buf, UInt8))
Base.readavailable(io::KernelStdin) = (fill_line!(io); take!(io.buf))
function Base.readline(io::KernelStdin; keep::Bool = false)
    fill_line!(io)
    return readline(io.buf; keep = keep)
end

# ---- the REPL's cell semantics: history, hooks, modes, soft scope ----

const SOFTSCOPE = Ref(true)          # JUTUL_JKERNEL_SOFTSCOPE=no turns it off (read in main)

"""
    In, Out

`In[n]` is the code of notebook cell `n` and `Out[n]` the value it showed (only cells that
show one), keyed by Jupyter's execution count as in IJulia. `Out` keeps those values alive:
`empty!(Out)` or `IJulia.clear_history()` frees them.
"""
const In = Dict{Int,String}()
const Out = Dict{Int,Any}()

# Hooks run by cells (notebook cells, not user_expressions), as in IJulia: Revise's IJulia
# integration is a pre-execute hook.
const PREEXECUTE_HOOKS = Function[]
const POSTEXECUTE_HOOKS = Function[]
const POSTERROR_HOOKS = Function[]

run_hooks(hooks) = foreach(Base.invokelatest, copy(hooks))

"""The execution count of a cell named `In[n]` (what the kernel sends), else `id`."""
function cell_number(name::String, id::Int)
    m = match(r"^In\[([0-9]{1,9})\]$", name)
    return m === nothing ? id : parse(Int, m.captures[1])
end

"""
    set_main_global!(name, value)

Set `ans` or `err` where the user's REPL keeps them. Julia 1.9 and newer keep both in
`Base.MainInclude`, which Main uses (base/client.jl: `setglobal!(Base.MainInclude, :ans,
value)` in `eval_user_input`); Julia 1.5-1.8 set `Main.ans` directly, and have no `err`, which
then lives in `MainNames`, beside `In` and `Out`, so it never overwrites a user's own `err`.
"""
function set_main_global!(name::Symbol, value)
    if isdefined(Base, :MainInclude) && isdefined(Base.MainInclude, name)
        Core.eval(Base.MainInclude, Expr(:global, Expr(:(=), name, QuoteNode(value))))
    elseif name === :ans
        ccall(:jl_set_global, Cvoid, (Any, Any, Any), Main, :ans, value)
    else
        Core.eval(MainNames, Expr(:global, Expr(:(=), name, QuoteNode(value))))
    end
    nothing
end

"""`err` is what the REPL keeps of the last error: its exception stack (Julia 1.7 and newer,
`current_exceptions`), or the exception itself on older Julia."""
set_err!(e) = set_main_global!(:err, isdefined(Base, :current_exceptions) ?
    Base.invokelatest(getfield(Base, :current_exceptions)) : e)

"""
    mode_line(code) -> Union{String,Nothing}

The one command of a `?`, `]` or `;` cell, as IJulia finds it: blank and `#` comment lines are
ignored, and exactly one line must remain.
"""
function mode_line(code::String)
    found = nothing
    for line in eachline(IOBuffer(code))
        stripped = strip(line)
        (isempty(stripped) || startswith(stripped, '#')) && continue
        found === nothing || return nothing
        found = String(stripped)
    end
    return found !== nothing && first(found) in ('?', ']', ';') ? found : nothing
end

"""Evaluate a cell: a REPL mode command, or Julia code through the backend's AST transforms."""
function eval_cell(mod::Module, code::String, filename::String)
    line = mode_line(code)
    if line !== nothing
        rest = strip(line[nextind(line, 1):end])
        # help as the cell's value, saved with the notebook as IJulia does; apropos prints
        first(line) == '?' && return eval_help(REPL.helpmode(stdout, String(rest)))
        first(line) == ']' && return pkg_mode(rest)
        return shell_mode(mod, rest)
    end
    ast = local_ijulia_imports(parse_cell(code, filename))
    for f in BACKEND[].ast_transforms
        ast = Base.invokelatest(f, ast)
    end
    return Core.eval(mod, ast)
end

const PKG_ID = Base.PkgId(Base.UUID("44cfe95a-1eb2-52ea-b672-e2afdf69b78f"), "Pkg")

"""`] cmd`: Pkg's REPL mode against the active project. Pkg loads on first use (~1 s)."""
function pkg_mode(cmd::AbstractString)
    pkg = Base.require(PKG_ID)
    mode = getfield(pkg, :REPLMode)
    # `pkgstr` is what pkg"..." calls (Pkg 1.5 to current); newer Pkg also has do_cmds.
    if isdefined(mode, :pkgstr)
        Base.invokelatest(getfield(mode, :pkgstr), String(cmd))
    else
        Base.invokelatest(getfield(mode, :do_cmds), String(cmd), stdout)
    end
    nothing
end

"""
    shell_mode(mod, line)

`;cmd`: the REPL's shell mode, with `\$` interpolation from `mod` and `cd` changing the kernel's
directory. The command runs through \$JULIA_SHELL / \$SHELL like the REPL's (base/client.jl,
`repl_cmd`), with its output captured at the fd level; an interrupt ends the command too,
as Ctrl-C at the REPL does by signalling its process group.
"""
function shell_mode(mod::Module, line::AbstractString)
    cmd = Core.eval(mod, :(Base.cmd_gen($(Base.shell_parse(String(line))[1]))))
    (isempty(cmd.exec) || cmd.exec[1] == "cd") && return Base.repl_cmd(cmd, stdout)
    cmd.exec .= expanduser.(cmd.exec)
    if !Sys.iswindows() && isdefined(Base, :shell_escape_posixly)
        shell = Base.shell_split(get(ENV, "JULIA_SHELL", get(ENV, "SHELL", "/bin/sh")))
        cmd = `$shell -c $("(" * Base.shell_escape_posixly(cmd) * ") && true")`
    end
    # A process group of its own (detach), so that an interrupt can end the shell and what it
    # started, as Ctrl-C does to a terminal's foreground group.
    proc = run(pipeline(Cmd(ignorestatus(cmd); detach = true);
                        stdin = devnull, stdout = stdout, stderr = stderr); wait = false)
    try
        wait(proc)
    catch
        quietly() do
            signal_group(proc, 2)                         # SIGINT
            timedwait(() -> !process_running(proc), 2.0)
            process_running(proc) && signal_group(proc, 9)  # SIGKILL
        end
        rethrow()
    end
    nothing
end

signal_group(proc, sig) = Sys.iswindows() ? kill(proc, sig) :
    ccall(:kill, Cint, (Cint, Cint), -getpid(proc), sig)

"""
    local_ijulia_imports(ast)

`using IJulia` / `import IJulia` in a cell bind the kernel's own `IJulia` module (see
`IJulia` below) instead of loading the package: in Main the name is already taken, and the
package's functions need a kernel of its own.
"""
function local_ijulia_imports(ast)
    ast isa Expr || return ast
    if ast.head === :toplevel || ast.head === :block
        return Expr(ast.head, map(local_ijulia_imports, ast.args)...)
    elseif ast.head in (:using, :import)
        return Expr(ast.head, map(local_ijulia_path, ast.args)...)
    end
    return ast
end
local_ijulia_path(p) = p == Expr(:., :IJulia) ? Expr(:., :., :IJulia) :
    (p isa Expr && p.head === :(:)) ? Expr(:(:), local_ijulia_path(p.args[1]), p.args[2:end]...) : p

# ---- Julia 1.14-DEV: ^C cancels a scoped token instead of throwing InterruptException ----
# On master (NEWS "Julia v1.14": cancellation, #60281), `_start` runs the whole script under
# a ^C episode token, every @async task inherits it, and once cancelled every wait, sleep and
# socket write throws `Base.CancellationRequest`, which would end the server's own loops. So
# the server's tasks run with no token, and each cell under a fresh episode's token, as the
# REPL backend does (read in base/task.jl and base/client.jl at master, 2026-08). Everything
# here is gated on the names existing; on Julia 1.5-1.13 it does nothing.

is_cancellation(e) = isdefined(Base, :CancellationRequest) &&
    e isa getfield(Base, :CancellationRequest)

const HAS_CANCEL_SCOPES = isdefined(Base, :sigint_new_episode!) && isdefined(Base, :CANCEL_TOKEN)

function with_cancel_token(f, token)
    if isdefined(Base, :with_cancel_token)
        return getfield(Base, :with_cancel_token)(f, token)
    end
    return getfield(Base, :ScopedValues).with(f, getfield(Base, :CANCEL_TOKEN) => token)
end

"""Run `f` (the server's start-up, whose tasks inherit the scope) where ^C cancels nothing."""
outside_cancel_scope(f) = HAS_CANCEL_SCOPES ? with_cancel_token(f, nothing) : f()

"""Run a cell's code under a fresh ^C episode, as the REPL runs each evaluation."""
in_cell_scope(f) = HAS_CANCEL_SCOPES ?
    with_cancel_token(f, getfield(Base, :sigint_new_episode!)()) : f()

# ---- what Main sees: In, Out, err, and IJulia's notebook API ----

"""
    IJulia

The part of IJulia's API that notebooks call without `using IJulia` (course notebooks call
`IJulia.clear_output(true)` in loops): output clearing, the cell hooks, `load`, and history.
`IJulia.inited` is `true`, which is how packages tell that they run in a notebook. A cell's
`using IJulia` binds this module rather than the IJulia package, whose functions need a kernel
of their own.
"""
module IJulia

import ..JKernel

const inited = true
const In = JKernel.In
const Out = JKernel.Out

"""Clear the cell's output; with `wait=true`, only when new output arrives."""
clear_output(wait::Bool = false) = JKernel.clear_output(wait)

push_preexecute_hook(f::Function) = push!(JKernel.PREEXECUTE_HOOKS, f)
push_postexecute_hook(f::Function) = push!(JKernel.POSTEXECUTE_HOOKS, f)
push_posterror_hook(f::Function) = push!(JKernel.POSTERROR_HOOKS, f)
pop_preexecute_hook(f::Function) = pop_hook!(f, JKernel.PREEXECUTE_HOOKS)
pop_postexecute_hook(f::Function) = pop_hook!(f, JKernel.POSTEXECUTE_HOOKS)
pop_posterror_hook(f::Function) = pop_hook!(f, JKernel.POSTERROR_HOOKS)

function pop_hook!(f, hooks)
    i = findlast(isequal(f), hooks)
    i === nothing && error("no such hook: $f")
    return splice!(hooks, i)
end

"""Put `s` into a new cell below this one (Jupyter's set_next_input); `replace=true` replaces
this cell's code instead."""
function load_string(s::AbstractString, replace::Bool = false)
    JKernel.send_payload(Dict("source" => "set_next_input", "text" => String(s),
                              "replace" => replace))
end
"""Put the contents of `filename` into a new cell, like IPython's `%load`."""
load(filename::AbstractString, replace::Bool = false) = load_string(read(filename, String), replace)

"""Accepted for IJulia's notebooks; output is never capped in this kernel."""
function set_max_stdio(n::Integer)
    println(stderr, "IJulia.set_max_stdio($n): jutul-jkernel never caps a cell's output; ",
            "nothing to change.")
    nothing
end

set_verbose(v::Bool = true) = nothing

"""Forget `In` and `Out` (all, or the given cell numbers), so their values can be freed."""
clear_history() = (empty!(In); empty!(Out); nothing)
clear_history(cells) = (foreach(n -> (delete!(In, n); delete!(Out, n)), cells); nothing)

"""Print the code of the cells so far (or of the given cell numbers)."""
history(io::IO = stdout) = history(io, sort!(collect(keys(In))))
history(io::IO, cells) = foreach(n -> haskey(In, n) && println(io, In[n]), cells)

end # module IJulia

"""Names every cell sees through `using` (so a user's own definition simply shadows them)."""
module MainNames
import ..JKernel
const In = JKernel.In
const Out = JKernel.Out
const IJulia = JKernel.IJulia
err = nothing
export In, Out, IJulia   # and `err` on Julia without Base.MainInclude.err: see set_up_main!
end

send_payload(item::Dict{String,Any}) = on_thread_one(() -> send_payload_here(item))
function send_payload_here(item::Dict{String,Any})
    id = CURRENT[]
    id == 0 && error("this works only while a cell runs")
    send_frame("PAY", string(id), json(item))
    nothing
end

# ---- evaluation ----

mutable struct Backend
    backend_task::Task
    in_eval::Bool
    ast_transforms::Vector{Any}   # honoured like the REPL's (Revise pushes to it)
end
const BACKEND = Ref{Backend}()

"""
    install_interrupt_sink!()

An interrupt that lands in a finished task reaches `Base.task_done_hook`, which hands it to
`Base.active_repl_backend.backend_task` when `in_eval` is set, and otherwise kills the process
("fatal: error thrown and no exception handler available"). Point it at a task that waits
forever and forwards what it receives.
"""
function install_interrupt_sink!()
    sink = @async while true
        try
            wait()
        catch e
            e isa InterruptException ? forward_interrupt() :
                diag("interrupt sink got ", sprint(showerror, e))
        end
    end
    # The REPL's backends start with `REPL.softscope` (REPL.jl, repl_ast_transforms), so a
    # loop in a cell updates a global as it does at the prompt and in IJulia.
    BACKEND[] = Backend(sink, true, SOFTSCOPE[] ? Any[REPL.softscope] : Any[])
    try
        Core.eval(Base, :(active_repl_backend = $(BACKEND[])))
    catch e
        diag("could not install the interrupt sink: ", sprint(showerror, e))
    end
end

function parse_cell(code::String, filename::String)
    @static if isdefined(Base, :parse_input_line)
        return Base.parse_input_line(code; filename = filename)
    else
        return Meta.parseall(code; filename = filename)
    end
end

ends_with_semicolon(code::String) = REPL.ends_with_semicolon(code)

is_interrupt(e) = e isa InterruptException || is_cancellation(e) ||
    (e isa TaskFailedException && is_interrupt(e.task.exception)) ||
    (e isa LoadError && is_interrupt(e.error))

# Where an interrupt lands while the cell waits: scheduler frames that tell the user nothing.
const SCHEDULER_FILES = ("task.jl", "condition.jl", "asyncevent.jl", "event.jl", "lock.jl",
                         "locks-mt.jl", "stream.jl", "channels.jl", "libuv.jl")

"""The frames of `bt` that belong to the user's code, without the server's own."""
function user_backtrace(bt, interrupted::Bool = false)
    frames = stacktrace(bt)
    if interrupted
        while length(frames) > 1 && basename(string(frames[1].file)) in SCHEDULER_FILES
            popfirst!(frames)
        end
    end
    here = @__FILE__
    cut = findfirst(f -> string(f.file) == here, frames)
    cut === nothing || (frames = frames[1:cut-1])
    # a syntax error has no frames of its own, only a "top-level scope at none:1"
    filter!(f -> f.file !== :none, frames)
    while !isempty(frames) && frames[end].func === :eval && endswith(string(frames[end].file), "boot.jl")
        pop!(frames)
    end
    return frames
end

function error_report(e, bt)
    # The fallback chain stops at interrupts: the caller reports those as such.
    ename = try
        string(nameof(typeof(e)))
    catch err
        is_interrupt(err) && rethrow()
        "Error"
    end
    evalue = try
        sprint(showerror, e; context = :color => false)
    catch err
        is_interrupt(err) && rethrow()
        try
            sprint(show, e)
        catch err2
            is_interrupt(err2) && rethrow()
            ename
        end
    end
    full = try
        frames = user_backtrace(bt, is_interrupt(e))
        # Coloured as the REPL shows it; evalue stays plain (frontends show it as text).
        sprint(; context = :color => COLOR[]) do io
            showerror(io, e)
            isempty(frames) || Base.show_backtrace(io, frames)
        end
    catch err
        is_interrupt(err) && rethrow()
        string(ename, ": ", evalue)
    end
    return ename, evalue, full
end

"""
    run_cell(mod, code, filename, cell=0) -> (status, text, rich, report)

Evaluate `code` in `mod` the way the REPL does and render the outcome: status "ok" with the
value's text/plain (and its MIME bundle when richer), or "err" / "int" with an error report.
With a cell number (a notebook cell, `In[cell]`), the hooks run and `ans`, `Out[cell]` and
`err` are set as in IJulia and the REPL. Sends nothing but an interrupt's ACK, so `warm_up`
can run it too.
"""
function run_cell(mod::Module, code::String, filename::String, cell::Int = 0)
    status = "ok"
    text = ""
    rich = nothing
    report = nothing
    try
        IN_USER[] = true
        STARTUP_PENDING[] && CURRENT[] != 0 && run_startup_files()   # not in warm-up cells
        cell > 0 && run_hooks(PREEXECUTE_HOOKS)
        value = in_cell_scope(() -> eval_cell(mod, code, filename))
        shown = value !== nothing && !ends_with_semicolon(code)
        if cell > 0
            set_main_global!(:ans, value)
            shown && value !== Out && (Out[cell] = value)
            run_hooks(POSTEXECUTE_HOOKS)
        end
        if shown
            data = Base.invokelatest(mime_bundle, value)
            text = data["text/plain"]
            length(data) > 1 && (rich = data)
        end
        IN_USER[] = false
    catch e
        IN_USER[] = false
        bt = catch_backtrace()
        status = is_interrupt(e) ? "int" : "err"
        # The supervisor escalates until it hears that the interrupt arrived: tell it before
        # rendering the error, which can take a second while that code is still cold.
        status == "int" && CURRENT[] != 0 && send_frame("ACK", string(CURRENT[]))
        status == "int" && CURRENT[] != 0 && Base.invokelatest(interrupt_remote_workers)
        if cell > 0
            quietly(() -> set_err!(e))
            for hook in copy(POSTERROR_HOOKS)
                quietly(() -> Base.invokelatest(hook))
            end
        end
        report = try
            IN_USER[] = true   # showing an error runs user code (showerror methods) too
            r = Base.invokelatest(error_report, e, bt)
            IN_USER[] = false
            r
        catch e2
            IN_USER[] = false
            is_interrupt(e2) ? ("InterruptException", "", "InterruptException:") :
                ("Error", "", "error while showing an error")
        end
    end
    return status, text, rich, report
end

function evaluate(id::Int, code::String, name::String, named::Bool)
    CURRENT[] = id
    LAST_ID[] = id
    PENDING_INTERRUPT[] = false
    cell = named ? cell_number(name, id) : 0
    cell > 0 && (In[cell] = code)
    status, text, rich, report = if INTERRUPTED_BEFORE_START[] == id
        ("int", "", nothing, ("InterruptException", "InterruptException:", "InterruptException:"))
    else
        run_cell(Main, code, name, cell)
    end
    Base.invokelatest(compile_worker_handling)
    try
        finish_evaluation(id, status, text, rich, report)
    catch e
        # A bug of ours must not leave the supervisor waiting for a result that never comes.
        e isa InterruptException && rethrow()
        diag("sending the result of ", id, " failed: ", sprint(showerror, e, catch_backtrace()))
        CURRENT[] = 0
        send_frame("RES", string(id, " err"), string("jutul-jkernel could not send this cell's ",
                   "result: ", sprint(showerror, e)))
    end
end

function finish_evaluation(id::Int, status::String, text::String, rich, report)
    disable_sigint() do
        drain_output()
        set_buffering!(false)
        if report !== nothing
            ename, evalue, full = report
            send_frame("ERR", string(id), json(Dict("ename" => ename, "evalue" => capped(evalue),
                                               "traceback" => split(capped(full), '\n'))))
            text = full
        elseif rich !== nothing
            payload = json(Dict("data" => rich, "metadata" => Dict{String,Any}()))
            length(payload) <= RICH_CAP && send_frame("VAL", string(id), payload)
        end
        CURRENT[] = 0
        PENDING_INTERRUPT[] = false
        send_frame("RES", string(id, " ", status), capped(text))
    end
end

const IDLE_BEFORE_WARM_UP = 0.2   # seconds without requests before a warm-up step runs
const IDLE_GENERATION = Ref(0)
const WARMING = Ref(true)            # warm-up steps remain

"""
    warm_up_steps() -> Vector{Any}

What nearly every session needs compiled (showing errors and common values, the result path):
Julia needs ~0.35 s for its first `showerror` and ~0.3 s per element type to print an array.
`eval_loop` runs these one at a time once Julia has been idle for `IDLE_BEFORE_WARM_UP`, so the
first cells of an interactive session answer in milliseconds and a batch run is never delayed
by more than one step.
"""
function warm_up_steps()
    scratch = Module(:JKernelWarmUp)
    cell(code) = () -> begin
        status, text, rich, report = run_cell(scratch, code, "warm-up")
        report === nothing || json(Dict("ename" => report[1], "traceback" => split(report[3], '\n')))
        rich === nothing || json(Dict("data" => rich))
        capped(text)
    end
    return Any[
        # jupyter console gives is_complete 1 s, and asks it as soon as the user presses Enter
        () -> answer_query("is_complete", "function f(x)", 0),
        () -> (drain_output(); set_buffering!(true); set_buffering!(false)),
        cell("1 + 1"),
        cell("error(\"e\")"),
        cell("throw(InterruptException())"),
        cell("[1, 2]"),
        cell("undefined_name_"),
        cell("[1.0, 2.0]"),
        cell("\"s\""),
        cell("1 + \"a\""),
        cell("[1][2]"),
        cell("[1.0 2.0; 3.0 4.0]"),
        cell("Dict(\"a\" => 1)"),
        () -> answer_query("complete", "prin", 4),
        () -> answer_query("inspect", "sum", 3),
    ]
end

function eval_loop()
    steps = warm_up_steps()
    guarded("eval") do
        while true
            id, code, name, named = take!(QUEUE)
            if id > 0
                IDLE_GENERATION[] += 1
                evaluate(id, code, name, named)
            elseif -id == IDLE_GENERATION[] && !isready(QUEUE) && !isempty(steps)
                quietly(popfirst!(steps))
                WARMING[] = !isempty(steps)
            end
        end
    end
end

# ---- queries: completion, inspection, is_complete ----

"""Byte index of the cursor after `cursor` code points of `code` (0 at the start)."""
cursor_index(code::String, cursor::Int) =
    cursor <= 0 ? 0 : min(nextind(code, 0, min(cursor, length(code))), lastindex(code))

"""Code points of `code` before byte index `i`: 0 at or before the start (ranges like 0:-1)."""
function codepoints_before(code::String, i::Int)
    i <= 1 && return 0
    i > ncodeunits(code) && return length(code)
    return length(code, 1, prevind(code, i))
end

"""
    completion_string(c, completions_module=REPL.REPLCompletions)

The text a completion inserts. Julia 1.12 and newer have no `completion_text` method for
LaTeX and emoji completions (`\\alpha`): `BslashCompletion` only has `named_completion`
(stdlib/REPL/src/REPLCompletions.jl of 1.12 and of the JuliaSyntax-based version, index ids
2066884698 and 274482070; IJulia src/handlers.jl makes the same choice).
"""
completion_string(c, completions_module::Module = REPL.REPLCompletions) =
    isdefined(completions_module, :named_completion) ?
        completions_module.named_completion(c).completion::String :
        completions_module.completion_text(c)::String

"""
    eval_help(ex)

Evaluate a help expression (`REPL.helpmode`) in a hard scope. Since Julia 1.11 it is a block
that assigns `docs` (`quote docs = Markdown.insert_hlines(...); ... end` in
stdlib/REPL/src/docview.jl, read in a 1.12-era version, index id 1806256757; 1.5.3's is a
plain call): at top level that would overwrite, or fail on, a user's global `docs`.
"""
eval_help(ex) = Core.eval(Main, Expr(:let, Expr(:block), ex))

function answer_query(op::String, code::String, cursor::Int)
    cursor = min(cursor, length(code))
    if op == "complete"
        pos = cursor_index(code, cursor)
        comps, range, _ = REPL.REPLCompletions.completions(code, pos)
        matches = unique!([completion_string(c) for c in comps])
        # No match comes with an empty range such as 0:-1 (inside a string with an unknown path)
        start = isempty(matches) ? cursor : codepoints_before(code, first(range))
        return Dict("matches" => matches, "cursor_start" => start, "cursor_end" => cursor)
    elseif op == "inspect"
        name = identifier_at(code, cursor)
        isempty(name) && return Dict("found" => false)
        md = try
            eval_help(REPL.helpmode(IOBuffer(), name))
        catch err
            err isa InterruptException && rethrow()
            return Dict("found" => false)
        end
        plain = sprint(show, MIME("text/plain"), md; context = :color => false)
        found = !startswith(lstrip(plain), "No documentation found")
        data = Dict("text/plain" => plain, "text/markdown" => sprint(show, MIME("text/markdown"), md))
        return Dict("found" => found, "data" => data)
    elseif op == "is_complete"
        ex = parse_cell(code, "cell")
        if ex isa Expr && ex.head === :incomplete
            return Dict("status" => "incomplete", "indent" => next_indent(code))
        elseif ex isa Expr && (ex.head === :error || ex.head === :toplevel &&
                                any(a -> a isa Expr && a.head in (:error, :incomplete), ex.args))
            any(a -> a isa Expr && a.head === :incomplete, ex.args) &&
                return Dict("status" => "incomplete", "indent" => next_indent(code))
            return Dict("status" => "invalid")
        end
        return Dict("status" => "complete")
    end
    return Dict("error" => "unknown query $(repr(op))")
end

is_ident_char(c::Char) = Base.is_id_char(c) || c == '.' || c == '!' || c == '@'

function identifier_at(code::String, cursor::Int)
    chars = collect(code)
    lo = cursor
    while lo > 0 && is_ident_char(chars[lo])
        lo -= 1
    end
    hi = cursor
    while hi < length(chars) && is_ident_char(chars[hi+1])
        hi += 1
    end
    return strip(String(chars[lo+1:hi]), '.')
end

const BLOCK_OPENERS = r"^\s*(function|macro|module|baremodule|struct|mutable struct|abstract type|primitive type|if|elseif|else|for|while|let|begin|quote|try|catch|finally|do)\b|\b(do|begin)\s*(\|[^|]*\|)?\s*$|[\(\[\{,=]\s*$"

function next_indent(code::String)
    lines = [l for l in split(code, '\n') if !isempty(strip(l))]
    isempty(lines) && return ""
    last = lines[end]
    base = last[1:prevind(last, something(findfirst(c -> !isspace(c), last), 1))]
    return occursin(BLOCK_OPENERS, last) ? base * "    " : base
end

# ---- the user's startup file ----

"""
    run_startup_files()

Run the startup files (`~/.julia/config/startup.jl` and the system-wide one) once, as the REPL
and IJulia do, at the start of the first evaluation (whatever its mode), inside it: the files'
output appears there, an interrupt stops them like any cell, and an error is shown there while
the cell itself still runs. Julia is started with --startup-file=no because an error in a
startup file ends a script (here: before the handshake).
"""
function run_startup_files()
    STARTUP_PENDING[] = false
    try
        # load_julia_startup includes both files unconditionally in 1.5.3 and in >= 1.11
        # (base/client.jl; index id 1409021567); it is internal, hence the fallback.
        if isdefined(Base, :load_julia_startup)
            Base.load_julia_startup()
        elseif !isempty(DEPOT_PATH)
            path = abspath(DEPOT_PATH[1], "config", "startup.jl")
            isfile(path) && Base.include(Main, path)
        end
    catch e
        bt = catch_backtrace()
        is_interrupt(e) && rethrow()
        report_startup_error(e, bt)
    end
    nothing
end

function report_startup_error(e, bt)
    frames = user_backtrace(bt)
    # Base's include and load_julia_startup frames below the file itself tell the user nothing.
    last_own = findlast(f -> f.func === Symbol("top-level scope"), frames)
    last_own === nothing || (frames = frames[1:last_own])
    io = IOBuffer()
    ctx = IOContext(io, :color => COLOR[])
    printstyled(ctx, "ERROR: "; bold = true, color = :red)
    println(ctx, "the startup file failed; the session goes on without the rest of it.")
    showerror(ctx, e)
    isempty(frames) || Base.show_backtrace(ctx, frames)
    println(ctx)
    write(stderr, take!(io))
    flush(stderr)
end

# ---- Distributed workers on other hosts ----
#
# A SIGINT to Julia's process group never reaches Distributed's workers: every cluster manager
# starts them detached, and on other hosts they are out of reach anyway. When a cell is
# interrupted, the remote workers still computing for it get a SIGINT the way Distributed's
# `interrupt` sends one (for SSHManager: `ssh host kill -2 <pid>`); at shutdown every remote
# worker gets one and all are removed with `rmprocs` before Julia exits. Local workers
# (LocalManager) are left as they were.
# The server never loads Distributed itself (start-up time), and does nothing without workers.

const DISTRIBUTED_ID = Base.PkgId(Base.UUID("8ba89e20-285c-5b6f-9357-94700520ee1b"), "Distributed")
# A worker that yields answers a ping within milliseconds; one computing in a loop answers
# only when its computation ends. Julia 1.5.3's `interrupt` kills a worker that is idle (10 of
# 10 measured: the SIGINT lands in a task that exits on it), so only the silent ones get one.
const WORKER_PING_WAIT = 1.0
# One ssh per busy worker (0.9-2.3 s here, where the remote login shell is slow); past this the
# cell's result goes out and the interrupts carry on.
const WORKER_INTERRUPT_WAIT = 10.0
# rmprocs at shutdown: the supervisor sends SIGTERM 1 s after it closes the socket
# (supervisor.py _EXIT_AFTER_EOF_WAIT). Idle workers are gone in ~0.4 s; busy ones exit once
# the interrupt sent before it reaches them, or when they next look at their master's socket.
const WORKER_RELEASE_WAIT = 0.4
const RELEASING = Ref(false)
const INTERRUPTED_AT_EXIT = Set{Int}()

"""The Distributed module if it is loaded, else `nothing` (Julia 1.5's sysimage holds it from
the start; newer Julia loads it when a cell says `using Distributed`)."""
distributed() = get(Base.loaded_modules, DISTRIBUTED_ID, nothing)

"""Whether `pid` is a worker of ours that a cluster manager other than LocalManager started."""
function remote_worker(D::Module, pid::Integer)
    w = get(D.map_pid_wrkr, pid, nothing)
    return w isa D.Worker && isdefined(w, :manager) && !(w.manager isa D.LocalManager)
end

"""
    workers_waited_on(D) -> Vector{Int}

The remote workers that remote calls of this process still wait for. Distributed keeps, for
each `remotecall_fetch` / `remotecall_wait` in flight, a `RemoteValue` in `PGRP.refs` whose
`waitingfor` is the worker's id and whose channel is still empty (remotecall.jl,
`remotecall_fetch`; the same in Julia 1.5.3's stdlib/v1.5/Distributed/src and in
JuliaLang/Distributed.jl 6e9c901, 2026). A call the interrupt abandoned leaves its entry there
until the worker answers. `pmap` and `fetch` of a Future go through these calls.
"""
function workers_waited_on(D::Module)
    all(s -> isdefined(D, s), (:PGRP, :client_refs, :map_pid_wrkr, :Worker, :LocalManager)) ||
        return Int[]
    pids = Int[]
    lock(D.client_refs) do   # the lock that guards PGRP.refs (remotecall.jl)
        for rv in values(D.PGRP.refs)
            (isdefined(rv, :waitingfor) && isdefined(rv, :c)) || continue
            pid = rv.waitingfor
            pid > 1 && !(pid in pids) && isopen(rv.c) && !isready(rv.c) &&
                remote_worker(D, pid) && push!(pids, pid)
        end
    end
    return pids
end

"""Whether any worker was started by a cluster manager other than LocalManager."""
function has_remote_workers(D::Module)
    for pid in D.workers()
        remote_worker(D, pid) && return true
    end
    return false
end

"""
    interrupt_remote_workers()

After a cell was interrupted: interrupt the remote workers it left computing, so that they stop
and the next cell finds them free. Bounded; never throws.
"""
function interrupt_remote_workers()
    D = distributed()
    (D === nothing || !isdefined(D, :interrupt) || D.myid() != 1 || D.nprocs() < 2) && return
    try
        has_remote_workers(D) || return
        pids = workers_waited_on(D)
        isempty(pids) && return
        pings = [@async(D.remotecall_fetch(D.myid, pid)) for pid in pids]
        deadline = time() + WORKER_PING_WAIT
        while time() < deadline && !all(istaskdone, pings)
            sleep(0.02)
        end
        busy = [pid for (pid, t) in zip(pids, pings) if !istaskdone(t)]
        isempty(busy) && return
        println(stderr, "jutul-jkernel: interrupting remote workers ", join(busy, ", "),
                ", still computing for this cell")
        sent = [interrupt_worker(D, pid) for pid in busy]
        deadline = time() + WORKER_INTERRUPT_WAIT
        while time() < deadline && !all(finished, sent)
            sleep(0.02)
        end
        for (pid, p) in zip(busy, sent)
            p isa Base.Process && finished(p) && !success(p) &&
                println(stderr, "jutul-jkernel: could not interrupt worker ", pid, ": ", p.cmd)
        end
    catch e
        # A second interrupt while we wait ends the wait: the user has asked twice.
        e isa InterruptException ||
            diag("interrupting remote workers failed: ", sprint(showerror, e))
    end
    nothing
end

"""
    release_workers()

Before Julia exits: ask every remote worker to stop what it computes, then `rmprocs` all
workers with a short bound. Runs from the exit paths here and, once there are workers, as an
`atexit` hook ahead of Distributed's own (which waits 5 s per attempt), so a SIGTERM, on which
Julia runs its atexit hooks, still sends the interrupts that did not go out yet. Never throws.
"""
function release_workers()
    D = distributed()
    (D === nothing || !isdefined(D, :rmprocs) || D.myid() != 1 || D.nprocs() < 2) && return
    again = RELEASING[]
    RELEASING[] = true
    try
        deadline = time() + WORKER_RELEASE_WAIT
        for pid in D.workers()
            pid in INTERRUPTED_AT_EXIT && continue
            push!(INTERRUPTED_AT_EXIT, pid)
            interrupt_worker(D, pid)
        end
        again && return
        t = @async D.rmprocs(D.workers(); waitfor = WORKER_RELEASE_WAIT)
        while time() < deadline && !istaskdone(t)
            sleep(0.02)
        end
    catch e
        e isa InterruptException || diag("removing workers failed: ", sprint(showerror, e))
    end
    nothing
end

"""
    interrupt_worker(D, pid) -> Process, Task or nothing

Send remote worker `pid` a SIGINT, as Distributed's `interrupt(pid)` does, and return what to
wait for. For SSHManager workers this runs the command of Distributed's
`manage(::SSHManager, id, config, :interrupt)` (managers.jl, the same in Julia 1.5.3 and in
JuliaLang/Distributed.jl 6e9c901), but detached: Distributed runs that ssh in Julia's process
group, and jupyter_client interrupts just before a shutdown or restart, so the supervisor's
signals to that group at shutdown killed the ssh before it reached the host. Other cluster
managers get Distributed's `interrupt`.
"""
function interrupt_worker(D::Module, pid::Int)
    remote_worker(D, pid) || return nothing
    w = D.map_pid_wrkr[pid]
    c = w.config
    if isdefined(D, :SSHManager) && w.manager isa D.SSHManager && c.ospid isa Integer &&
            c.host isa AbstractString && c.sshflags isa Cmd
        return spawn_detached(ssh_interrupt_cmd(c.sshflags, String(c.host), Int(c.ospid)))
    end
    return @async D.interrupt(pid)
end

ssh_interrupt_cmd(sshflags::Cmd, host::String, ospid::Int) =
    `ssh -T -a -x -o ClearAllForwardings=yes -n $sshflags $host "kill -2 $ospid"`

"""Start `cmd` in a session of its own: signals to Julia's process group do not reach it."""
spawn_detached(cmd::Cmd) =
    run(pipeline(detach(cmd); stdin = devnull, stdout = devnull, stderr = devnull); wait = false)

finished(x) = x isa Task ? istaskdone(x) : x isa Base.Process ? !process_running(x) : true

const WORKER_HANDLING_COMPILED = Ref(false)

"""
    compile_worker_handling()

After each cell: once there are Distributed workers, compile what interrupts and releases them,
and register `release_workers` with `atexit`.
Compiled at the moment of need, Julia was still compiling when the supervisor ended it (0.5 s
after closing the socket, on a loaded machine) and no interrupt went out.
"""
function compile_worker_handling()
    WORKER_HANDLING_COMPILED[] && return
    D = distributed()
    (D === nothing || !isdefined(D, :nprocs) || D.nprocs() < 2) && return
    WORKER_HANDLING_COMPILED[] = true
    try
        atexit(release_workers)   # after Distributed's addprocs registered its hook: runs first
        precompile(release_workers, ())
        precompile(interrupt_worker, (Module, Int))
        precompile(remote_worker, (Module, Int))
        precompile(ssh_interrupt_cmd, (Cmd, String, Int))
        wait(spawn_detached(`true`))   # compiles the spawn path all the way down
        precompile(interrupt_remote_workers, ())
        precompile(workers_waited_on, (Module,))
        precompile(has_remote_workers, (Module,))
        has_remote_workers(D) && workers_waited_on(D)   # read-only: warms the dynamic calls
    catch e
        # the cell is over: a late interrupt has nothing left to stop (forward_interrupt)
        e isa InterruptException ||
            diag("compiling worker handling failed: ", sprint(showerror, e))
    end
    nothing
end

# ---- start-up ----

function watch_parent!()
    @static if Sys.islinux()
        # PR_SET_PDEATHSIG: the kernel kills us when the process that started us dies, even if
        # a cell never yields (a SIGKILLed supervisor runs no cleanup code).
        ccall(:prctl, Cint, (Cint, Culong, Culong, Culong, Culong), 1, 9, 0, 0, 0)
        ccall(:getppid, Cint, ()) == 1 && exit(0)   # parent already gone before prctl
    end
    nothing
end

main(args = ARGS) = outside_cancel_scope(() -> serve(args))

"""Names cells see without qualification: `In`, `Out`, `IJulia`, and `err` where Julia has none."""
function set_up_main!()
    SOFTSCOPE[] = !(lowercase(get(ENV, "JUTUL_JKERNEL_SOFTSCOPE", "yes")) in ("no", "0", "false", "off"))
    # Julia 1.9+ exports `err` from Base.MainInclude to Main: a second export would be ambiguous.
    (isdefined(Base, :MainInclude) && isdefined(Base.MainInclude, :err)) ||
        Core.eval(MainNames, :(export err))
    Core.eval(Main, :(using .JKernel.MainNames))
end

function serve(args)
    Base.exit_on_sigint(false)
    DIAG[] = stderr
    length(args) == 1 || (diag("usage: julia server.jl <port>"); exit(2))
    port = tryparse(Int, args[1])
    port === nothing && (diag("bad port ", repr(args[1])); exit(2))
    empty!(ARGS)   # user code sees no kernel arguments, as in the REPL and IJulia
    # --color=yes (the kernelspec's default). exec_options sets have_color from the flag in
    # 1.5.3 and through colored_text(opts) in >= 1.11 (base/client.jl, index id 1409021567).
    COLOR[] = Base.have_color === true
    STARTUP_PENDING[] = get(ENV, "JUTUL_JKERNEL_STARTUP_FILE", "yes") != "no"
    delete!(ENV, "JUTUL_JKERNEL_STARTUP_FILE")
    token = get(ENV, "JUTUL_JKERNEL_TOKEN", "")
    isempty(token) && (diag("JUTUL_JKERNEL_TOKEN is not set"); exit(2))
    delete!(ENV, "JUTUL_JKERNEL_TOKEN")   # user code and child processes must not see it
    watch_parent!()
    sock = connect(ip"127.0.0.1", port)
    Sockets.nagle(sock, false)
    SOCK[] = sock

    redirect_output!()
    Core.eval(Base, :(stdin = $(KernelStdin(PipeBuffer()))))
    pushdisplay(KernelDisplay())
    set_up_main!()
    install_interrupt_sink!()
    @async flusher_loop()
    @async thread_one_loop()

    # The interrupt path must never wait for the compiler: a first INT frame that took the
    # listener a second to compile (on a loaded machine) was escalated to a forced SIGINT,
    # and a SIGINT forced into the compiler leaves Julia unusable. ~10 ms here.
    precompile(handle_frame, (String, Int, Vector{SubString{String}}, Vector{UInt8}))
    precompile(forward_interrupt, ())
    send_frame("RDY", token)
    send_frame("INF", "", json(Dict("julia_version" => string(VERSION), "pid" => getpid(),
                                    "threads" => Threads.nthreads())))
    EVAL_TASK[] = @async eval_loop()   # after the handshake: its warm-up must not delay it
    @async query_loop()
    listener = @async listen_loop()
    guarded("main") do
        wait(listener)
        false
    end
    exit(0)
end

end # module JKernel

if abspath(PROGRAM_FILE) == @__FILE__
    JKernel.main()
end
