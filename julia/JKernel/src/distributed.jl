# ---- Distributed workers on other hosts ----
#
# A SIGINT to Julia's process group never reaches Distributed's workers: every cluster manager
# starts them detached, and on other hosts they are out of reach anyway. When a cell is
# interrupted, the remote workers still computing for it get a SIGINT the way Distributed's
# `interrupt` sends one (for SSHManager: `ssh host kill -2 <pid>`); at shutdown every remote
# worker gets one and all are removed with `rmprocs` before Julia exits. Local workers
# (LocalManager) are left as they were. When Julia dies without running its code (SIGKILL),
# lifeline.jl ends the local and SSH workers.
# The server never loads Distributed itself (start-up time), and does nothing without workers.

const DISTRIBUTED_ID = Base.PkgId(Base.UUID("8ba89e20-285c-5b6f-9357-94700520ee1b"), "Distributed")
# A worker that yields answers a ping within milliseconds; one computing in a loop answers
# only when its computation ends. Julia 1.5.3's `interrupt` kills a worker that is idle (10 of
# 10 measured: the SIGINT lands in a task that exits on it), so only the silent ones get one.
const WORKER_PING_WAIT = 1.0
# One ssh per busy worker (0.9-2.3 s here, where the remote login shell is slow); past this the
# cell's result goes out and the interrupts carry on.
const WORKER_INTERRUPT_WAIT = 10.0
# rmprocs at shutdown: the supervisor sends SIGTERM 1 s after it closes the socket
# (supervisor/julia_process.py _EXIT_AFTER_EOF_WAIT). Idle workers are gone in ~0.4 s; busy ones exit once
# the interrupt sent before it reaches them, or when they next look at their master's socket.
const WORKER_RELEASE_WAIT = 0.4

"""The Distributed module if it is loaded, else `nothing` (Julia 1.5's sysimage holds it from
the start; newer Julia loads it when a cell says `using Distributed`)."""
distributed() = get(Base.loaded_modules, DISTRIBUTED_ID, nothing)

"""Whether `pid` is a worker of ours that a cluster manager other than LocalManager started."""
function remote_worker(D::Module, pid::Integer)
    w = get(D.map_pid_wrkr, pid, nothing)
    return w isa D.Worker && isdefined(w, :manager) && !(w.manager isa D.LocalManager)
end

"""
    workers_waited_on(D) -> Vector{Int}

The remote workers that remote calls of this process still wait for. Distributed keeps, for
each `remotecall_fetch` / `remotecall_wait` in flight, a `RemoteValue` in `PGRP.refs` whose
`waitingfor` is the worker's id and whose channel is still empty (remotecall.jl,
`remotecall_fetch`; the same in Julia 1.5.3's stdlib/v1.5/Distributed/src and in
JuliaLang/Distributed.jl 6e9c901, 2026). A call the interrupt abandoned leaves its entry there
until the worker answers. `pmap` and `fetch` of a Future go through these calls.
"""
function workers_waited_on(D::Module)
    all(s -> isdefined(D, s), (:PGRP, :client_refs, :map_pid_wrkr, :Worker, :LocalManager)) ||
        return Int[]
    pids = Int[]
    lock(D.client_refs) do   # the lock that guards PGRP.refs (remotecall.jl)
        for rv in values(D.PGRP.refs)
            (isdefined(rv, :waitingfor) && isdefined(rv, :c)) || continue
            pid = rv.waitingfor
            pid > 1 && !(pid in pids) && isopen(rv.c) && !isready(rv.c) &&
                remote_worker(D, pid) && push!(pids, pid)
        end
    end
    return pids
end

"""Whether any worker was started by a cluster manager other than LocalManager."""
function has_remote_workers(D::Module)
    for pid in D.workers()
        remote_worker(D, pid) && return true
    end
    return false
end

"""
    interrupt_remote_workers()

After a cell was interrupted: interrupt the remote workers it left computing, so that they stop
and the next cell finds them free. Bounded; never throws.
"""
function interrupt_remote_workers()
    D = distributed()
    (D === nothing || !isdefined(D, :interrupt) || D.myid() != 1 || D.nprocs() < 2) && return
    try
        has_remote_workers(D) || return
        pids = workers_waited_on(D)
        isempty(pids) && return
        pings = [@async(D.remotecall_fetch(D.myid, pid)) for pid in pids]
        deadline = time() + WORKER_PING_WAIT
        while time() < deadline && !all(istaskdone, pings)
            sleep(0.02)
        end
        busy = [pid for (pid, t) in zip(pids, pings) if !istaskdone(t)]
        isempty(busy) && return
        println(stderr, "jutul-jkernel: interrupting remote workers ", join(busy, ", "),
                ", still computing for this cell")
        sent = [interrupt_worker(D, pid) for pid in busy]
        deadline = time() + WORKER_INTERRUPT_WAIT
        while time() < deadline && !all(finished, sent)
            sleep(0.02)
        end
        for (pid, p) in zip(busy, sent)
            p isa Base.Process && finished(p) && !success(p) &&
                println(stderr, "jutul-jkernel: could not interrupt worker ", pid, ": ", p.cmd)
        end
    catch e
        # A second interrupt while we wait ends the wait: the user has asked twice.
        e isa InterruptException ||
            diag("interrupting remote workers failed: ", sprint(showerror, e))
    end
    nothing
end

"""The index of the last byte of the last occurrence of `pattern` in `data`, or 0."""
function end_of_last(pattern::Vector{UInt8}, data::Vector{UInt8})
    m = length(pattern)
    for stop in length(data):-1:m
        view(data, stop-m+1:stop) == pattern && return stop
    end
    return 0
end

"""
    drop_torn_sends()

Drop what an interrupt left of a message to a worker, so that the worker's next call is
answered. Distributed writes a message (header, body, MSG_BOUNDARY) into the worker stream's
write buffer and flushes it at the end, holding the stream's lock throughout, and its `finally`
only unlocks (`send_msg_`, JuliaLang/Distributed.jl src/messages.jl; the same in Julia 1.5.3's
stdlib). A SIGINT lands in whichever task runs: in a pmap feeder serializing its call (often
while compiling the serializer, which is when Julia misses the INT frame), it leaves the
message's first part in the buffer. The next message goes out behind it, the worker fails to
read that, skips to the next boundary, and so swallows the next message: its call is never
answered (tests/test_distributed.py hung on it). With the lock held here no send is under way, and
whatever follows the buffer's last MSG_BOUNDARY is such a fragment; complete messages stay.
A message longer than the buffer (64 KiB) may have had a part flushed already: the worker then
still loses one message. Never throws.
"""
function drop_torn_sends()
    D = distributed()
    (D === nothing || !all(s -> isdefined(D, s), (:PGRP, :Worker, :MSG_BOUNDARY))) && return
    try
        for w in D.PGRP.workers
            (w isa D.Worker && isdefined(w, :w_stream)) || continue
            io = w.w_stream
            io isa Base.LibuvStream || continue   # TCPSocket for LocalManager and SSHManager
            buf = io.sendbuf
            (buf isa IOBuffer && bytesavailable(buf) > 0) || continue
            trylock(io.lock) || continue   # a send under way (it may wait in a flush)
            dropped = 0
            try
                Base.iolock_begin()
                data = take!(buf)
                keep = end_of_last(D.MSG_BOUNDARY, data)
                write(buf, view(data, 1:keep))
                Base.iolock_end()
                dropped = length(data) - keep
            finally
                unlock(io.lock)
            end
            dropped > 0 && println(stderr, "jutul-jkernel: the interrupt cut a message to ",
                "worker ", w.id, " short; dropped its first ", dropped, " bytes, so that the ",
                "worker's next call is answered")
        end
    catch e
        e isa InterruptException || diag("checking the workers' streams failed: ",
                                         sprint(showerror, e))
    end
    nothing
end

"""
    release_workers()

Before Julia exits: ask every remote worker to stop what it computes, then `rmprocs` all
workers with a short bound. Runs from the exit paths here and, once there are workers, as an
`atexit` hook ahead of Distributed's own (which waits 5 s per attempt), so a SIGTERM, on which
Julia runs its atexit hooks, still sends the interrupts that did not go out yet. Never throws.
"""
function release_workers()
    D = distributed()
    (D === nothing || !isdefined(D, :rmprocs) || D.myid() != 1 || D.nprocs() < 2) && return
    again = RELEASING[]
    RELEASING[] = true
    try
        deadline = time() + WORKER_RELEASE_WAIT
        for pid in D.workers()
            pid in INTERRUPTED_AT_EXIT && continue
            push!(INTERRUPTED_AT_EXIT, pid)
            interrupt_worker(D, pid)
        end
        again && return
        t = @async D.rmprocs(D.workers(); waitfor = WORKER_RELEASE_WAIT)
        while time() < deadline && !istaskdone(t)
            sleep(0.02)
        end
    catch e
        e isa InterruptException || diag("removing workers failed: ", sprint(showerror, e))
    end
    nothing
end

"""
    interrupt_worker(D, pid) -> Process, Task or nothing

Send remote worker `pid` a SIGINT, as Distributed's `interrupt(pid)` does, and return what to
wait for. For SSHManager workers this runs the command of Distributed's
`manage(::SSHManager, id, config, :interrupt)` (managers.jl, the same in Julia 1.5.3 and in
JuliaLang/Distributed.jl 6e9c901), but detached: Distributed runs that ssh in Julia's process
group, and jupyter_client interrupts just before a shutdown or restart, so the supervisor's
signals to that group at shutdown killed the ssh before it reached the host. Other cluster
managers get Distributed's `interrupt`.
"""
function interrupt_worker(D::Module, pid::Int)
    remote_worker(D, pid) || return nothing
    w = D.map_pid_wrkr[pid]
    c = w.config
    if isdefined(D, :SSHManager) && w.manager isa D.SSHManager && c.ospid isa Integer &&
            c.host isa AbstractString && c.sshflags isa Cmd
        return spawn_detached(ssh_interrupt_cmd(c.sshflags, String(c.host), Int(c.ospid)))
    end
    return @async D.interrupt(pid)
end

ssh_interrupt_cmd(sshflags::Cmd, host::String, ospid::Int) =
    `ssh -T -a -x -o ClearAllForwardings=yes -n $sshflags $host "kill -2 $ospid"`

"""Start `cmd` in a session of its own: signals to Julia's process group do not reach it."""
spawn_detached(cmd::Cmd) =
    run(pipeline(detach(cmd); stdin = devnull, stdout = devnull, stderr = devnull); wait = false)

finished(x) = x isa Task ? istaskdone(x) : x isa Base.Process ? !process_running(x) : true

"""
    compile_worker_handling()

After each cell: once there are Distributed workers, compile what interrupts and releases them,
and register `release_workers` with `atexit`.
Compiled at the moment of need, Julia was still compiling when the supervisor ended it (0.5 s
after closing the socket, on a loaded machine) and no interrupt went out.
"""
function compile_worker_handling()
    WORKER_HANDLING_COMPILED[] && return
    D = distributed()
    (D === nothing || !isdefined(D, :nprocs) || D.nprocs() < 2) && return
    WORKER_HANDLING_COMPILED[] = true
    try
        atexit(release_workers)   # after Distributed's addprocs registered its hook: runs first
        precompile(release_workers, ())
        precompile(interrupt_worker, (Module, Int))
        precompile(remote_worker, (Module, Int))
        precompile(ssh_interrupt_cmd, (Cmd, String, Int))
        wait(spawn_detached(`true`))   # compiles the spawn path all the way down
        precompile(interrupt_remote_workers, ())
        precompile(drop_torn_sends, ())
        precompile(workers_waited_on, (Module,))
        precompile(has_remote_workers, (Module,))
        has_remote_workers(D) && workers_waited_on(D)   # read-only: warms the dynamic calls
    catch e
        # the cell is over: a late interrupt has nothing left to stop (forward_interrupt)
        e isa InterruptException ||
            diag("compiling worker handling failed: ", sprint(showerror, e))
    end
    nothing
end
