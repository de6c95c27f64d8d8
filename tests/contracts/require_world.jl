# Julia >= 1.10's fixed loading world, for Julia 1.5.3.
#
# Since 1.10 `require(into::Module, mod::Symbol)` (what `using X` and `import X` call) runs
# `__require` through `invoke_in_world(_require_world_age[], ...)`, and `Base.__init__` sets
# `_require_world_age` once: package loading, compiling (`compilecache`, `create_expr_cache`'s
# `pipeline(cmd; stderr = stderr)`) and 1.11+'s `Precompilation.precompilepkgs(...; io =
# stderr)` run in a world where no method defined after Julia started is visible (JuliaLang/julia
# release-1.10 and release-1.12 base/loading.jl; julia#51280, IJulia#1089, julia-vscode#4042).
# A `stdout`/`stderr` of a type of ours then fails with "method too new".
#
# Julia 1.5.3 has neither `invoke_in_world` nor `Core._call_in_world`, but a task's world age
# is a field of the thread's state (julia.h, `jl_tls_states_t`: `pgcstack`, then
# `world_age`), which `jl_get_tls_world_age` reads back: this file, loaded with -L before the
# server (so before JKernel exists, as `Base.__init__` is before any package), records the
# world and makes `require(into, mod)` resolve the package and load it in that world.

if !isdefined(Base, :_require_world_age)
    Core.eval(Base, quote
        const CONTRACT_REQUIRE_WORLD = get_world_counter()

        function contract_in_world(f, world::UInt, args...)
            ptls = ccall(:jl_get_ptls_states, Ptr{Csize_t}, ())
            saved = unsafe_load(ptls, 2)
            unsafe_store!(ptls, world, 2)
            try
                ccall(:jl_get_tls_world_age, Csize_t, ()) == world ||
                    error("contracts/require_world.jl: the world age did not take hold")
                return f(args...)
            finally
                unsafe_store!(ptls, saved, 2)
            end
        end

        function require(into::Module, mod::Symbol)
            pkg = identify_package(into, String(mod))
            pkg === nothing && throw(ArgumentError(string("Package ", mod,
                " not found in current path (contracts/require_world.jl)")))
            return contract_in_world(require, CONTRACT_REQUIRE_WORLD, pkg)
        end
    end)
end

# The emulation must hold: a method defined after the recorded world is invisible in it. (On a
# Julia that has the contract, Base's own `_require_world_age` is the contract.)
if isdefined(Base, :CONTRACT_REQUIRE_WORLD)
    @eval module RequireWorldContractProbe
    probe(x) = :new_world
    Base.contract_in_world(probe, Base.get_world_counter(), 1) === :new_world ||
        error("contracts/require_world.jl: calling in a world failed")
    try
        Base.contract_in_world(probe, Base.CONTRACT_REQUIRE_WORLD, 1)
        error("contracts/require_world.jl: a newer method was visible in the loading world")
    catch e
        e isa MethodError || rethrow()
    end
    end
end
