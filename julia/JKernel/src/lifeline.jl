# ---- Workers end with their master, however it dies ----
#
# Why they did not. A Julia SIGKILLed while its workers computed left them running for good,
# SSH workers (with their `sh -l -c`, their sshd session and the local ssh client) and local
# ones alike (idle workers went within seconds). What holds them up needs no Julia code at its
# death:
# * Distributed starts every worker detached: `open(detach(cmd), "r+")` in managers.jl, for
#   the ssh client in `launch_on_machine` and for `julia --worker` itself in
#   `launch(::LocalManager, ...)` (Julia 1.5.3's stdlib, and JuliaLang/Distributed.jl
#   release-1.10 7b11d15, release-julia-1.11 e9b9023 and master 6e9c901), so the SIGKILL of
#   Julia's process group misses them. The ssh client's stdin, through which the cookie went,
#   was at EOF long before (sshd no longer held the write end of the worker's stdin pipe), so
#   the master's death tells it nothing; it waits for the remote command like any ssh.
# * A worker's only tie to its master is their TCP connection. On its EOF Distributed's
#   `message_handler_loop` exits the worker (process_messages.jl: `wpid == 1` -> `exit(1)`, the
#   same in all four), but that loop is a task, and a worker computing without yielding
#   never runs it again. (Newer Distributed can also miss the exit in its error path:
#   JuliaLang/Distributed.jl PR #198, open.)
# * sshd does not signal a command that has no tty when its client goes (SIGHUP comes only
#   through a pty), so even a dead ssh client would leave the worker computing.
#
# The lifeline. Once there are workers, a POSIX sh loop (LIFELINE_SCRIPT) runs for each place
# they run: one `ssh host sh -c LOOP` per host and sshflags, and one `sh -c LOOP` on this
# machine for LocalManager's workers. Its stdin is a pipe that only this process writes to;
# after each cell we send it `+ospid` / `-ospid` lines as workers come and go. When this
# process ends, by any means, the kernel closes the pipe (ssh reads EOF and passes it on), the
# loop's `read` returns, and it sends the workers it holds SIGTERM, then SIGKILL to those still
# running after LIFELINE_GRACE seconds (Distributed's `kill(::LocalManager, ...)` escalates the
# same way on JuliaLang/Distributed.jl release-1.10, managers.jl; master sends SIGQUIT first,
# for a core dump we do not want on the user's host). If an ssh client dies instead, sshd
# closes the loop's stdin just the same. Julia answers SIGTERM at once even in a loop that
# never allocates (checked on 1.5.3); SIGKILL covers one that SIGTERM does not end (the tests
# stop one). A host needs nothing beyond the `sh` that SSHManager's own start command uses.
# Like Distributed's own interrupt (`ssh host "kill -2 $ospid"`), the loop names workers by OS
# pid. The ssh and the sh are detached, as Distributed's workers: the supervisor SIGINTs
# Julia's process group to interrupt a cell, and a loop that died of that would end the
# workers at every interrupt. At an ordinary exit release_workers and Distributed's exit hook
# have mostly ended the workers already; the loop's signals reach only those still running.
# Not covered: workers added and put to work in one cell, until that cell ends (the lifeline
# starts after it: the server starts no short-lived tasks, see eval.jl), hosts whose login
# shell cannot run `sh -c '...'` (SSHManager's `shell = :wincmd`), local workers on Windows
# (no POSIX sh: see local_lifeline_possible), and workers of other cluster managers.

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

# LIFELINES (state.jl) holds a Lifeline per place: an ssh host's under (host, string(sshflags)),
# this machine's under LOCAL_KEY. No ssh host is named "": SSHManager's `("host", n)` /
# "user@host:port" forms all name one.
const LOCAL_KEY = ("", "")

lifeline_cmd(sshflags::Cmd, host::String) =
    `ssh -T -a -x -o ClearAllForwardings=yes $sshflags $host $("sh -c '" * LIFELINE_SCRIPT * "'")`
local_lifeline_cmd() = `sh -c $LIFELINE_SCRIPT`

"""
Whether this machine's workers can have a lifeline: the loop needs a POSIX `sh` whose `kill`
takes the workers' OS pids. On Windows there is none (the `sh` of MSYS or Cygwin, if on PATH,
names processes by pids of its own), so there the lifeline is not started and local workers end
as Distributed ends them: when Julia runs its exit hooks, or when an idle worker sees its
master go.
"""
function local_lifeline_possible()
    LOCAL_LIFELINE_POSSIBLE[] === nothing &&
        (LOCAL_LIFELINE_POSSIBLE[] = !Sys.iswindows() && Sys.which("sh") !== nothing)
    return LOCAL_LIFELINE_POSSIBLE[]::Bool
end

"""
    workers_to_tie(D) -> Dict{Tuple{String,String}, Tuple{Cmd, Set{Int}}}

The OS pids of this process's workers that a lifeline ends, with the command of that lifeline:
SSHManager workers by host and sshflags (the workers a host's first one started for
`("host", n)` carry its host and flags: cluster.jl `launch_n_additional_processes`), and
LocalManager workers under LOCAL_KEY. `config.ospid` is the pid each worker reports when it
joins (process_messages.jl `handle_msg(::JoinCompleteMsg, ...)`: `w.config.ospid = msg.ospid`,
sent as `getpid()`; the same in Julia 1.5.3's stdlib and JuliaLang/Distributed.jl release-1.10
7b11d15, release-julia-1.11 e9b9023 and master 6e9c901). For a local worker it is the pid of the
`julia --worker` that `launch(::LocalManager, ...)` opened (managers.jl, also kept as
`config.process`), so it needs no manager-specific field.
"""
function workers_to_tie(D::Module)
    found = Dict{Tuple{String,String},Tuple{Cmd,Set{Int}}}()
    has_ssh = isdefined(D, :SSHManager)
    for pid in D.workers()
        w = get(D.map_pid_wrkr, pid, nothing)
        (w isa D.Worker && isdefined(w, :manager)) || continue
        c = w.config
        c.ospid isa Integer || continue
        if w.manager isa D.LocalManager
            local_lifeline_possible() || continue
            push!(get!(() -> (local_lifeline_cmd(), Set{Int}()), found, LOCAL_KEY)[2],
                  Int(c.ospid))
        elseif has_ssh && w.manager isa D.SSHManager && c.host isa AbstractString &&
                c.sshflags isa Cmd
            key = (String(c.host), string(c.sshflags))
            push!(get!(() -> (lifeline_cmd(c.sshflags, String(c.host)), Set{Int}()), found,
                       key)[2], Int(c.ospid))
        end
    end
    return found
end

"""Start the lifeline `cmd`, detached (see the header); its stdout and stderr go nowhere, its
stdin is ours."""
start_lifeline(cmd::Cmd, host::String) =
    Lifeline(open(pipeline(detach(cmd); stderr = devnull), "w", devnull), host, Set{Int}())

"""Send the loop `lines` in one write, with SIGINT deferred so no line is torn."""
tell(l::Lifeline, lines::String) = disable_sigint(() -> (write(l.proc, lines); flush(l.proc)))

"""
    update_lifelines()

After each cell: tie every local and SSH worker to this process's life (see the header), and
forget the workers that are gone. Never throws.
"""
function update_lifelines()
    D = distributed()
    (D === nothing || !isdefined(D, :workers) || D.myid() != 1) && return
    (D.nprocs() < 2 && isempty(LIFELINES)) && return
    try
        wanted = workers_to_tie(D)
        for (key, l) in collect(LIFELINES)
            if !process_running(l.proc)
                # its loop has had EOF: it ended (or killed) the workers it held
                diag("the lifeline to ", l.host, " has ended")
                delete!(LIFELINES, key)
            end
        end
        for (key, l) in LIFELINES
            haskey(wanted, key) && continue
            isempty(l.ospids) || tell(l, join(("-$p\n" for p in l.ospids)))
            empty!(l.ospids)
        end
        for (key, (cmd, ospids)) in wanted
            l = get!(() -> start_lifeline(cmd, key == LOCAL_KEY ? "this machine" : key[1]),
                     LIFELINES, key)
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
