# comms.jl: Jupyter comms, with the names of IJulia's CommManager (JuliaLang/IJulia.jl
# src/comm_manager.jl), which packages and notebooks call as `IJulia.CommManager.*`.
#
# Julia -> frontend: what Julia sends (comm_open, comm_msg, comm_close) is a CMM frame under the
# running evaluation (the last one, from a background task), after the output printed before
# it; the kernel publishes it with that evaluation's parent: a cell's execute_request, or the
# comm message whose callback runs.
# Frontend -> Julia: a comm message is a COM frame. It waits in QUEUE behind the cells sent
# before it, and the evaluation loop runs its callback as an evaluation of its own
# (deliver_comm): what the callback prints goes under that message, an interrupt stops it as it
# stops a cell, and an error it throws is printed on stderr, leaving the comm and the session up.

"""
    Comm{target}

One comm, as IJulia's CommManager has it: `id`, `primary` (Julia opened it), and the callbacks
`on_msg(msg)` and `on_close(msg)`, which may be assigned at any time. The target is the type
parameter: `register_comm(comm::Comm{:my_target}, msg)` accepts the comms a frontend opens for
`my_target`.
"""
mutable struct Comm{target}
    id::String
    primary::Bool
    on_msg::Function
    on_close::Function
end

"""
    Msg

A comm message as a callback receives it: `content` (a Dict: `comm_id`, and `data`, which is
always there), `metadata`, `buffers` (its binary buffers, a `Vector{Vector{UInt8}}`) and
`header` (`msg_type`).
"""
struct Msg
    header::Dict{String,Any}
    content::Dict{String,Any}
    metadata::Dict{String,Any}
    buffers::Vector{Vector{UInt8}}
end

noop_callback(msg) = nothing

"""A new comm id: 32 hex digits, as a UUID's without the dashes (IJulia uses `uuid4()`)."""
new_comm_id() = string(rand(UInt128); base = 16, pad = 32)

"""
    Comm(target, id=new id, primary=true, on_msg=noop, on_close=noop;
         data=Dict(), metadata=Dict(), buffers=[])

A comm to `target`. A primary comm is opened now: the frontend gets a comm_open with
`target_name` and `data`. (A frontend's comm_open makes a secondary one.)
"""
function Comm(target, id = new_comm_id(), primary::Bool = true,
              on_msg::Function = noop_callback, on_close::Function = noop_callback;
              data::AbstractDict = Dict{String,Any}(), metadata::AbstractDict = Dict{String,Any}(),
              buffers = Vector{UInt8}[])
    comm = Comm{Symbol(target)}(string(id), primary, on_msg, on_close)
    COMMS[comm.id] = comm
    primary && send_comm_message("comm_open", comm.id, data, metadata, buffers;
                                 target_name = string(target))
    return comm
end

"""The target a comm was opened for, a Symbol."""
comm_target(::Comm{target}) where {target} = target

"""
    send_comm(comm, data, metadata=Dict(); buffers=[])

Send `data` (a Dict of what JSON holds) to the frontend's side of `comm`, with binary
`buffers` (byte vectors) as ZMQ buffers.
"""
send_comm(comm::Comm, data::AbstractDict, metadata::AbstractDict = Dict{String,Any}();
          buffers = Vector{UInt8}[], kwargs...) =
    send_comm_message("comm_msg", comm.id, data, metadata, buffers; kwargs...)

"""
    close_comm(comm, data=Dict(), metadata=Dict(); buffers=[])

Close `comm` on both sides. Its `on_close` is not called: that is for a close the frontend
asks for.
"""
function close_comm(comm::Comm, data::AbstractDict = Dict{String,Any}(),
                    metadata::AbstractDict = Dict{String,Any}(); buffers = Vector{UInt8}[],
                    kwargs...)
    delete!(COMMS, comm.id)
    send_comm_message("comm_close", comm.id, data, metadata, buffers; kwargs...)
end

"""
    register_comm(comm::Comm{:target}, msg)

What a package defines to accept the comms a frontend opens for its target: set
`comm.on_msg` and `comm.on_close` here. This default is for targets nobody registered: the
frontend's comm is closed at once, as ipykernel closes comms to unknown targets.
"""
register_comm(comm::Comm, msg) = nothing

"""Whether some package defined `register_comm` for comms to `target`."""
knows_target(target::Symbol) =
    Base.which(register_comm, Tuple{Comm{target},Msg}) !==
    Base.which(register_comm, Tuple{Comm,Any})

function send_comm_message(msg_type::String, comm_id::String, data::AbstractDict,
                           metadata::AbstractDict, buffers; kwargs...)
    content = Dict{String,Any}("comm_id" => comm_id, "data" => data)
    for (k, v) in kwargs
        content[string(k)] = v
    end
    bufs = Vector{UInt8}[Vector{UInt8}(b) for b in buffers]
    head = json(Dict{String,Any}("msg_type" => msg_type, "content" => content,
                                 "metadata" => metadata, "buffers" => map(length, bufs)))
    payload = isempty(bufs) ? head : vcat(head, bufs...)
    c = output_ctx()
    on_thread_one(() -> send_comm_frame(length(head), payload, c))
    return nothing
end

function send_comm_frame(head_bytes::Int, payload::Vector{UInt8},
                         c::Union{Nothing,EvalCtx} = nothing)
    id = frame_id(c)
    id == 0 && return
    server_section(c) do
        send_frame(FrameKind.CMM, string(id, " ", head_bytes), payload; mark = drain_output())
    end
end

"""
    comm_delivery(id, payload, head_bytes) -> CommDelivery

A COM frame's request: `head_bytes` of JSON, then the buffers whose lengths it lists.
"""
function comm_delivery(id::Int, payload::Vector{UInt8}, head_bytes::Int)
    head = try
        parse_json(String(payload[1:head_bytes]))
    catch e
        e isa ArgumentError || rethrow()
        protocol_failure("COM $id: $(e.msg)")
    end
    msg_type = get(head, "msg_type", nothing)
    content = get(head, "content", nothing)
    metadata = get(head, "metadata", Dict{String,Any}())
    lengths = get(head, "buffers", Any[])
    msg_type in ("comm_open", "comm_msg", "comm_close") && content isa Dict{String,Any} &&
        metadata isa Dict{String,Any} && lengths isa Vector{Any} &&
        all(n -> n isa Int && n >= 0, lengths) && head_bytes + foldl(+, lengths; init = 0) == length(payload) ||
        protocol_failure("COM $id of the wrong shape")
    haskey(content, "data") || (content["data"] = Dict{String,Any}())
    buffers = Vector{UInt8}[]
    at = head_bytes
    for n in lengths
        push!(buffers, payload[at+1:at+n])
        at += n
    end
    return CommDelivery(id, msg_type, content, metadata, buffers)
end

"""Run a frontend's comm message as evaluation `d.id` (see the header)."""
deliver_comm(d::CommDelivery) = run_evaluation(d.id) do
    INTERRUPTED_BEFORE_START[] == d.id ? INTERRUPTED :
        in_cell_task(() -> run_comm_callback(d))
end

function run_comm_callback(d::CommDelivery, ctx::Union{Nothing,EvalCtx} = nothing)
    msg = Msg(Dict{String,Any}("msg_type" => d.msg_type), d.content, d.metadata, d.buffers)
    try
        set_in_user!(ctx, true)
        Base.invokelatest(handle_comm_message, d.msg_type, msg)
        set_in_user!(ctx, false)
    catch e
        set_in_user!(ctx, false)
        bt = catch_backtrace()
        if is_interrupt(e)
            ctx === nothing ? acknowledge_interrupt() : ctx.cancelled || forward_interrupt()
            return INTERRUPTED
        end
        report = Base.invokelatest(error_report, e, bt)
        println(stderr, "Error in the ", d.msg_type, " callback of comm ",
                get(d.content, "comm_id", "?"), ":\n", report.traceback)
    end
    return CellOutcome("ok", "", nothing, nothing)
end

function handle_comm_message(msg_type::String, msg::Msg)
    id = string(get(msg.content, "comm_id", ""))
    if msg_type == "comm_open"
        target = get(msg.content, "target_name", nothing)
        if !(target isa String) || !knows_target(Symbol(target))
            # As ipykernel does for a target it does not know: close the frontend's side.
            diag("comm_open to unknown target ", repr(target), ": closing comm ", id)
            send_comm_message("comm_close", id, Dict{String,Any}(), Dict{String,Any}(), ())
            return
        end
        comm = Comm{Symbol(target)}(id, false, noop_callback, noop_callback)
        COMMS[id] = comm
        register_comm(comm, msg)
    elseif msg_type == "comm_msg"
        comm = get(COMMS, id, nothing)
        comm === nothing && return diag("comm_msg for unknown comm ", repr(id), ": dropped")
        comm.on_msg(msg)
    else
        comm = pop!(COMMS, id, nothing)
        comm === nothing && return diag("comm_close for unknown comm ", repr(id), ": dropped")
        comm.on_close(msg)
    end
    return nothing
end
