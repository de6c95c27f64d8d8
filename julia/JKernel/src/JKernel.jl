"""
    JKernel

The Julia end of jutul-jkernel, a Jupyter kernel for Julia. `julia/server.jl` loads this
package and calls [`JKernel.main`](@ref), which connects to the supervisor and serves one
kernel; the frames it speaks are listed in `frames.jl`. Standard library only; Julia 1.5.3 or
newer.

What a notebook cell can call (as `JKernel.name`; `In`, `Out` and `IJulia` are in `Main`):
`display(x; display_id)`, `update_display`, `clear_output`, `progress(itr; desc)`,
`input(prompt; password)`, and IJulia's notebook API through `IJulia` (see `ijulia.jl`).

The files, in load order: `state.jl` (limits and all server state), `compat.jl` (what differs
by Julia version, each branch citing the upstream source it follows), `helpers.jl`,
`interrupts.jl` (how an interrupt reaches the running cell, ^C as a cancellation included),
`event_loop.jl` (when the event loop last polled, for the supervisor's SIGINT),
`json.jl` (the JSON writer), `frames.jl` (the frame kinds, generated from the protocol's
declaration), `wire.jl` (frames sent, read and handled), `capture.jl` (fd 1 and 2, drain
markers, write buffering), `display.jl`, `comms.jl` (IJulia's CommManager: comms both ways),
`progress.jl`, `stdin.jl`, `repl.jl` (cell semantics, REPL modes, `import IJulia`),
`ijulia.jl` (the IJulia shim), `eval.jl` (evaluation, error reports, warm-up), `beside.jl`
(a subshell's requests, run beside the main cell), `queries.jl`
(complete, inspect, is_complete), `startup_file.jl`, `distributed.jl` (workers on other hosts),
`lifeline.jl` (local and SSH workers end with this process), `main.jl` (start-up), and
`precompile.jl` (the signatures compiled into the package cache).
"""
module JKernel

using Sockets
using REPL
using Base64: base64encode
using Logging: ConsoleLogger, global_logger
import Logging

# Backtraces are cut at the first frame in one of these files (user_backtrace).
const SRC_DIR = @__DIR__

include("state.jl")
include("compat.jl")
include("helpers.jl")
include("interrupts.jl")
include("event_loop.jl")
include("json.jl")
include("frames.jl")
include("wire.jl")
include("capture.jl")
include("display.jl")
include("comms.jl")
include("progress.jl")
include("stdin.jl")
include("repl.jl")
include("ijulia.jl")
include("eval.jl")
include("beside.jl")
include("queries.jl")
include("startup_file.jl")
include("distributed.jl")
include("lifeline.jl")
include("main.jl")
include("precompile.jl")

function __init__()
    # A fresh marker in every process (see MARK): 16 random hex digits between delimiters.
    append!(MARK, codeunits("\0\x1fJJK" * string(rand(UInt64); base = 16, pad = 16) * "\x1f\0"))
    nothing
end

end # module JKernel
