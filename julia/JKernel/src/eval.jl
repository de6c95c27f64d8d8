# eval.jl: the evaluation loop, run_cell, error reports and the idle warm-up. How an interrupt
# reaches the running cell is in interrupts.jl.

ends_with_semicolon(code::String) = REPL.ends_with_semicolon(code)

# Where an interrupt lands while the cell waits: scheduler frames that tell the user nothing.
const SCHEDULER_FILES = ("task.jl", "condition.jl", "asyncevent.jl", "event.jl", "lock.jl",
                         "locks-mt.jl", "stream.jl", "channels.jl", "libuv.jl")

# Julia 1.5-1.11 look a frame of code in the system image (or a package image) up in its debug
# info anew every time, ~8 ms a frame on 1.10 here (1.12 caches the lookups itself): an
# interrupted `sleep` has five such frames above the cell's, and the server's own frames below
# it more, so rendering its InterruptException took 100-300 ms, most of an interrupt's time.
# Julia never frees compiled code, so an address names the same frames for the whole session:
# each is looked up once (Base.StackTraces.lookup, which `stacktrace` calls for every address).
const FRAMES_AT = Dict{Ptr{Cvoid},Vector{Base.StackTraces.StackFrame}}()
const FRAMES_AT_MAX = 10_000   # addresses; a session that met more starts over
const NO_FRAMES = Base.StackTraces.StackFrame[]

"""The frames (more than one where code was inlined) at backtrace entry `ip`; none for compiled
code in a warm-up step's errors, whose lookup would read Julia's debug information (~70 MiB
kept for the session, on 1.10.0) for text nobody sees: the user's first error reads it, as in
the REPL and IJulia."""
function frames_at(ip)
    ip isa Ptr{Cvoid} || return Base.StackTraces.lookup(ip)   # interpreted: no debug info
    WARM_UP_TASK[] === current_task() && return NO_FRAMES
    frames = get(FRAMES_AT, ip, nothing)
    if frames === nothing
        length(FRAMES_AT) >= FRAMES_AT_MAX && empty!(FRAMES_AT)
        frames = FRAMES_AT[ip] = Base.StackTraces.lookup(ip)
    end
    return frames
end

"""The frames of `bt` that belong to the user's code, without the server's own: those above
the first frame in the server's files, which are not looked up at all."""
function user_backtrace(bt, interrupted::Bool = false)
    # stacktrace(bt) without C frames, as Base's (stacktraces.jl, 1.5.3 to 1.12), cut early
    frames = Base.StackTraces.StackFrame[]
    for ip in bt, f in frames_at(ip)
        f.from_c && continue
        dirname(string(f.file)) == SRC_DIR && break
        push!(frames, f)
    end
    if interrupted
        while length(frames) > 1 && basename(string(frames[1].file)) in SCHEDULER_FILES
            popfirst!(frames)
        end
    end
    # a syntax error has no frames of its own, only a "top-level scope at none:1"
    filter!(f -> f.file !== :none, frames)
    while !isempty(frames) && frames[end].func === :eval && endswith(string(frames[end].file), "boot.jl")
        pop!(frames)
    end
    return frames
end

"""
    ErrorReport

What an error or interrupt in a cell shows: the ERR frame's JSON and, as `traceback`, the text
of its RES. Each text has its own fallback (error_report): showing an error runs user code.
"""
struct ErrorReport
    ename::String       # the exception's type name ("Error" if even that fails)
    evalue::String      # showerror, uncoloured: frontends show it as plain text
    traceback::String   # showerror and the user's frames, coloured as the REPL shows them
end

"""
    CellOutcome

What a cell came to, as run_cell renders it and finish_evaluation sends it.
"""
struct CellOutcome
    status::String                          # "ok", "err" or "int": the RES frame's status
    text::String                            # ok: the value's text/plain ("" for none or `;`)
    rich::Union{Nothing,Dict{String,Any}}   # ok: its MIME bundle when richer (the VAL frame)
    report::Union{Nothing,ErrorReport}      # err and int: the ERR frame, and the RES text
end

"""
    error_report(e, bt) -> ErrorReport

The report of exception `e` thrown with backtrace `bt`.
"""
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
    return ErrorReport(ename, evalue, full)
end

"""
    run_cell(mod, code, filename, cell=0, ctx=nothing) -> CellOutcome

Evaluate `code` in `mod` the way the REPL does and render the outcome: status "ok" with the
value's text/plain (and its MIME bundle when richer), or "err" / "int" with an error report.
With a cell number (a notebook cell, `In[cell]`), the hooks run and `ans`, `Out[cell]` and
`err` are set as in IJulia and the REPL. Sends nothing but an interrupt's ACK, so `warm_up`
can run it too. With a `ctx`, a beside evaluation's (beside.jl): its own interrupt state, no
startup file, no ^C episode, and nothing done to Distributed workers (the main cell's).
"""
function run_cell(mod::Module, code::String, filename::String, cell::Int = 0,
                  ctx::Union{Nothing,EvalCtx} = nothing)
    status = "ok"
    text = ""
    rich = nothing
    report = nothing
    main = ctx === nothing && CURRENT[] != 0   # the main cell (not warm-up, not beside)
    try
        set_in_user!(ctx, true)
        STARTUP_PENDING[] && main && run_startup_files()   # not in warm-up cells
        # A late SIGINT can tear a background task's send to a worker too (drop_torn_sends).
        cell > 0 && main && Base.invokelatest(drop_torn_sends)
        cell > 0 && run_hooks(PREEXECUTE_HOOKS)
        value = ctx === nothing ? in_cell_scope(() -> eval_cell(mod, code, filename)) :
            eval_cell(mod, code, filename)
        shown = value !== nothing && !ends_with_semicolon(code)
        if cell > 0
            set_main_global!(:ans, value)
            IJulia.record_value!(value)
            shown && value !== Out && (Out[cell] = value)
            run_hooks(POSTEXECUTE_HOOKS)
        end
        if shown
            data = Base.invokelatest(mime_bundle, value)
            text = data["text/plain"]
            length(data) > 1 && (rich = data)
        end
        set_in_user!(ctx, false)
    catch e
        set_in_user!(ctx, false)
        bt = catch_backtrace()
        status = is_interrupt(e) ? "int" : "err"
        # Before rendering the error, which can take a second while that code is still cold.
        status == "int" && ctx === nothing && acknowledge_interrupt()
        # A SIGINT meant for the main cell that landed in a beside evaluation's task (it
        # runs where the main cell yields): the main cell gets it too.
        status == "int" && ctx !== nothing && !ctx.cancelled && forward_interrupt()
        # First the sends the interrupt tore, before anything else writes to a worker.
        status == "int" && main && Base.invokelatest(drop_torn_sends)
        status == "int" && main && Base.invokelatest(interrupt_remote_workers)
        if cell > 0
            try
                set_err!(e)
            catch err
                err isa InterruptException && rethrow()   # as quietly, with no closure to compile
            end
            # Hooks are user code: an interrupt that lands in another task (SIGINT goes to
            # whichever task last waited) is forwarded to them only while IN_USER is set;
            # otherwise it would stay pending behind a hook that waits.
            set_in_user!(ctx, true)
            try
                for hook in copy(POSTERROR_HOOKS)
                    quietly(() -> Base.invokelatest(hook))
                end
            finally
                set_in_user!(ctx, false)
            end
        end
        report = try
            set_in_user!(ctx, true)   # showing an error runs user code (showerror methods) too
            r = Base.invokelatest(error_report, status == "int" ? the_interrupt(e) : e, bt)
            set_in_user!(ctx, false)
            r
        catch e2
            set_in_user!(ctx, false)
            is_interrupt(e2) ? ErrorReport("InterruptException", "", "InterruptException:") :
                ErrorReport("Error", "", "error while showing an error")
        end
    end
    return CellOutcome(status, text, rich, report)
end

"""The outcome of a cell that an interrupt ended before it ran, or outside run_cell."""
const INTERRUPTED = CellOutcome("int", "", nothing,
    ErrorReport("InterruptException", "InterruptException:", "InterruptException:"))

evaluate(id::Int, code::String, name::String, named::Bool) = run_evaluation(id) do
    cell = named ? cell_number(name, id) : 0
    cell > 0 && (In[cell] = code; IJulia.record_cell!(cell))
    INTERRUPTED_BEFORE_START[] == id ? INTERRUPTED :
        in_cell_task(() -> run_cell(Main, code, name, cell))
end

"""
    run_evaluation(outcome_of, id)

Run evaluation `id` (a cell, or a comm callback: comms.jl): `outcome_of()` does the work and
returns its CellOutcome; then the result is sent, whatever happened.
"""
function run_evaluation(outcome_of::Function, id::Int)
    CURRENT[] = id
    LAST_ID[] = id
    PENDING_INTERRUPT[] = false
    # An interrupt can land anywhere from here to the result: a SIGINT sent behind an INT frame
    # that Julia was too busy to ACK at once, or Ctrl-C pressed again during a slow post-error
    # hook, arrives while run_cell handles the first. Escaping evaluate it would end the
    # evaluation without a result, and the supervisor would wait for one until it restarted
    # Julia. So every interrupt before the result ends in one.
    outcome = try
        outcome_of()
    catch e
        is_interrupt(e) || rethrow()
        INTERRUPTED
    end
    try
        Base.invokelatest(compile_worker_handling)
        Base.invokelatest(update_lifelines)
    catch e
        is_interrupt(e) || rethrow()   # the cell is over: a late interrupt has nothing to stop
    end
    try
        finish_evaluation(id, outcome)
    catch e
        # A bug of ours must not leave the supervisor waiting for a result that never comes.
        e isa InterruptException && rethrow()
        diag("sending the result of ", id, " failed: ", sprint(showerror, e, catch_backtrace()))
        end_current_cell!()
        # Carrying the last marker again releases output the supervisor may hold behind it.
        send_frame(FrameKind.RES, string(id, " err"),
                   string("jutul-jkernel could not send this cell's result: ",
                          sprint(showerror, e)); mark = last_mark())
    end
end

"""
    finish_evaluation(id, outcome)

Send the result of evaluation `id`, after its output: ERR and then RES for an error or
interrupt, VAL (when the bundle fits) and then RES for a value.
"""
function finish_evaluation(id::Int, outcome::CellOutcome)
    disable_sigint() do
        mark = drain_output(true)   # the first frame below carries it
        text, mark = send_error_or_value(id, outcome, mark)
        end_current_cell!()
        PENDING_INTERRUPT[] = false
        send_frame(FrameKind.RES, string(id, " ", outcome.status), capped(text); mark = mark)
    end
end

"""
    send_error_or_value(id, outcome, mark) -> (text, mark)

Send what comes before evaluation `id`'s RES: ERR for an error or interrupt, VAL for a value
richer than text (when the bundle fits), the first with `mark`. Return the RES text and the
mark still to send (0 once a frame carried it).
"""
function send_error_or_value(id::Int, outcome::CellOutcome, mark::Int)
    text, report, rich = outcome.text, outcome.report, outcome.rich
    if report !== nothing
        send_frame(FrameKind.ERR, string(id),
                   json(Dict("ename" => report.ename, "evalue" => capped(report.evalue),
                             "traceback" => split(capped(report.traceback), '\n')));
                   mark = mark)
        return report.traceback, 0
    elseif rich !== nothing
        payload = json(Dict("data" => rich, "metadata" => Dict{String,Any}()))
        if length(payload) <= RICH_CAP
            send_frame(FrameKind.VAL, string(id), payload; mark = mark)
            return text, 0
        end
    end
    return text, mark
end

const IDLE_BEFORE_WARM_UP = 0.2   # seconds without requests before a warm-up step runs

"""
    warm_up_steps() -> Vector{Pair{String,Any}}

What nearly every session needs compiled, each step by name (showing errors and common values,
the result path): Julia needs ~0.35 s for its first `showerror` and ~0.3 s per element type to
print an array. `eval_loop` runs these one at a time once Julia has been idle for
`IDLE_BEFORE_WARM_UP`, so the first cells of an interactive session answer in milliseconds and a batch run is never delayed
by more than one step. A query is idleness broken too: one that came while a step ran is
answered before the next step starts (`still_idle`), and the next waits a whole interval after
it. The steps' own code is in the compile cache (precompile.jl), so a step costs only what
Base compiles or loads for it. The steps' errors are shown without looking their compiled
frames up (`frames_at`): the first lookup reads Julia's debug information, ~70 MiB kept for the
session on 1.10.0, which the user's first error then reads instead (74 ms against 11 for that
error, IJulia's 100; idle RSS 397 -> 323 MiB with the kernel process, IJulia's 265).
"""
function warm_up_steps()
    scratch = Module(:JKernelWarmUp)
    cell(code) = code => (warm_cell, scratch, code)
    return Pair{String,Any}[
        # A widget manager's first comm_open asks this while a cell may run; the kernel waits
        # 1 s for the answer (jupyter/comms.py _COMM_TARGET_WAIT), and cold it took 0.3 s even after
        # the other steps, 3.6 s in a fresh session, on a loaded machine.
        "comm_target" => (answer_query, "comm_target", "jkernel_warm_up", 0),
        # A cell printing heavily switches to buffered writes, where println is Base's: compiled
        # at the switch, that stalls Julia ~35 ms mid-flood (1.5.3), and an interrupt arriving
        # then finds neither output nor an answer to its frame, so it goes by SIGINT.
        "buffered writes" => (warm_buffering,),
        cell("1 + 1"),
        # a subshell's cell: its context, as every task it starts finds it (beside.jl)
        "subshell cell" => (warm_subshell_cell, scratch),
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
        # a function definition, whose value shows as "f (generic function with 1 method)":
        # Base's show for any function compiles here, not in the user's first (17 ms, 1.10.0)
        cell("warm_up_f_(x) = x"),
        # a cell with a syntax error: on 1.10 the parser's error path compiles at run time
        # (compat.jl, syntax_status says why; is_complete no longer takes that path)
        "syntax error" => (parse_cell, "function f(x)", "warm-up"),
        "complete" => (answer_query, "complete", "prin", 4),
        "inspect" => (answer_query, "inspect", "sum", 3),
        # An interrupt of a cell that never yields goes by SIGINT at once from then on
        # (event_loop.jl); ~10 ms, last: a query that comes meanwhile waits for the step.
        "event loop stamps" => (stamp_event_loop!,),
        # The steps' garbage collected while idle: else the first collection that found it was
        # a full one of ~60 ms in a user's early cell (1.10.0).
        "collect garbage" => (GC.gc, true),
    ]
end

# The warm-up's steps are a function and its arguments, not closures: each closure's code was
# compiled at run time (40-70 ms a step), and precompiling them (precompile.jl) doubled the
# inference the compile cache's workload records, ~25 s more of every compile on 1.10.
function warm_cell(scratch::Module, code::String)
    outcome = run_cell(scratch, code, "warm-up")
    report = outcome.report
    report === nothing ||
        json(Dict("ename" => report.ename, "traceback" => split(report.traceback, '\n')))
    outcome.rich === nothing || json(Dict("data" => outcome.rich))
    capped(outcome.text)
end

function warm_buffering()
    send_mark(drain_output())
    set_buffering!(true)
    set_buffering!(false)
    precompile(print, (StdioContext, String, Char))
end

function warm_subshell_cell(scratch::Module)
    c = EvalCtx(0, current_task(), false, false, false, UInt8[], UInt8[])
    with_ctx(() -> capped(run_cell(scratch, "1 + 1", "warm-up", 0, c).text), c)
end

function eval_loop()
    append!(WARM_UP, warm_up_steps())
    guarded("eval") do
        while true
            request = take!(QUEUE)
            if request isa Evaluation
                IDLE_GENERATION[] += 1
                evaluate(request.id, request.code, request.name, request.named)
            elseif request isa CommDelivery
                IDLE_GENERATION[] += 1
                deliver_comm(request)
            # A WarmUpTick: one step, if no request came since the idle interval began or waits
            elseif request.generation == IDLE_GENERATION[] && !isempty(WARM_UP) &&
                   still_idle(request.generation)
                run_step(last(popfirst!(WARM_UP)))
                WARMING[] = !isempty(WARM_UP)
            end
        end
    end
end

"""Run one warm-up step, a function and its arguments, in the latest world (a step may be newer
than this task), ignoring its errors as `quietly` does; one method for every step."""
function run_step(@nospecialize(step::Tuple))
    # (a subshell's cell may fail meanwhile, in a task of its own: its frames are looked up)
    WARM_UP_TASK[] = current_task()
    try
        Base.invokelatest(step...)
    catch e
        e isa InterruptException && rethrow()
    finally
        WARM_UP_TASK[] = nothing
    end
    nothing
end

"""
    still_idle(generation) -> Bool

Whether no request came since the tick of `generation`, counting what is still unread: a
frame that arrived while the last step held the thread is read first (libuv is polled when this
task is resumed, and the listener then runs before it does again), so a query waits for the step
that was running, never for another one.
"""
function still_idle(generation::Int)
    for _ in 1:2
        yield()
    end
    return generation == IDLE_GENERATION[] && !isready(QUEUE) && !isready(QUERIES)
end
