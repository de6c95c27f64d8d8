# Julia >= 1.9's `pkgversion`, and the package origins it reads, for Julia 1.5.3.
#
# `pkgversion(m::Module)` is the version of the package `m` belongs to, or `nothing`. Base finds
# the root module of `m` (`moduleroot`), the file that root was loaded from (the origin Base
# records in `pkgorigins` before it loads a package, `set_pkgorigin_version_path(pkg, path)`
# holding `require_lock`), the package directory above its `src/` (`pkgdir`; release-1.12 and
# master throw for any other layout), and the `version` of that directory's Project.toml
# (JuliaLang/julia base/loading.jl, `pathof`, `pkgdir`, `pkgversion`, in release-1.10,
# release-1.12 and master; master first reads a version already recorded in the origin).
# A module Base never loaded as a package has no origin: JKernel included with
# `Base.include(Main, ...)` gave `pkgversion(Main.IJulia) === nothing`, and ProgressMeter's
# `pkgversion(Main.IJulia) < v"1.30"` threw.
# Written here from that contract, not copied; a no-op where Base has `pkgversion` already.

if !isdefined(Base, :pkgversion)
    Core.eval(Base, quote
        const CONTRACT_PKGVERSION = true
        export pkgversion   # as base/exports.jl does since 1.9

        mutable struct PkgOrigin
            path::Union{String,Nothing}
            cachepath::Union{String,Nothing}
            version::Union{VersionNumber,Nothing}
        end
        PkgOrigin() = PkgOrigin(nothing, nothing, nothing)
        const pkgorigins = Dict{PkgId,PkgOrigin}()
        const require_lock = ReentrantLock()

        function set_pkgorigin_version_path(pkg::PkgId, path::String)
            islocked(require_lock) || error("set_pkgorigin_version_path: require_lock is not held")
            get!(PkgOrigin, pkgorigins, pkg).path = path
            nothing
        end

        function contract_package_dir(m::Module)
            key = get(module_keys, moduleroot(m), nothing)
            key === nothing && return nothing
            origin = get(pkgorigins, key, nothing)
            (origin === nothing || origin.path === nothing) && return nothing
            dir, sub = splitdir(dirname(origin.path))
            sub == "src" || error("Unexpected path structure for module source: ", origin.path)
            return dir
        end

        function pkgversion(m::Module)
            dir = contract_package_dir(m)
            dir === nothing && return nothing
            project = joinpath(dir, "Project.toml")
            isfile(project) || return nothing
            for line in eachline(project)
                startswith(line, "[") && break   # past the top-level keys
                found = match(r"^\s*version\s*=\s*\"([^\"]*)\"", line)
                found === nothing || return VersionNumber(found.captures[1])
            end
            return nothing
        end
    end)

    # 1.10 and newer record the origin of each package as they load it; 1.5.3 records none, so
    # this callback, which `require` runs after loading a package, records where it was found
    # (LOAD_PATH is still the loader's at that point).
    push!(Base.package_callbacks, function (pkg::Base.PkgId)
        path = Base.locate_package(pkg)
        path === nothing && return
        lock(() -> Base.set_pkgorigin_version_path(pkg, path), Base.require_lock)
    end)
end

# The emulation must hold, or the tests that preload it prove nothing.
isdefined(Base, :CONTRACT_PKGVERSION) && let
    Base.pkgversion(Main) === nothing ||
        error("contracts/pkgversion.jl: Main has a version")
    Base.pkgversion(Base.Iterators) === nothing ||
        error("contracts/pkgversion.jl: a module no package loaded has a version")
end
