# ---- SSH workers end with their master, however it dies (issue 21) ----
#
# Why they did not. With the tests' sshd, a Julia SIGKILLed while its two SSH workers computed
# left the workers, their `sh -l -c`, their sshd session and the local ssh client running for
# good (idle workers went within seconds). Three things hold them up, none of which needs Julia
# code at its death:
# * Distributed starts the ssh client detached (`open(detach(cmd), "r+")` in managers.jl
#   `launch_on_machine`: Julia 1.5.3's stdlib, and JuliaLang/Distributed.jl release-1.10 7b11d15,
#   release-julia-1.11 e9b9023 and master 6e9c901), so the SIGKILL of Julia's process group
#   misses it. Its stdin, through which the cookie went, was at EOF long before (sshd no longer
#   held the write end of the worker's stdin pipe), so the master's death tells it nothing; it
#   waits for the remote command like any ssh.
# * A worker's only tie to its master is their TCP connection. On its EOF Distributed's
#   `message_handler_loop` exits the worker (process_messages.jl: `wpid == 1` -> `exit(1)`, the
#   same in all four), but that loop is a task, and a worker computing without yielding
#   never runs it again. (Newer Distributed can also miss the exit in its error path:
#   JuliaLang/Distributed.jl PR #198, open.)
# * sshd does not signal a command that has no tty when its client goes (SIGHUP comes only
#   through a pty), so even a dead ssh client would leave the worker computing.
#
# The lifeline. Once there are SSH workers, one ssh per host and sshflags runs a POSIX sh loop
# there (LIFELINE_SCRIPT) whose stdin is a pipe that only this process writes to; after each
# cell we send it `+ospid` / `-ospid` lines as workers come and go. When this process ends, by
# any means, the kernel closes the pipe: ssh reads EOF and passes it on, the loop's `read`
# returns, and it sends the workers it holds SIGTERM, then SIGKILL to those still running after
# LIFELINE_GRACE seconds (Distributed's `kill(::LocalManager, ...)` escalates the same way on
# JuliaLang/Distributed.jl release-1.10, managers.jl; master sends SIGQUIT first, for a core
# dump we do not want on the user's host). If the ssh client dies instead, sshd closes the
# loop's stdin just the same. Julia answers SIGTERM at once even in a loop that never allocates
# (checked on 1.5.3); SIGKILL covers one that SIGTERM does not end (the test stops one). The
# remote host needs nothing beyond the `sh` that SSHManager's own start command uses. Like
# Distributed's own interrupt (`ssh host "kill -2 $ospid"`), the loop names workers by OS pid.
# The ssh is detached, as Distributed's: the supervisor SIGINTs Julia's process group to
# interrupt a cell, and an ssh that died of that would end the workers at every interrupt.
# Not covered: workers added and put to work in one cell, until that cell ends (the lifeline
# starts after it: the server starts no short-lived tasks, see eval.jl), and hosts whose
# login shell cannot run `sh -c '...'` (SSHManager's `shell = :wincmd`).

"""The loop's seconds between SIGTERM and SIGKILL (the sh `sleep 1` steps)."""
const LIFELINE_GRACE = 5
# One line, no `!` and no single quote: it goes through the user's login shell (sh or csh)
# inside single quotes. `p` holds the pids; EOF ends the read loop.
const LIFELINE_SCRIPT = string(
    raw"p=; while read -r l; do case $l in ",
    raw"+*) p=\"$p ${l#+}\";; ",
    raw"-*) q=; for x in $p; do [ \"$x\" = \"${l#-}\" ] || q=\"$q $x\"; done; p=$q;; ",
    raw"esac; done; [ -z \"$p\" ] && exit 0; kill -15 $p 2>/dev/null; i=0; ",
    raw"while [ $i -lt ", LIFELINE_GRACE, raw" ]; do a=; ",
    raw"for x in $p; do kill -0 $x 2>/dev/null && a=\"$a $x\"; done; p=$a; ",
    raw"[ -z \"$p\" ] && exit 0; sleep 1; i=$((i+1)); done; kill -9 $p 2>/dev/null")

mutable struct Lifeline
    proc::Base.Process     # the detached ssh; only this process holds its stdin's write end
    host::String
    ospids::Set{Int}       # the workers on that host the loop will end
end
const LIFELINES = Dict{Tuple{String,String},Lifeline}()   # (host, string(sshflags)) => line

lifeline_cmd(sshflags::Cmd, host::String) =
    `ssh -T -a -x -o ClearAllForwardings=yes $sshflags $host $("sh -c '" * LIFELINE_SCRIPT * "'")`

"""
    ssh_workers(D) -> Dict{Tuple{String,String}, Tuple{Cmd, Set{Int}}}

The OS pids of this process's SSHManager workers, by host and sshflags (the workers a host's
first one started for `("host", n)` carry its host and flags: cluster.jl
`launch_n_additional_processes`).
"""
function ssh_workers(D::Module)
    found = Dict{Tuple{String,String},Tuple{Cmd,Set{Int}}}()
    isdefined(D, :SSHManager) || return found
    for pid in D.workers()
        remote_worker(D, pid) || continue
        w = D.map_pid_wrkr[pid]
        w.manager isa D.SSHManager || continue
        c = w.config
        (c.ospid isa Integer && c.host isa AbstractString && c.sshflags isa Cmd) || continue
        key = (String(c.host), string(c.sshflags))
        push!(get!(() -> (c.sshflags, Set{Int}()), found, key)[2], Int(c.ospid))
    end
    return found
end

"""Start the lifeline ssh to `host`; its stdout and stderr go nowhere, its stdin is ours."""
start_lifeline(sshflags::Cmd, host::String) =
    Lifeline(open(pipeline(detach(lifeline_cmd(sshflags, host)); stderr = devnull), "w", devnull),
             host, Set{Int}())

"""Send the loop `lines` in one write, with SIGINT deferred so no line is torn."""
tell(l::Lifeline, lines::String) = disable_sigint(() -> (write(l.proc, lines); flush(l.proc)))

"""
    update_lifelines()

After each cell: tie every SSH worker to this process's life (see the header), and forget the
workers that are gone. Never throws.
"""
function update_lifelines()
    D = distributed()
    (D === nothing || !isdefined(D, :workers) || D.myid() != 1) && return
    (D.nprocs() < 2 && isempty(LIFELINES)) && return
    try
        wanted = ssh_workers(D)
        for (key, l) in collect(LIFELINES)
            if !process_running(l.proc)
                # its loop has had EOF: it ended (or killed) the workers it held
                diag("the lifeline ssh to ", l.host, " has ended")
                delete!(LIFELINES, key)
            end
        end
        for (key, l) in LIFELINES
            haskey(wanted, key) && continue
            isempty(l.ospids) || tell(l, join(("-$p\n" for p in l.ospids)))
            empty!(l.ospids)
        end
        for (key, (sshflags, ospids)) in wanted
            l = get!(() -> start_lifeline(sshflags, key[1]), LIFELINES, key)
            lines = string(join(("+$p\n" for p in setdiff(ospids, l.ospids))),
                           join(("-$p\n" for p in setdiff(l.ospids, ospids))))
            isempty(lines) || tell(l, lines)
            l.ospids = ospids
        end
    catch e
        e isa InterruptException || diag("tying workers to this process failed: ",
                                         sprint(showerror, e))
    end
    nothing
end
