# wire.jl: the frames on the one connection to the supervisor, and the tasks that read them.
#
# Once the server has connected (a Unix socket on POSIX, loopback TCP on Windows: main.jl,
# connect_supervisor), everything travels as frames: an ASCII header line
# `KIND arg... NBYTES\n` followed by exactly NBYTES payload bytes.
# jutul_jkernel/protocol/wire.py defines the same kinds; change both or neither.
#
# Julia -> Python
#   RDY <token> 0                  handshake, always the first frame
#   INF <n>                        JSON: julia_version, julia_path (the running binary), pid,
#                                  threads, loaded_from (cache|source)
#   OUT <stdout|stderr> <n>        live bytes written to fd 1 / fd 2 (Julia, C, child processes),
#                                  only where the supervisor cannot read those pipes (Windows)
#   MRK <m> <n>                    the payload is one whole frame (or nothing) that comes after
#                                  output marker <m>: the supervisor reads fd 1 and fd 2 up to
#                                  marker <m> before handling it (capture.jl, drain_output)
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
#   CMM <id> <j> <n>               a comm message (comm_open, comm_msg, comm_close) sent during
#                                  evaluation <id>: <j> bytes of JSON {msg_type, content,
#                                  metadata, buffers: [length...]}, then the buffers (comms.jl)
#   ACK <n> 0                      answer to SYN <n>; for evaluation <n>: an interrupt reached it
#                                  (the listener handed an INT frame over, or found its request
#                                  claimed by the SIGINT, which lands at once as the listener
#                                  runs; or the evaluation caught one that came by signal).
#                                  No ACK: it is not yielding
# Python -> Julia
#   EXE <id> <n>                   code to evaluate (queued; evaluated one at a time, in order);
#                                  backtraces call it In[<id>]
#   EXN <id> <name> <n>            the same, naming the code <name> (e.g. In[3], Jupyter's count)
#   INT <id> <request> 0           interrupt evaluation <id>; ignored unless it is running.
#                                  Delivered only if the listener claims <request> before the
#                                  supervisor's SIGINT does (helpers.jl, claim_interrupt): one
#                                  request, one delivery
#   TXT <id> <n>                   the line typed in answer to INP <id>
#   NIN <id> <n>                   no line can be had for INP <id>; payload says why
#   QRY <id> <op> <cursor> <n>     op: complete | inspect | is_complete; payload: the code;
#                                  cursor counts Unicode code points, as Jupyter does.
#                                  op comm_target: payload a target name, cursor 0
#   SYN <seq> 0                    answered with ACK <seq>
#   COM <id> <j> <n>               a frontend's comm message, run as evaluation <id> (its
#                                  callback), queued in order with EXE and EXN; payload as CMM's

"""
The frame kinds, one constant each, named as on the wire and as protocol/wire.py's `FrameKind`
members (`FrameKind.RES` on both sides); the table above says what each carries. Code names a
kind only through these.
"""
baremodule FrameKind
# Julia -> Python
const RDY = "RDY"
const INF = "INF"
const OUT = "OUT"
const MRK = "MRK"
const DSP = "DSP"
const CLR = "CLR"
const VAL = "VAL"
const ERR = "ERR"
const RES = "RES"
const INP = "INP"
const ANS = "ANS"
const PAY = "PAY"
const ACK = "ACK"
# Python -> Julia
const EXE = "EXE"
const EXN = "EXN"
const INT = "INT"
const TXT = "TXT"
const NIN = "NIN"
const QRY = "QRY"
const SYN = "SYN"
const COM = "COM"
# Julia -> Python, for comms
const CMM = "CMM"
end

"""
    send_frame(kind, args, payload; mark = 0)

Write one frame; `args` is the header's arguments as one string ("" for none). Strings keep this
to one compiled specialization, which matters for start-up time. With a `mark` from
`drain_output`, the frame goes inside `MRK <mark>`: the output written before it comes first.
"""
function send_frame(kind::String, args::String, payload::AbstractVector{UInt8} = UInt8[];
                    mark::Int = 0)
    io = IOBuffer()
    write(io, kind)
    isempty(args) || write(io, ' ', args)
    write(io, ' ', string(length(payload)), '\n')
    write(io, payload)
    frame = take!(io)
    # One frame inside MRK, so that no other task's frame can come between the two. Assigned
    # once: a variable assigned twice and captured by the closure below would be boxed, and
    # every call on it compiled at run time (~40 ms of the first result on 1.10).
    buf = mark > 0 ?
        vcat(codeunits(string(FrameKind.MRK, " ", mark, " ", length(frame), "\n")), frame) : frame
    # One write call submits the whole frame to libuv, so frames from different tasks never
    # interleave; SIGINT is deferred so it cannot abandon a half-submitted write.
    disable_sigint() do
        try
            write(SOCK[], buf)
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

"""A marker with no frame to carry (see drain_output): the supervisor still counts it."""
send_mark(mark::Int) = mark > 0 && send_frame(FrameKind.MRK, string(mark))

protocol_failure(msg) = (diag("protocol error: ", msg, "; closing the connection"); exit(86))

# The kinds Julia accepts, each with the number of header arguments between KIND and NBYTES.
const INCOMING = Dict(FrameKind.EXE => 1, FrameKind.EXN => 2, FrameKind.INT => 2,
                      FrameKind.TXT => 1, FrameKind.NIN => 1, FrameKind.QRY => 3,
                      FrameKind.SYN => 1, FrameKind.COM => 2)

# Numbers on the wire are plain decimal, as protocol/wire.py writes and checks them: tryparse alone
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

const QUERY_OPS = ("complete", "inspect", "is_complete", "comm_target")

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
            send_frame(FrameKind.ANS, string(id), json(answer))
        end
    end
end

function listen_loop()
    buf = UInt8[]
    guarded("listener") do
        sock = SOCK[]   # read here: a closure over it is compiled anew at each start
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
    if kind == FrameKind.EXE
        put!(QUEUE, Evaluation(id, String(payload), "In[$id]", false))
    elseif kind == FrameKind.EXN
        put!(QUEUE, Evaluation(id, String(payload), String(args[1]), true))
    elseif kind == FrameKind.INT
        request = wire_number(args[1])
        (request === nothing || request < 1) && protocol_failure("bad request in INT $id")
        interrupt_frame(id, request)
    elseif kind == FrameKind.TXT || kind == FrameKind.NIN
        ch = INPUT_WAIT[]
        if ch !== nothing && id == CURRENT[] && !isready(ch)   # public API, not ch.data
            put!(ch, kind == FrameKind.TXT ? String(payload) : ErrorException(String(payload)))
        end
    elseif kind == FrameKind.QRY
        op = String(args[1])
        op in QUERY_OPS || protocol_failure("unknown query $(repr(op)) in QRY $id")
        cursor = wire_number(args[2])
        cursor === nothing && protocol_failure("bad cursor in QRY $id")
        put!(QUERIES, (id, op, String(payload), cursor))
    elseif kind == FrameKind.SYN
        send_frame(FrameKind.ACK, string(id))
    elseif kind == FrameKind.COM
        head_bytes = wire_number(args[1])
        (head_bytes === nothing || head_bytes > length(payload)) &&
            protocol_failure("bad JSON length in COM $id")
        put!(QUEUE, comm_delivery(id, payload, head_bytes))
    end
end
