# Julia master's `Base.isprecompiled`, for Julia 1.5.3 (which has none) and 1.10 to 1.13 (whose
# method also takes `sourcepath`).
#
# `Base.isprecompiled(pkg::PkgId; ignore_loaded::Bool=false)` on master (JuliaLang/julia master
# base/loading.jl, "compat: Julia 1.10") finds the package's source as loading does, through
# LOAD_PATH (`compilecache_freshest_path`'s `sourcespec = Base.locate_package_load_spec(pkg)`;
# it errors "Cannot locate source" without one), and tries every cache file of the depots.
# release-1.10 and release-1.12 also took `sourcepath`, a keyword master no longer has (#60018):
# passing it is a MethodError there, which made every start load JKernel from source. On 1.10
# to 1.13 this replaces Base's method (the same positional signature) with master's keywords.
# Written here from that contract, not copied; a no-op where Base has it already (master).

if !isdefined(Base, :isprecompiled) ||
        any(m -> :sourcepath in Base.kwarg_decl(m), methods(Base.isprecompiled))
    Core.eval(Base, quote
        const CONTRACT_ISPRECOMPILED = true
        function isprecompiled(pkg::PkgId; ignore_loaded::Bool = false)
            path = locate_package(pkg)
            path === nothing && error("Cannot locate source for ", repr("text/plain", pkg))
            return any(f -> stale_cachefile(path, f) !== true, find_all_in_cache_path(pkg))
        end
    end)
end

# The emulation must hold, or the tests that preload it prove nothing.
isdefined(Base, :CONTRACT_ISPRECOMPILED) && let
    pkg = Base.PkgId(Base.UUID("44cfe95a-1eb2-52ea-b672-e2afdf69b78f"), "Pkg")
    try
        Base.isprecompiled(pkg; sourcepath = "")
        error("contracts/isprecompiled_master.jl: `sourcepath` was accepted")
    catch e
        e isa MethodError || rethrow()
    end
end
