# wire.jl: the frames on the one connection to the supervisor, and the tasks that read them.
#
# Every frame kind, its header arguments and what it carries are declared once, in
# jutul_jkernel/protocol/frames.toml; frames.jl, generated from it, holds the documented table,
# the FrameKind constants and INCOMING (the kinds Julia accepts and the rule of each argument),
# which parse_frames! checks every header by. A kind sent to Julia is handled in handle_frame.

"""
    send_frame(kind, args, payload; mark = 0)

Write one frame; `args` is the header's arguments as one string ("" for none). Strings keep this
to one compiled specialization, which matters for start-up time. With a `mark` from
`drain_output`, the frame goes inside `MRK <mark>`: the output written before it comes first
(`MRK 0` for `PIPES_READ`: the supervisor had read it all already). For `MARK_AFTER` (it had
read it all, and the frame comes in the middle of an evaluation), inside `MRN <n>`, followed
by the n-th marker.
"""
function send_frame(kind::String, args::String, payload::AbstractVector{UInt8} = UInt8[];
                    mark::Int = 0)
    io = IOBuffer()
    write(io, kind)
    isempty(args) || write(io, ' ', args)
    write(io, ' ', string(length(payload)), '\n')
    write(io, payload)
    frame = take!(io)
    # One write call submits the whole frame to libuv, so frames from different tasks never
    # interleave; SIGINT is deferred so it cannot abandon a half-submitted write, nor come
    # between an MRN frame and its marker (its number taken first, so that another task's
    # marker, written while this write waits, has another).
    # One frame inside MRK or MRN, so that no other task's frame can come between the two.
    disable_sigint() do
        try
            if mark == MARK_AFTER
                n = MARKS_SENT[] += 1
                try
                    write(SOCK[], in_mark(FrameKind.MRN, n, frame))
                finally
                    put_marker()   # marker n, whatever became of the frame
                end
            else
                write(SOCK[], mark == 0 ? frame : in_mark(FrameKind.MRK, max(mark, 0), frame))
            end
        catch e
            # An interrupt is the cell's, not a dead socket. On master a cell's ^C is a
            # CancellationRequest, and a socket write is a cancellation point ("the uv write
            # cancel flag, see base/stream.jl", base/cancellation.jl): is_interrupt covers both.
            is_interrupt(e) && rethrow()
            RELEASING[] && return   # release_workers is under way and exits when done
            diag("socket write failed (", sprint(showerror, e), "); exiting")
            Base.invokelatest(release_workers)
            exit(0)
        end
    end
    return nothing
end
send_frame(kind::String, args::String, payload::String; mark::Int = 0) =
    send_frame(kind, args, codeunits(payload); mark = mark)

"""`frame` inside an MRK or MRN frame (`kind`) of marker `n`."""
in_mark(kind::String, n::Int, frame::Vector{UInt8}) =
    vcat(codeunits(string(kind, " ", n, " ", length(frame), "\n")), frame)

"""A marker with no frame to carry (see drain_output): the supervisor still counts it. (After
`MARK_AFTER` no marker was written, and none is needed.)"""
send_mark(mark::Int) = mark > 0 && send_frame(FrameKind.MRK, string(mark))

protocol_failure(msg) = (diag("protocol error: ", msg, "; closing the connection"); exit(86))

# Numbers on the wire are plain decimal, as protocol/wire.py writes and checks them: tryparse alone
# would also take "0x10", "+1", "01" and trailing whitespace.
const WIRE_NUMBER = r"^(0|[1-9][0-9]{0,17})$"
wire_number(s) = occursin(WIRE_NUMBER, s) ? parse(Int, s) : nothing

"""Whether `s` follows the rule of header argument `arg` (frames.jl: id, count, token, words)."""
function wire_arg_ok(arg::FrameArg, s::AbstractString)
    arg.rule === :id && return something(wire_number(s), 0) >= 1
    arg.rule === :count && return wire_number(s) !== nothing
    arg.rule === :token && return !isempty(s) && all(b -> 0x21 <= b <= 0x7e, codeunits(s))
    return s in arg.words
end

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
        args = get(INCOMING, parts[1], nothing)
        args === nothing && protocol_failure("unknown frame kind in header $(repr(header))")
        length(parts) == length(args) + 2 ||
            protocol_failure("wrong argument count in header $(repr(header))")
        nbytes = wire_number(parts[end])
        (nbytes === nothing || nbytes > MAX_PAYLOAD) &&
            protocol_failure("bad NBYTES in header $(repr(header))")
        for (i, arg) in enumerate(args)
            wire_arg_ok(arg, parts[i+1]) ||
                protocol_failure("bad $(arg.name) in header $(repr(header))")
        end
        id = parse(Int, parts[2])   # every kind Julia accepts starts with an id (frames.toml)
        length(buf) - nl < nbytes && return pos - 1
        payload = buf[nl+1:nl+nbytes]
        pos = nl + nbytes + 1
        handle(String(parts[1]), id, parts[3:end-1], payload)
    end
end

"""Answer queries one at a time, beside evaluations (a long-lived task, as all of ours are)."""
function query_loop()
    guarded("queries") do
        while true
            id, op, code, cursor = take!(QUERIES)
            IDLE_GENERATION[] += 1   # no warm-up step starts while a query is answered
            answer = try
                # latest world: completion must see methods (propertynames...) users define
                Base.invokelatest(answer_query, op, code, cursor)
            catch e
                e isa InterruptException && rethrow()
                Dict("error" => sprint(showerror, e))
            end
            send_frame(FrameKind.ANS, string(id), json(answer))
            IDLE_GENERATION[] += 1   # ... nor until a whole idle interval after it
        end
    end
end

# Bytes read from the socket at most at once: libuv's own read size, below which LibuvStream's
# readbytes! copies out of the stream's buffer (base/stream.jl, SZ_UNBUFFERED_IO).
const READ_CHUNK = 65536

"""
    read_available!(buf, sock, chunk)

Append to `buf` the bytes `sock` holds (at least one: `eof(sock)` said so), copied out through
`chunk`, with SIGINT deferred: the copy takes bytes that are there already, so an interrupt
loses none. A named function, compiled into the cache for both kinds of socket (precompile.jl):
as a closure it was compiled at the first request of every session (~45 ms of the first query
on 1.10).
"""
function read_available!(buf::Vector{UInt8}, sock, chunk::Vector{UInt8})
    disable_sigint() do
        n = readbytes!(sock, chunk, min(bytesavailable(sock), length(chunk)))
        old = length(buf)
        resize!(buf, old + n)
        copyto!(buf, old + 1, chunk, 1, n)
    end
    return nothing
end

function listen_loop()
    buf = UInt8[]
    # Copied out of the socket's buffer, which stays the socket's: readavailable takes the
    # buffer's array itself (take!), and libuv's next read then allocated a new 64 KiB one, so
    # every request cost 64 KiB of garbage and its share of collections (~15% of the time Julia
    # spent on a `1+1` cell, sampled on 1.10).
    chunk = Vector{UInt8}(undef, READ_CHUNK)
    guarded("listener") do
        sock = SOCK[]   # read here: a closure over it is compiled anew at each start
        while true
            if eof(sock)   # waits for bytes
                Base.invokelatest(release_workers)   # first: the supervisor gives us 1 s
                diag("socket closed by the supervisor; exiting")
                exit(0)
            end
            read_available!(buf, sock, chunk)
            used = disable_sigint(() -> parse_frames!(buf, handle_frame))
            deleteat!(buf, 1:used)
        end
    end
end

"""
    handle_frame(kind, id, args, payload)

Act on one frame from the supervisor: one branch for each kind frames.jl's INCOMING holds.
`id` is its first header argument and `args` the others, each checked by its rule already.
"""
function handle_frame(kind::String, id::Int, args, payload::Vector{UInt8})
    if kind == FrameKind.EXE
        put!(QUEUE, Evaluation(id, String(payload), "In[$id]", false))
    elseif kind == FrameKind.EXN
        put!(QUEUE, Evaluation(id, String(payload), String(args[1]), true))
    elseif kind == FrameKind.INT
        interrupt_frame(id, parse(Int, args[1]))
    elseif kind == FrameKind.TXT || kind == FrameKind.NIN
        ch = INPUT_WAIT[]
        if ch !== nothing && id == CURRENT[] && !isready(ch)   # public API, not ch.data
            put!(ch, kind == FrameKind.TXT ? String(payload) : ErrorException(String(payload)))
        end
    elseif kind == FrameKind.QRY
        put!(QUERIES, (id, String(args[1]), String(payload), parse(Int, args[2])))
    elseif kind == FrameKind.SYN
        send_frame(FrameKind.ACK, string(id))
    elseif kind == FrameKind.COM
        head_bytes = parse(Int, args[1])
        head_bytes > length(payload) && protocol_failure("bad JSON length in COM $id")
        put!(QUEUE, comm_delivery(id, payload, head_bytes))
    elseif kind == FrameKind.EXS
        name = String(args[1])
        queue_beside(id, Evaluation(id, String(payload), name == "-" ? "In[$id]" : name,
                                    name != "-"))
    elseif kind == FrameKind.COS
        head_bytes = parse(Int, args[1])
        head_bytes > length(payload) && protocol_failure("bad JSON length in COS $id")
        queue_beside(id, comm_delivery(id, payload, head_bytes))
    end
end
