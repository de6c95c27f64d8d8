# helpers.jl: logging to Julia's log, guarded long-lived tasks, capping results, and work
# handed to thread 1.

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
