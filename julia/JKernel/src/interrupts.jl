# interrupts.jl: how an interrupt reaches the running cell, on every Julia.
#
# SIGINT is thrown into whichever task runs on thread 1, which is often not the evaluating one.
# Every long-lived task here catches InterruptException and forwards it to the evaluation with
# `schedule(task, InterruptException(); error=true)` (forward_interrupt); an interrupt that
# lands in a finished task reaches the same forwarding through Base.active_repl_backend (see
# install_interrupt_sink!). INT frames use the same path and need no signal; a request is
# delivered once, by the frame or by the supervisor's SIGINT, whichever claims it first
# (claim_interrupt). Frame writes run with SIGINT deferred so an interrupt cannot tear a frame.
# The server starts no short-lived tasks: on Julia 1.5 a SIGINT landing in a finished task
# while others are queued is fatal. The supervisor's side, the escalation from frame to SIGINT
# to a restart, is jutul_jkernel/supervisor/interrupts.py.

"""
    forward_interrupt()

Deliver an interrupt to the running evaluation, or drop it when nothing runs; return whether
it will reach the evaluation.
"""
function forward_interrupt()
    CURRENT[] == 0 && return false
    t = something(CELL_TASK[], EVAL_TASK[])   # a cell's own task where it has one (in_cell_task)
    if IN_USER[] && t !== current_task() && !istaskdone(t)
        # schedule(...; error=true) first takes the task off whatever queue it waits in, so a
        # second interrupt just replaces the first.
        schedule(t, InterruptException(); error = true)
    else
        PENDING_INTERRUPT[] = true
    end
    return true
end

"""
    interrupt_frame(id, request)

An INT frame: interrupt request `request` for evaluation `id`. Answered with an ACK whenever it
reached, or will reach, that evaluation.
"""
function interrupt_frame(id::Int, request::Int)
    c = get(BESIDE, id, nothing)
    c === nothing || return interrupt_beside(c)
    id in BESIDE_ENDED && return nothing   # answered already: no main evaluation's id
    if id == CURRENT[]
        # The SIGINT that claimed the request delivers it; either way it reached the cell.
        claim_interrupt(request) && forward_interrupt()
        send_frame(FrameKind.ACK, string(id))
    elseif id > LAST_ID[]
        # Sent but not started (the first cell compiles the server for a second): it
        # starts interrupted, with no signal needed. A SIGINT that claimed the request
        # first cannot reach the cell's code either: it lands before the cell starts, or
        # while evaluate starts it, which ends in the same interrupted result. Claiming
        # spares the supervisor that SIGINT.
        claim_interrupt(request)
        INTERRUPTED_BEFORE_START[] = id
        send_frame(FrameKind.ACK, string(id))
    end
    nothing
end

"""
The supervisor escalates an interrupt until it hears that it reached the evaluation's code:
tell it (the ACK of the running evaluation).
"""
acknowledge_interrupt() = CURRENT[] != 0 && send_frame(FrameKind.ACK, string(CURRENT[]))

"""
    claim_interrupt(request) -> Bool

Whether the INT frame, not the supervisor's SIGINT, delivers interrupt `request`: whichever
side makes the directory `<CLAIMS_DIR>/<request>` first delivers it (supervisor/interrupt_claims.py
says why). `mkdir` is atomic and fails with EEXIST for the loser (uv_fs_mkdir, synchronous with
no loop and no callback: JuliaLang/julia release-1.10, release-1.12 and master base/file.jl);
`isdir` tells that failure from any other. Without a claims directory, or if it is unusable,
the frame delivers: a request may then be delivered twice, but never lost.
"""
function claim_interrupt(request::Int)
    isempty(CLAIMS_DIR[]) && return true
    path = joinpath(CLAIMS_DIR[], string(request))
    try
        mkdir(path)
        return true
    catch e
        e isa InterruptException && rethrow()
        isdir(path) && return false
        diag("could not claim interrupt ", request, ": ", sprint(showerror, e))
        return true
    end
end

"""The interrupt sink's task (install_interrupt_sink!): wait forever, forward interrupts."""
function interrupt_sink_loop()
    while true
        try
            wait()
        catch e
            e isa InterruptException ? forward_interrupt() :
                diag("interrupt sink got ", sprint(showerror, e))
        end
    end
end

"""
    install_interrupt_sink!()

An interrupt that lands in a finished task reaches `Base.task_done_hook`, which hands it to
`Base.active_repl_backend.backend_task` when `in_eval` is set, and otherwise kills the process
("fatal: error thrown and no exception handler available"). Point it at a task that waits
forever and forwards what it receives.
"""
function install_interrupt_sink!()
    # schedule(Task(f)), not `@async`: its closure was compiled at every start (10-40 ms)
    sink = schedule(Task(interrupt_sink_loop))
    # The REPL's backends start with its default transforms, `REPL.softscope` first, so a
    # loop in a cell updates a global as it does at the prompt and in IJulia.
    BACKEND[] = Backend(sink, true, default_ast_transforms(SOFTSCOPE[]))
    try
        Core.eval(Base, :(active_repl_backend = $(BACKEND[])))
    catch e
        diag("could not install the interrupt sink: ", sprint(showerror, e))
    end
end

# A SIGINT lands in whichever task runs, and the code waiting on that task rethrows it wrapped:
# `fetch`/`wait` as a TaskFailedException, asyncmap (pmap's engine) as a CapturedException
# (base/asyncmap.jl; seen on 1.12 when ^C hit a pmap worker task), `@sync` as a
# CompositeException. Each is the interrupt the user asked for.
is_interrupt(e) = e isa InterruptException || is_cancellation(e) ||
    (e isa TaskFailedException && is_interrupt(e.task.exception)) ||
    (e isa CapturedException && is_interrupt(e.ex)) ||
    (e isa CompositeException && any(is_interrupt, e.exceptions)) ||
    (e isa LoadError && is_interrupt(e.error))

"""
    the_interrupt(e)

The interrupt that a task's wrapper `e` holds (see is_interrupt), for the report of an
interrupted cell: which task the signal hit is chance, and the user asked to stop, so the report
says InterruptException whatever task it landed in. A LoadError stays: it names the file.
"""
function the_interrupt(e)
    e isa TaskFailedException && return the_interrupt(e.task.exception)
    e isa CapturedException && return the_interrupt(e.ex)
    if e isa CompositeException
        i = findfirst(is_interrupt, e.exceptions)
        i === nothing || return the_interrupt(e.exceptions[i])
    end
    return e
end

# ---- ^C as a cancellation (Julia 1.14-DEV, master) ----
# On master (NEWS.md: "In interactive sessions, ^C now cancels the current evaluation's
# cancellation scope (instead of throwing an InterruptException into whatever code happened
# to be running)", #60281), `_start` runs the whole script under a ^C episode token, every
# @async task inherits it, and once cancelled every wait, sleep and socket write throws
# `Base.CancellationRequest` (base/cancellation.jl: "Cancellation is uniformly
# level-triggered"), which would end the server's own loops. So the server's tasks run with no
# token ("Scoping `Base.CANCEL_TOKEN => nothing` instead *shields* the enclosed code",
# base/cancellation.jl), and each cell in a task of its own, under a fresh episode's token, as
# the REPL backend runs each evaluation (base/Base.jl `sigint_new_episode!`). Everything here
# is gated on the names existing; on Julia 1.5-1.13 it does nothing.

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

"""
    in_cell_task(f)

Run a cell (`f`, which ends up in `in_cell_scope`) and return its value: where ^C is a
cancellation, in a task of its own, so that the task that opens the cell's ^C episode is the
cell's and not the evaluation loop. Master's `sigint_new_episode!` records its caller as "the
task driving the current foreground evaluation", and the last rung of the ^C ladder
(`_sigint_dispatch_pass`, base/Base.jl) freezes that task: `freeze_task!(fg, ...)` at
`CANCEL_REQUEST_ABANDON_ALL`, whose tasks "are frozen in place and never scheduled again"
(base/cancellation.jl). Frozen, the evaluation loop would answer nothing more; a frozen cell
task is only the cell lost. Its waiter is woken with a TaskFailedException and the task's
state is `:abandoned` (test/cancellation_exec.jl on master, "task abandonment wakes
waiters"), and that cell ends interrupted. While the task runs, interrupts are forwarded to it
(`CELL_TASK`, see forward_interrupt).
"""
function in_cell_task(f)
    HAS_CANCEL_SCOPES || return f()
    cell = Task(f)   # sticky, so it runs on this thread, as the evaluation loop does
    CELL_TASK[] = cell
    try
        schedule(cell)
        return fetch(cell)
    catch e
        if e isa TaskFailedException && e.task === cell && cell.state === :abandoned
            throw(InterruptException())
        end
        rethrow()
    finally
        CELL_TASK[] = nothing
    end
end
