# server.jl: start the Julia end of jutul-jkernel, the JKernel package beside this file.
#
#     julia [flags] server.jl <port>          serve one kernel (JKernel.main; see JKernel/src)
#     julia [flags] server.jl --precompile    write JKernel's compile cache, then exit
#
# The compile cache lives in a depot of its own: $JUTUL_JKERNEL_DEPOT, or by default
# ${XDG_CACHE_HOME:-~/.cache}/jutul-jkernel/julia-<crc of this directory> (one per copy of the
# package, so two checkouts do not overwrite each other's cache). That depot is put first in
# DEPOT_PATH only while the package loads or compiles (compilecache writes to DEPOT_PATH[1];
# loading searches every depot), and this directory is on LOAD_PATH only while it loads: the
# user's `using JKernel`, `Pkg.status()` and DEPOT_PATH see none of it afterwards.
#
# A fresh cache is loaded with Base.require. Without one (first start, Julia or the package
# changed: Julia's own staleness check decides), the source is included as a plain module,
# one line in Julia's log says why, and a compile for the next start runs beside this kernel
# (it ends with the kernel's process group if the kernel ends first). A read-only cache
# directory means source every time, also said in one line. Everything here is evaluated in
# an anonymous module, not in Main: a `let` in Main would still resolve every Base function it
# calls (`last`, `split`, `filter`, `run`, ...) as Main's, and a cell's `last = 0` would then
# fail with "cannot assign a value to variable Base.last from module Main". Main gets only
# `JKernel`, as the single-file script used to define. Julia 1.5.3 or newer.

Core.eval(Module(:JKernelLauncher), quote
let script = @__FILE__,
    pkg_dir = joinpath(@__DIR__, "JKernel"),
    entry = joinpath(pkg_dir, "src", "JKernel.jl"),
    pkg = Base.PkgId(Base.UUID("f5fe0b49-b57a-4ee8-9c35-eee7542b45db"), "JKernel"),
    precompiling = ARGS == ["--precompile"]

    say(msg...) = (println(stdout, "jutul-jkernel server: ", msg...); flush(stdout))

    depot = get(ENV, "JUTUL_JKERNEL_DEPOT", "")
    if isempty(depot)
        cache_home = get(ENV, "XDG_CACHE_HOME", "")
        isempty(cache_home) && (cache_home = joinpath(homedir(), ".cache"))
        key = isdefined(Base, :_crc32c) ? Base._crc32c(pkg_dir) : hash(pkg_dir)
        depot = joinpath(cache_home, "jutul-jkernel", "julia-" * string(key; base = 16))
    end

    # Run f with this directory first on LOAD_PATH (and @stdlib for the dependencies, whatever
    # the user's JULIA_LOAD_PATH) and the cache depot first in DEPOT_PATH; restore both.
    function with_package(f)
        load_path, depot_path = copy(LOAD_PATH), copy(DEPOT_PATH)
        try
            prepend!(empty!(LOAD_PATH), [dirname(script), "@stdlib"])
            pushfirst!(DEPOT_PATH, depot)
            return f()
        finally
            append!(empty!(LOAD_PATH), load_path)
            append!(empty!(DEPOT_PATH), depot_path)
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
    # Base.isprecompiled(pkg; sourcepath) on 1.10+ (base/loading.jl, "compat: Julia 1.10";
    # read in JuliaLang/julia at ad0620f) or stale_cachefile(modpath, cachefile) over every
    # cache file on 1.5-1.9 (base/loading.jl of 1.5.3: `true` means stale). Both say why only
    # through @debug, which a SimpleLogger at Debug level catches for the log line. If the
    # check itself fails (an internal API that changed), the source is the safe way.
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
                isdefined(Base, :isprecompiled) ? Base.isprecompiled(pkg; sourcepath = entry) :
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

    if precompiling
        problem = cache_problem()
        if problem === nothing
            println("JKernel's compile cache in ", depot, " is up to date")
            exit(0)
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
        exit(ok ? 0 : 1)
    end

    opted_out = get(ENV, "JUTUL_JKERNEL_PRECOMPILED", "yes") == "no"
    problem = opted_out ? "JUTUL_JKERNEL_PRECOMPILED=no" : cache_problem()
    jk = nothing
    if problem === nothing
        try
            with_package(() -> Base.require(pkg))
            jk = Base.root_module(pkg)
            jk.LOADED_FROM[] = "cache"
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
        else
            say("loading JKernel from source: ", problem, "; compiling it for the next start")
            # Its output goes to Julia's log (stdout here), not to fd 2, which the supervisor
            # reads as the cells' stderr.
            compile = `$(Base.julia_cmd()) --startup-file=no $script --precompile`
            run(pipeline(compile; stdin = devnull, stdout = stdout, stderr = stdout); wait = false)
        end
        Base.include(Main, entry)
        jk = Main.JKernel
    end
    delete!(ENV, "JUTUL_JKERNEL_DEPOT")
    delete!(ENV, "JUTUL_JKERNEL_PRECOMPILED")
    Base.invokelatest(jk.main)
end
end)
