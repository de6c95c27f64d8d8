# server.jl: start the Julia end of jutul-jkernel, the JKernel package beside this file.
#
#     julia [flags] server.jl <socket|port>   serve one kernel (JKernel.main; see JKernel/src)
#     julia [flags] server.jl --precompile    write JKernel's compile cache, then exit
#     ... --precompile --no-wait              the same, unless a compile is under way (then exit)
#
# The compile cache lives in a depot of its own: $JUTUL_JKERNEL_DEPOT, or by default
# ${XDG_CACHE_HOME:-~/.cache}/jutul-jkernel/julia-<crc of this directory> (one per copy of the
# package, so two checkouts do not overwrite each other's cache). Only while the package loads
# or compiles is DEPOT_PATH that depot and the depots that came with this Julia (its stdlibs'
# caches), not the user's (`package_depots`), and this directory on LOAD_PATH: the user's
# `using JKernel`, the status Pkg shows and DEPOT_PATH see none of it afterwards.
#
# The depot stays bounded (depot.jl does the work, launcher.jl calls it): a compile holds
# DEPOT/compile.lock, so kernels that start together compile once and `--precompile` waits for
# one under way; a lock whose holder died blocks nothing; the temporary files of a killed
# compile go at the next; DEPOT/package-dir names the package directory and, by its mtime
# (rewritten below at each start from the cache), the last use; and a compile into a default
# depot removes the `julia-*` siblings whose package directory is gone or that no kernel used
# for 30 days.
#
# A fresh cache is loaded with Base.require, here. Without one (first start, Julia or the
# package changed: Julia's own staleness check decides), launcher.jl takes over: the source
# is loaded as Base.require loads a package without a cache (a root module, with its origin),
# one line in Julia's log says why, and a compile for the next start runs beside this kernel
# (it ends with the kernel's process group if the kernel ends first). A read-only cache
# directory means source every time, also said in one line. Everything here (and in
# launcher.jl) is evaluated in an anonymous module, not in Main: a `let` in Main would still resolve every Base function it
# calls (`last`, `split`, `filter`, `run`, ...) as Main's, and a cell's `last = 0` would then
# fail with "cannot assign a value to variable Base.last from module Main". Main gets only
# `JKernel`, the notebook API. Julia 1.5.3 or newer.

Core.eval(Module(:JKernelLauncher), quote
    # The common start, kept short on purpose: a script is lowered anew on every start (never
    # cached), and lowering the whole launcher cost ~0.3 s of each start on 1.5.3. A fresh
    # compile cache is loaded here with Julia's own staleness check; anything else (why not,
    # a compile for the next start, the source meanwhile, --precompile) is in launcher.jl.
    # Globals of this module; launcher.jl uses them too.
    pkg = Base.PkgId(Base.UUID("f5fe0b49-b57a-4ee8-9c35-eee7542b45db"), "JKernel")
    pkg_dir = joinpath(@__DIR__, "JKernel")
    entry = joinpath(pkg_dir, "src", "JKernel.jl")
    depot = get(ENV, "JUTUL_JKERNEL_DEPOT", "")
    if isempty(depot)
        cache_home = get(ENV, "XDG_CACHE_HOME", "")
        isempty(cache_home) && (cache_home = joinpath(homedir(), ".cache"))
        key = isdefined(Base, :_crc32c) ? Base._crc32c(pkg_dir) : hash(pkg_dir)
        depot = joinpath(cache_home, "jutul-jkernel", "julia-" * string(key; base = 16))
    end
    precompiling = get(ARGS, 1, "") == "--precompile"
    # DEPOT_PATH while JKernel loads or compiles: compilecache writes to its first entry and
    # loading searches every entry (base/loading.jl, 1.5.3 to master), so the user's depots stay
    # out. A JKernel cache in ~/.julia (a `using JKernel` of some checkout's julia/) was
    # otherwise checked too, and its rejection ("for file ... not file ...") given as the reason
    # this depot's cache was not used (CI, 2026-11-29). Behind this depot, Julia's own, where
    # 1.10+ keeps its stdlibs' caches: base/initdefs.jl's two paths (append_bundled_depot_path!
    # in release-1.12 and master, the last two of append_default_depot_path! before).
    package_depots = [depot, abspath(Sys.BINDIR, "..", "local", "share", "julia"),
                      abspath(Sys.BINDIR, Base.DATAROOTDIR, "julia")]
    jk = if !precompiling && get(ENV, "JUTUL_JKERNEL_PRECOMPILED", "yes") != "no"
        load_path, depot_path = copy(LOAD_PATH), copy(DEPOT_PATH)
        try
            prepend!(empty!(LOAD_PATH), [@__DIR__, "@stdlib"])
            append!(empty!(DEPOT_PATH), package_depots)
            # Julia's own check, as `require` makes it (launcher.jl's check_cache says why not):
            # stale_cachefile is `true` for a stale file, else its dependencies, each the loaded
            # Module or what to check next (a Vector on 1.5-1.9, the first item of a tuple from
            # 1.10 on: base/loading.jl 1.5.3, release-1.10, release-1.12 and master). Only a
            # dependency not loaded yet needs Base.isprecompiled's whole walk (1.10+), whose
            # compiling costs ~0.2 s of a start on 1.10; before 1.10 `require` checks the rest.
            fresh = false
            for f in Base.find_all_in_cache_path(pkg)
                found = Base.stale_cachefile(entry, f)
                found === true && continue
                deps = found isa Tuple ? found[1] : found
                fresh = !isdefined(Base, :isprecompiled) || all(d -> d isa Module, deps) ||
                    Base.isprecompiled(pkg)
                break
            end
            if fresh
                Base.require(pkg)
                Base.root_module(pkg)
            end
        catch
            nothing   # launcher.jl tries again and says what failed
        finally
            append!(empty!(LOAD_PATH), load_path)
            append!(empty!(DEPOT_PATH), depot_path)
        end
    end
    if jk === nothing
        jk = Base.include(@__MODULE__, joinpath(@__DIR__, "launcher.jl"))
    else
        jk.LOADED_FROM[] = "cache"
        # Which package this depot serves, and by its mtime when a kernel last started from it:
        # a compile removes depots whose package is gone or that are unused (see depot.jl,
        # RECORD_NAME). A depot that cannot be written keeps no record; the start goes on.
        try
            write(joinpath(depot, "package-dir"), pkg_dir)
        catch e
            e isa Base.IOError || e isa SystemError || rethrow()
        end
    end
    delete!(ENV, "JUTUL_JKERNEL_DEPOT")
    delete!(ENV, "JUTUL_JKERNEL_PRECOMPILED")
    # `main` is read in the latest world, not this thunk's: from source it was defined after
    # the thunk began, and Julia 1.12+ warns of such a read ("Detected access to binding ... in
    # a world prior to its definition world", src/module.c, release-1.12 and master), an
    # UndefVarError under --depwarn=error. (`jk.main` as invokelatest's argument is read in the
    # current world: the 1.12 docstring of @invokelatest, base/reflection.jl.)
    Base.invokelatest(Base.invokelatest(getproperty, jk, :main))
end)
