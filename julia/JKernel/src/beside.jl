# beside.jl: evaluations beside the main one: a subshell's cells and comm messages (EXS, COS).
#
# The main shell's cells and comm messages run one at a time in eval_loop (QUEUE). A
# subshell's request runs at once instead, in a worker task on thread 1, cooperatively: it runs
# whenever the main cell yields (sleep, I/O, `yield()`), as every server task does, so a cell
# that computes without yielding holds subshells back too. Workers are long-lived (a SIGINT
# landing in a finished task is fatal on Julia 1.5: interrupts.jl) and started only when a
# request finds none idle, so there are never more than requests ran at once, which the
# supervisor bounds. Each evaluation has an EvalCtx that every task it starts inherits
# (compat.jl, `with_ctx`): what those tasks print goes into the stdout pipe between the
# evaluation's route codes (capture.jl), their displays, comm messages and payloads carry its
# id, and an INT frame for its id cancels it. The main cell's state (CURRENT, LAST_ID, IN_USER,
# PENDING_INTERRUPT) is never touched. In a subshell stdin cannot be read, the startup file
# does not run (the first main cell runs it), and an interrupt of the main cell does not reach
# it (as in ipykernel: the main shell only).

"""
    queue_beside(id, request)

An EXS or COS request (the listener's): queued for a beside worker, one started if none is
idle. It is an evaluation from now on, so that an INT frame finds it before it starts.
"""
function queue_beside(id::Int, request::Union{Evaluation,CommDelivery})
    ctx = EvalCtx(id, current_task(), false, false, false, route_head(id, 'o'),
                  route_head(id, 'e'))
    BESIDE[id] = ctx
    BESIDE_WAITING[] += 1
    put!(BESIDE_QUEUE, (ctx, request))
    if BESIDE_WAITING[] > BESIDE_IDLE[]
        BESIDE_WORKERS[] += 1
        BESIDE_IDLE[] += 1
        schedule(Task(beside_worker))   # sticky: thread 1, as every server task
    end
    nothing
end

function beside_worker()
    guarded("beside") do
        while true
            ctx, request = take!(BESIDE_QUEUE)
            BESIDE_IDLE[] -= 1
            BESIDE_WAITING[] -= 1
            idle = false
            try
                outcome = beside_result(ctx, request)
                # Idle from here: the supervisor sends the next request as soon as it reads
                # the result, and that one waits for this worker rather than start another.
                BESIDE_IDLE[] += 1
                idle = true
                finish_beside(ctx, outcome)
            finally
                idle || (BESIDE_IDLE[] += 1)
            end
        end
    end
end

"""
    beside_result(ctx, request) -> CellOutcome

Run a beside evaluation in this worker's task; whatever happens, it has an outcome to send
(as run_evaluation makes sure for the main one).
"""
function beside_result(ctx::EvalCtx, request::Union{Evaluation,CommDelivery})
    SHELLS_USED[] = true
    ctx.task = current_task()
    outcome = try
        ctx.cancelled ? INTERRUPTED : with_ctx(() -> beside_outcome(ctx, request), ctx)
    catch e
        if is_interrupt(e)
            INTERRUPTED
        else   # a bug of ours: say so in the result rather than leave it unanswered
            msg = string("jutul-jkernel could not run this request: ", sprint(showerror, e))
            diag("beside evaluation ", ctx.id, ": ", sprint(showerror, e, catch_backtrace()))
            CellOutcome("err", "", nothing, ErrorReport("Error", msg, msg))
        end
    end
    return outcome
end

function beside_outcome(ctx::EvalCtx, r::Evaluation)
    cell = r.named ? cell_number(r.name, r.id) : 0
    cell > 0 && (In[cell] = r.code; IJulia.record_cell!(cell))
    return run_cell(Main, r.code, r.name, cell, ctx)
end
beside_outcome(ctx::EvalCtx, d::CommDelivery) = run_comm_callback(d, ctx)

"""
    finish_beside(ctx, outcome)

Send a beside evaluation's result after its output (as finish_evaluation does), and forget it.
"""
function finish_beside(ctx::EvalCtx, outcome::CellOutcome)
    id = ctx.id
    try
        disable_sigint() do
            mark = drain_output(true)   # the first frame below carries it
            text, mark = send_error_or_value(id, outcome, mark)
            forget_beside!(id)
            send_frame(FrameKind.RES, string(id, " ", outcome.status), capped(text); mark = mark)
        end
    catch e
        e isa InterruptException && rethrow()
        diag("sending the result of ", id, " failed: ", sprint(showerror, e, catch_backtrace()))
        forget_beside!(id)
        send_frame(FrameKind.RES, string(id, " err"),
                   string("jutul-jkernel could not send this request's result: ",
                          sprint(showerror, e)); mark = last_mark())
    end
    nothing
end

function forget_beside!(id::Int)
    delete!(BESIDE, id)
    length(BESIDE_ENDED) >= 4096 && empty!(BESIDE_ENDED)   # ids that old get no INT any more
    push!(BESIDE_ENDED, id)
    # The flusher switches buffering by output rate while anything runs; idle, it is off.
    isempty(BESIDE) && CURRENT[] == 0 && set_buffering!(false)
    nothing
end

"""
    interrupt_beside(ctx)

An INT frame for a beside evaluation: it stops at once if in user code, else when it gets
there (server_section), or before it starts. No ACK: the supervisor escalates only the main
cell's interrupts.
"""
function interrupt_beside(c::EvalCtx)
    c.cancelled = true
    t = c.task
    if c.in_user && t !== current_task() && !istaskdone(t)
        schedule(t, InterruptException(); error = true)
    else
        c.pending_interrupt = true
    end
    nothing
end

# The interrupt state of an evaluation: the main one's globals (`nothing`), or a beside one's.
in_user(::Nothing) = IN_USER[]
in_user(c::EvalCtx) = c.in_user
set_in_user!(::Nothing, on::Bool) = (IN_USER[] = on; nothing)
set_in_user!(c::EvalCtx, on::Bool) = (c.in_user = on; nothing)

"""Whether an interrupt is pending for the evaluation; it no longer is."""
function take_pending_interrupt!(::Nothing)
    PENDING_INTERRUPT[] || return false
    PENDING_INTERRUPT[] = false
    return true
end
function take_pending_interrupt!(c::EvalCtx)
    c.pending_interrupt || return false
    c.pending_interrupt = false
    return true
end
