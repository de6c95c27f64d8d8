# launcher.jl: the part of server.jl's start that the common case never needs. server.jl
# includes it (into its anonymous module) when JKernel's compile cache cannot be loaded as it
# is, and for `server.jl --precompile`; its value is the JKernel module to serve with.
#
# It says why the cache was not used (one line in Julia's log), compiles it beside this kernel
# for the next start, and loads the source meanwhile; see server.jl's header for the cache.

# `pkg`, `pkg_dir`, `entry`, `depot` and `precompiling` are the globals server.jl set; depot.jl
# keeps the depot.
Base.include(@__MODULE__, joinpath(@__DIR__, "depot.jl"))

let script = joinpath(@__DIR__, "server.jl"),
    # a compile a kernel starts for its next start leaves the work to one under way
    waits = !("--no-wait" in ARGS),
    # the default depot's siblings are JKernel's depots too; $JUTUL_JKERNEL_DEPOT's are not ours
    default_depot = isempty(get(ENV, "JUTUL_JKERNEL_DEPOT", ""))

    say(msg...) = (println(stdout, "jutul-jkernel server: ", msg...); flush(stdout))

    # Run f with this directory first on LOAD_PATH (and @stdlib for the dependencies, whatever
    # the user's JULIA_LOAD_PATH) and DEPOT_PATH the cache depot and Julia's own (server.jl's
    # package_depots); restore both.
    function with_package(f)
        load_path, depot_path = copy(LOAD_PATH), copy(DEPOT_PATH)
        try
            prepend!(empty!(LOAD_PATH), [dirname(script), "@stdlib"])
            append!(empty!(DEPOT_PATH), package_depots)
            return f()
        finally
            append!(empty!(LOAD_PATH), load_path)
            append!(empty!(DEPOT_PATH), depot_path)
        end
    end

    # Load the source as Base.require loads a package it has no cache for, so that JKernel is a
    # package in Julia's books whichever way it loaded: its `pkgversion` (that of every module in
    # it, Main.IJulia's too, which ProgressMeter compares) and `pathof` are found. Base records
    # where the package came from, then evaluates its file in `Base.__toplevel__` under the
    # package's UUID (base/loading.jl: `_require`, "just load the file normally via include",
    # in release-1.10; `__require_prelocked` in release-1.12 and master, which first calls
    # `set_pkgorigin_version_path(pkg, path)` holding `require_lock`). A module evaluated there
    # is a root module, registered with Base.register_root_module, with its parent's UUID
    # (src/toplevel.c `jl_eval_module_expr` / `jl_begin_new_module`, the same three branches).
    # Julia 1.5-1.8 keep no origins (no set_pkgorigin_version_path) and have no pkgversion.
    function include_as_package()
        if isdefined(Base, :set_pkgorigin_version_path) && isdefined(Base, :require_lock)
            lock(() -> Base.set_pkgorigin_version_path(pkg, entry), Base.require_lock)
        end
        uuid = convert(NTuple{2,UInt64}, pkg.uuid)
        old = ccall(:jl_module_uuid, NTuple{2,UInt64}, (Any,), Base.__toplevel__)
        ccall(:jl_set_module_uuid, Cvoid, (Any, NTuple{2,UInt64}), Base.__toplevel__, uuid)
        try
            Base.include(Base.__toplevel__, entry)
        finally
            ccall(:jl_set_module_uuid, Cvoid, (Any, NTuple{2,UInt64}), Base.__toplevel__, old)
        end
    end

    writable(dir) = try
        mkpath(dir)
        probe = tempname(dir)
        touch(probe)
        rm(probe)
        true
    catch
        false
    end

    # Why the cache cannot be used, or nothing when it can. Julia's own check decides:
    # Base.isprecompiled(pkg) on 1.10+ (base/loading.jl, "compat: Julia 1.10") or
    # stale_cachefile(modpath, cachefile) over every cache file on 1.5-1.9 (base/loading.jl of
    # 1.5.3: `true` means stale). Both say why only through @debug, which a SimpleLogger at
    # Debug level catches for the log line. If the check itself fails (an internal API that
    # changed), the source is the safe way.
    #
    # isprecompiled finds the source as `require` does, through LOAD_PATH (with_package puts
    # this directory first): by default `sourcepath = Base.locate_package(pkg)` in
    # release-1.10 and release-1.12. Master has no `sourcepath` keyword any more
    # (`isprecompiled(pkg::PkgId; ignore_loaded::Bool=false)`, since #60018, a v1.14 item of
    # its NEWS.md), so passing `entry` would be a MethodError there: the source on every start.
    # No require_lock is taken (read in master's base/loading.jl): isprecompiled,
    # find_all_in_cache_path, stale_cachefile and compilecache assert none, and
    # locate_package_load_spec and maybe_root_module take it themselves. Around `require` it
    # would deadlock 1.11/1.12 when the cache needs compiling: `_require_prelocked` unlocks it
    # once to run Precompilation.precompilepkgs, whose @async tasks take it (stale_cachefile's
    # maybe_root_module; base/loading.jl and base/precompilation.jl, release-1.12).
    function cache_problem()
        found = try
            check_cache()
        catch e
            return "checking the cache failed: " * sprint(showerror, e)
        end
        found === nothing && return "no compiled cache for Julia $VERSION in $depot"
        return isempty(found) ? nothing : found
    end

    function check_cache()
        with_package() do
            isempty(Base.find_all_in_cache_path(pkg)) && return nothing
            reasons = IOBuffer()
            logger = Base.CoreLogging.SimpleLogger(reasons, Base.CoreLogging.Debug)
            fresh = Base.CoreLogging.with_logger(logger) do
                isdefined(Base, :isprecompiled) ? Base.isprecompiled(pkg) :
                    any(f -> Base.stale_cachefile(entry, f) !== true,
                        Base.find_all_in_cache_path(pkg))
            end
            fresh && return ""
            lines = filter(l -> occursin("Rejecting", l), split(String(take!(reasons)), '\n'))
            isempty(lines) && return "the cache is stale"
            line = strip(lstrip(last(lines), ['┌', '│', ' ']))
            return startswith(line, "Debug: ") ? line[8:end] : line
        end
    end

    # The compile lock held for the whole of it (see depot.jl): no other compile writes this
    # depot meanwhile, so the temporary files of killed ones can go first.
    function compile_locked()
        held = try
            mkpath(depot)
            try_lock(depot)
        catch e
            println(stderr, "precompiling JKernel failed: cannot lock ", depot, ": ",
                    sprint(showerror, e))
            return false
        end
        if held === nothing
            holder = something(lock_holder(lock_file(depot)), "?")
            if !waits
                println("a compile of JKernel into ", depot, " is already under way (", holder,
                        "); it serves the next start")
                return true
            end
            held = wait_for_lock(depot, (msg...) -> println(msg...))
        end
        try
            removed = remove_temporaries(depot)
            removed > 0 && println("removed ", removed,
                                   " temporary file(s) of an interrupted compile")
            record_package(depot, pkg_dir)
            default_depot && remove_abandoned_siblings(depot, (msg...) -> println(msg...))
            return compile()
        finally
            release(held)
        end
    end

    function compile()
        problem = cache_problem()
        if problem === nothing
            println("JKernel's compile cache in ", depot, " is up to date")
            return true
        end
        println("compiling JKernel into ", depot, ": ", problem)
        ok = with_package() do
            try
                # A path or an Exception on 1.5, a tuple of paths on 1.9+ (base/loading.jl,
                # compilecache); it throws when the compiling julia fails.
                result = Base.compilecache(pkg)
                result isa Exception || return true
                println(stderr, "precompiling JKernel failed: ", result)
                false
            catch e
                println(stderr, "precompiling JKernel failed: ", sprint(showerror, e))
                false
            end
        end
        ok && println("JKernel compiled into ", depot)
        return ok
    end

    precompiling && exit(compile_locked() ? 0 : 1)

    opted_out = get(ENV, "JUTUL_JKERNEL_PRECOMPILED", "yes") == "no"
    problem = opted_out ? "JUTUL_JKERNEL_PRECOMPILED=no" : cache_problem()
    jk = nothing
    if problem === nothing
        try
            with_package(() -> Base.require(pkg))
            jk = Base.root_module(pkg)
            jk.LOADED_FROM[] = "cache"
            note_use(depot, pkg_dir)
        catch e
            problem = "loading the compiled cache failed: " * sprint(showerror, e)
        end
    end
    if jk === nothing
        if opted_out
            say("loading JKernel from source: ", problem)
        elseif !writable(depot)
            say("loading JKernel from source: ", problem, "; the cache directory ", depot,
                " is not writable, so nothing is compiled")
        elseif (holder = lock_holder(lock_file(depot))) !== nothing
            say("loading JKernel from source: ", problem, "; a compile for the next start is ",
                "already under way (", holder, ")")
        else
            say("loading JKernel from source: ", problem, "; compiling it for the next start")
            # Its output goes to Julia's log (stdout here), not to fd 2, which the supervisor
            # reads as the cells' stderr. --no-wait: a kernel that started beside this one may
            # have begun the same compile since the look above; then this one leaves it to that.
            command = `$(Base.julia_cmd()) --startup-file=no $script --precompile --no-wait`
            run(pipeline(command; stdin = devnull, stdout = stdout, stderr = stdout); wait = false)
        end
        try
            with_package(include_as_package)
            jk = Base.root_module(pkg)
        catch e
            # Internals of loading (above) that a future Julia may change must not cost the
            # kernel: the plain module still serves every cell; only `pkgversion` and `pathof`
            # of its modules are then `nothing`. In the latest world: `Main.JKernel` is newer
            # than this thunk (see server.jl's end).
            say("loading JKernel as a package failed (", sprint(showerror, e),
                "); including it as a plain module")
            Base.include(Main, entry)
            jk = Base.invokelatest(getproperty, Main, :JKernel)
        end
    end
    jk   # server.jl calls its main
end
