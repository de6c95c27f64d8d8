# A julia_needs probe (scripts/mutants.py): whether this Julia's package cache holds a Base
# method specialized on a closure that captures a value of a Union type, when a precompiled
# function calls it. That is M342's edit (the listener's read as such a closure inside
# `guarded`, with SOCK's Union{PipeEndpoint,TCPSocket}): where the cache holds it, the edit
# compiles nothing at run time and cannot break the promise. Julia 1.10.0 here: not held
# (`disable_sigint(::var"#2#4"{IOBuffer})` compiles at the first call); 1.12.5: held.
# A tiny package in a private depot, its cache written by one Julia process and used by the
# next under --trace-compile: ~3 s.
function union_closure_cached()
    dir = mktempdir()
    src = joinpath(dir, "UnionClosureProbe", "src")
    mkpath(src)
    write(joinpath(src, "UnionClosureProbe.jl"), """
        module UnionClosureProbe
        const S = Ref{Union{IOBuffer, Base.PipeEndpoint}}()
        function guarded(f)
            try
                f()
            catch
            end
        end
        f() = guarded() do
            s = S[]
            eof(s) && return 0
            disable_sigint(() -> read(s, UInt8))
        end
        precompile(f, ())
        end
        """)
    env = copy(ENV)
    env["JULIA_LOAD_PATH"] = join([dir, "@stdlib"], Sys.iswindows() ? ';' : ':')
    env["JULIA_DEPOT_PATH"] = joinpath(dir, "depot") * (Sys.iswindows() ? ";" : ":")
    julia = Base.julia_cmd()
    trace = joinpath(dir, "trace.jl")
    quiet(cmd) = run(pipeline(setenv(cmd, env); stdout = devnull, stderr = devnull))
    quiet(`$julia --startup-file=no -e 'using UnionClosureProbe'`)   # writes the cache
    call = "using UnionClosureProbe; UnionClosureProbe.S[] = IOBuffer([0x01]); UnionClosureProbe.f()"
    quiet(`$julia --startup-file=no --trace-compile=$trace -e $call`)
    compiled = isfile(trace) ? read(trace, String) : ""
    rm(dir; recursive = true, force = true)
    return !occursin("UnionClosureProbe", compiled)
end

union_closure_cached()
