# Julia master's ^C episodes (1.14-DEV), the names JKernel gates on, for Julia 1.5.3.
#
# On master the owner of an interactive session calls `Base.sigint_new_episode!()` before each
# foreground evaluation and runs it under the returned token (`Base.with_cancel_token(f,
# token)`; `Base.CANCEL_TOKEN` is the scoped value it sets). The call records its caller as
# "the task driving the current foreground evaluation" (`Base._sigint_foreground_task`), and
# the last rung of the ^C ladder freezes that task for good: `freeze_task!(fg, ...)` at
# `CANCEL_REQUEST_ABANDON_ALL` in `_sigint_dispatch_pass` (JuliaLang/julia master base/Base.jl
# and base/cancellation.jl, the copies read for julia/JKernel/surface.toml). So each cell must
# open its episode from a task of its own, not from JKernel's evaluation loop, and
# interrupts must still reach it there.
#
# Only the names and the foreground-task record are reproduced: no token is scoped or ever
# cancelled, and ^C stays 1.5.3's InterruptException. JKernel reads these names when it is loaded
# (`HAS_CANCEL_SCOPES`), so a server that preloads this file must load JKernel from source
# (JUTUL_JKERNEL_PRECOMPILED=no), as a cache compiled on master would have them.
# Written here from that contract, not copied; a no-op where Base has it already.

if !isdefined(Base, :sigint_new_episode!)
    Core.eval(Base, quote
        struct CancellationRequest <: Exception
            request::UInt8
        end
        struct CancellationToken
            episode::Int
        end
        const CANCEL_TOKEN = nothing   # master: a ScopedValue; JKernel only asks whether it exists
        const _sigint_foreground_task = Ref{Union{Nothing,Task}}(nothing)
        const CONTRACT_SIGINT_EPISODES = Ref(0)

        function sigint_new_episode!()
            _sigint_foreground_task[] = current_task()
            return CancellationToken(CONTRACT_SIGINT_EPISODES[] += 1)
        end

        # master scopes `token` over f's dynamic extent; nothing here reads it back
        with_cancel_token(f, token::Union{Nothing,CancellationToken}) = f()
    end)
end

# The emulation must hold, or the tests that preload it prove nothing.
let t = @async Base.with_cancel_token(() -> :ran, Base.sigint_new_episode!())
    fetch(t) === :ran && Base._sigint_foreground_task[] === t ||
        error("contracts/sigint_episodes.jl: the contract did not take hold")
end
