# depot.jl: the upkeep of JKernel's compile-cache depot (see server.jl's header). launcher.jl
# includes it into the same anonymous module. It keeps three promises:
#
# - One compile at a time per depot: `server.jl --precompile` holds DEPOT/compile.lock while it
#   works, and a kernel that finds the lock held loads the source without starting another.
# - No leftovers of a killed compile: Base.compilecache writes into mktemp files beside the
#   cache (`jl_XXXXXX` in compiled/vX.Y/JKernel, base/file.jl `temp_prefix`) and renames them
#   at the end; a kill leaves them. On 1.10+ the one for the package image (`tmppath_so`) exists
#   for the whole compile: create_expr_cache removes only `output` and `output_o` before the
#   worker starts (JuliaLang/julia base/loading.jl `compilecache` and `create_expr_cache`,
#   release-1.10, release-1.12 and master; 1.5.3 makes only `tmppath` and removes it too).
#   Whoever holds the lock removes them first: no other compile can be writing them.
# - No depots of installs that are gone: each depot records the package directory it serves
#   (DEPOT/package-dir, rewritten at every start from the cache, so its mtime is the last use),
#   and a compile in a default depot removes its `julia-*` siblings whose package directory is
#   gone or that no kernel used for UNUSED_DAYS. Never one whose lock is held, never through a
#   symlink.
#
# The lock file is FileWatching.Pidfile's ("<pid> <hostname>", created with O_EXCL, its mtime
# refreshed while held; stdlib/FileWatching/src/pidfile.jl, release-1.10, release-1.12 and
# master), so either reads the other's. Pidfile itself is not called: it has no 1.5-1.9 form
# (trymkpidlock: "compat: Julia 1.10"; FileWatching on 1.5.3 has no Pidfile), and one
# implementation everywhere is the one the tests run. Unlike Pidfile, a lock of this host
# whose pid is gone is stale at once: a compile killed with its kernel blocks nothing.

const LOCK_NAME = "compile.lock"
const RECORD_NAME = "package-dir"
# The holder refreshes the lock's mtime this often; a lock not refreshed for LOCK_STALE is
# stale whatever its pid says (a holder on another host, a pid reused, a hung holder).
const LOCK_REFRESH = 10.0
const LOCK_STALE = 60.0
# A waiting `--precompile` looks at the lock this often.
const LOCK_POLL = 1.0
# A depot no kernel started from for this long is removed; one whose package directory is gone,
# once it has been unused for GONE_GRACE (a reinstall in progress, a kernel starting from it).
const UNUSED_DAYS = 30
const GONE_GRACE = 3600.0
# Base.cache_file_entry: compiled/vX.Y/<name> (base/loading.jl, release-1.10, release-1.12,
# master); mktemp names its files temp_prefix * "XXXXXX" (base/file.jl, the same branches).
const TEMP_PREFIX = "jl_"
const DEPOT_NAME = r"^julia-[0-9a-f]+$"

lock_file(dir) = joinpath(dir, LOCK_NAME)

# A file that vanished or cannot be read between our look and our use.
io_failure(e) = e isa Base.IOError || e isa SystemError

"""
    pid_alive(pid)

Whether `pid` names a live process of this host: kill(pid, 0) without a signal, as Pidfile's
isvalidpid (`ccall(:uv_kill, ...) != UV_ESRCH`; EPERM means alive). A zombie is dead too: a
compile killed with its kernel is orphaned, and init reaps it when it gets round to it (seconds
under a container's init, seen here); Linux shows the state after the command's closing
parenthesis in /proc/<pid>/stat (proc(5)).
"""
function pid_alive(pid)
    pid > 0 || return false
    ccall(:uv_kill, Cint, (Cint, Cint), pid, 0) == Base.UV_ESRCH && return false
    Sys.islinux() || return true
    stat = try
        read("/proc/$pid/stat", String)
    catch e
        io_failure(e) || rethrow()
        return false   # gone since the kill
    end
    close_paren = findlast(')', stat)
    close_paren === nothing && return true
    state = lstrip(stat[close_paren+1:end])   # Z: zombie, X: dead
    return !(startswith(state, "Z") || startswith(state, "X"))
end

"""
    lock_holder(path)

`"<pid> <host>"` of the live holder of the lock at `path`, or nothing when it is free or stale.
"""
function lock_holder(path)
    st = lstat(path)
    ispath(st) || return nothing
    text = try
        read(path, String)
    catch e
        io_failure(e) || rethrow()
        return nothing
    end
    fields = split(text, ' '; limit = 2)
    pid = tryparse(Int32, fields[1])
    host = length(fields) == 2 ? fields[2] : ""
    time() - st.mtime > LOCK_STALE && return nothing
    # Empty or unparsable: a holder between its O_EXCL create and its write; live until stale.
    pid !== nothing && host == gethostname() && !pid_alive(pid) && return nothing
    return isempty(text) ? "a process" : text
end

# The lock we hold: its open file (for the refresh), the Timer refreshing it, what we wrote.
struct DepotLock
    path::String
    file::Base.Filesystem.File
    refresh::Timer
    stamp::String
end

"""
    try_lock(dir)

Take `dir`'s compile lock: a DepotLock, or nothing when a live holder has it. A stale lock is
removed and taken (as Pidfile's `tryrmopenfile`; two takers of one stale lock can both win,
which costs a second compile, never a wrong cache: compilecache renames its result into place).
"""
function try_lock(dir)
    path = lock_file(dir)
    for attempt in 1:2
        file = try
            # Base.Filesystem.open(path, flags, mode) and its JL_O_* flags: base/filesystem.jl,
            # release-1.10, release-1.12, master (the call Pidfile's tryopen_exclusive makes).
            Base.Filesystem.open(path, Base.Filesystem.JL_O_WRONLY | Base.Filesystem.JL_O_CREAT |
                                       Base.Filesystem.JL_O_EXCL, 0o644)
        catch e
            (e isa Base.IOError && e.code == Base.UV_EEXIST) || rethrow()
            nothing
        end
        if file !== nothing
            stamp = string(getpid(), ' ', gethostname())
            write(file, stamp)
            # futime(::File, atime, mtime): base/filesystem.jl, 1.5.3 to master (touch(::File)
            # is 1.6+). A Timer runs while compilecache waits for its worker (`success(p)`).
            refresh = Timer(_ -> (t = time(); Base.Filesystem.futime(file, t, t)), LOCK_REFRESH;
                            interval = LOCK_REFRESH)
            return DepotLock(path, file, refresh, stamp)
        end
        lock_holder(path) === nothing || return nothing
        attempt == 1 && rm(path; force = true)
    end
    return nothing
end

"""
    release(lock)

Stop refreshing the lock and remove it, unless another process took it over meanwhile.
"""
function release(lock::DepotLock)
    close(lock.refresh)
    close(lock.file)   # first: Windows removes no file that is open
    ours = try
        read(lock.path, String) == lock.stamp
    catch e
        io_failure(e) || rethrow()
        false
    end
    ours && rm(lock.path; force = true)
    return nothing
end

"""
    wait_for_lock(dir, say)

Take `dir`'s compile lock, waiting while a live holder has it (it turns stale within
LOCK_STALE of its holder's end). The caller bounds the whole (the installer's timeout).
"""
function wait_for_lock(dir, say)
    said = false
    while true
        held = try_lock(dir)
        held === nothing || return held
        if !said
            holder = lock_holder(lock_file(dir))
            say("waiting for the compile under way in ", dir, " (", something(holder, "?"), ")")
            said = true
        end
        sleep(LOCK_POLL)
    end
end

"""
    remove_temporaries(dir)

Remove the temporary files of killed compiles from `dir`'s JKernel caches; the number removed.
Call it holding the lock.
"""
function remove_temporaries(dir)
    compiled = joinpath(dir, "compiled")
    (islink(compiled) || !isdir(compiled)) && return 0
    removed = 0
    for version in readdir(compiled)
        cache = joinpath(compiled, version, "JKernel")
        (islink(cache) || !isdir(cache)) && continue
        for name in readdir(cache)
            startswith(name, TEMP_PREFIX) || continue
            rm(joinpath(cache, name); force = true)
            removed += 1
        end
    end
    return removed
end

"""
    record_package(dir, package)

Write which package directory `dir` serves; its mtime says when it was last used.
"""
record_package(dir, package) = write(joinpath(dir, RECORD_NAME), package)

"""
    note_use(dir, package)

Record that a kernel started from `dir`'s cache (server.jl does the same inline); a depot that
cannot be written keeps no record.
"""
function note_use(dir, package)
    try
        record_package(dir, package)
    catch e
        io_failure(e) || rethrow()
    end
    return nothing
end

"""
    abandoned(dir)

Why the depot `dir` can go, or nothing while it may still be in use.
"""
function abandoned(dir)
    lock_holder(lock_file(dir)) === nothing || return nothing
    record = joinpath(dir, RECORD_NAME)
    st = lstat(record)   # a symlinked record counts as none, and is not followed
    recorded = isfile(st) ? strip(read(record, String)) : ""
    age = time() - (isfile(st) ? st.mtime : lstat(dir).mtime)
    days = floor(Int, age / 86400)
    days >= UNUSED_DAYS && return "no kernel started from it for $days days"
    if !isempty(recorded) && !isdir(recorded) && age > GONE_GRACE
        return "its package directory $recorded is gone"
    end
    return nothing
end

"""
    remove_abandoned_siblings(depot, say)

Remove the `julia-*` depots beside `depot` (a default one, in the directory of JKernel's
depots) that `abandoned` lets go. A symlink is never followed, nor removed.
"""
function remove_abandoned_siblings(depot, say)
    parent = dirname(depot)
    names = try
        readdir(parent)
    catch e
        io_failure(e) || rethrow()
        return
    end
    for name in names
        (occursin(DEPOT_NAME, name) && name != basename(depot)) || continue
        dir = joinpath(parent, name)
        (islink(dir) || !isdir(dir)) && continue
        try
            why = abandoned(dir)
            why === nothing && continue
            # rm(; recursive) unlinks a symlink inside instead of following it (base/file.jl
            # `rm`: `islink(path) || !isdir(path)`, release-1.10, release-1.12, master).
            rm(dir; recursive = true)
            say("removed the compile cache ", dir, ": ", why)
        catch e
            io_failure(e) || rethrow()
            say("could not remove the compile cache ", dir, ": ", sprint(showerror, e))
        end
    end
end
