# helpers.jl: logging to Julia's log, guarded long-lived tasks, interrupt forwarding,
# capping results, and work handed to thread 1.

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
    t = something(CELL_TASK[], EVAL_TASK[])   # a cell's own task where it has one (compat.jl)
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
    claim_interrupt(request) -> Bool

Whether the INT frame, not the supervisor's SIGINT, delivers interrupt `request`: whichever
side makes the directory `<CLAIMS_DIR>/<request>` first delivers it (supervisor.py says why).
`mkdir` is atomic and fails with EEXIST for the loser (uv_fs_mkdir, synchronous with no loop
and no callback: JuliaLang/julia release-1.10, release-1.12 and master base/file.jl); `isdir`
tells that failure from any other. Without a claims directory, or if it is unusable, the frame
delivers, as before claims existed.
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
