"""Find and stop the processes a cell started and left running; know nothing of Julia's protocol.

Julia runs as the leader of its own process group (the supervisor starts it with
``start_new_session``). A process a cell starts (``run(`...`; wait=false)``, a pipeline, Pkg's
precompile workers) is a descendant of Julia in that group. Distributed's workers are
descendants too, but every cluster manager starts them with ``detach``, in a session of their
own (JuliaLang/Distributed.jl master src/managers.jl, ``open(detach(...), "r+")``; the same in
JuliaLang/julia release-1.10 stdlib/Distributed/src/managers.jl), and so are the server's own
helpers (distributed.jl, ``spawn_detached``). So "what the cell started" is: a descendant of
Julia, in Julia's group, that was not there when the cell began. A process that the cell itself
detached is left alone: it asked to outlive the cell.
"""

from __future__ import annotations

import os
import time

import psutil

# A process asked to terminate gets this long before SIGKILL. Julia's precompile workers and
# shells exit within milliseconds of SIGTERM; one that handles it (cleanup) gets some room.
_TERM_WAIT = 1.0
_KILL_WAIT = 1.0

# A thread's children file: pids and spaces, ~8 bytes a child.
_CHILDREN_READ = 1 << 16

Snapshot = frozenset[psutil.Process]  # psutil compares pid and start time: reuse-safe


def _child_pids(pid: int) -> list[int] | None:
    """Direct children of ``pid`` from /proc/<pid>/task/*/children (Linux), else None.

    Reading the few files of one process takes a fraction of a millisecond, where psutil's
    ``children()`` reads every process's stat (0.14 ms against 1.4 ms here): this runs before
    every cell. Plain os calls on string paths, not pathlib: with pathlib's exists() and
    read_text() one walk of Julia's three threads took 0.25 ms, most of a trivial cell's
    Python-side cost (issue 40); os.open/os.read take a fifth of that.
    """
    if not _proc_children():
        return None  # not Linux, or a kernel without CONFIG_PROC_CHILDREN
    task_dir = f"/proc/{pid}/task"
    found: list[int] = []
    try:
        tids = os.listdir(task_dir)
    except OSError:
        return []  # gone
    for tid in tids:
        try:
            fd = os.open(f"{task_dir}/{tid}/children", os.O_RDONLY)
        except OSError:
            continue  # the thread ended meanwhile
        try:
            # One read returns the whole file when it fits: a second read only for a longer one
            # (thousands of children), not the one that would return nothing.
            data = os.read(fd, _CHILDREN_READ)
            if len(data) == _CHILDREN_READ:
                while chunk := os.read(fd, _CHILDREN_READ):
                    data += chunk
        except OSError:
            continue
        finally:
            os.close(fd)
        if data:
            found.extend(int(p) for p in data.split())
    return found


_HAS_PROC_CHILDREN: bool | None = None


def _proc_children() -> bool:
    """Whether /proc has the children files (a kernel option, so checked once, on this
    process's own main thread)."""
    global _HAS_PROC_CHILDREN
    if _HAS_PROC_CHILDREN is None:
        _HAS_PROC_CHILDREN = os.path.exists(f"/proc/self/task/{os.getpid()}/children")
    return _HAS_PROC_CHILDREN


def descendants(pid: int) -> Snapshot:
    """Every living descendant of ``pid`` (empty if ``pid`` is gone)."""
    if not _proc_children():
        try:
            return frozenset(psutil.Process(pid).children(recursive=True))
        except psutil.Error:
            return frozenset()
    seen: set[psutil.Process] = set()
    todo = [pid]
    while todo:
        for child in _child_pids(todo.pop()) or []:
            try:
                proc = psutil.Process(child)
            except psutil.Error:
                continue
            if proc not in seen:
                seen.add(proc)
                todo.append(child)
    return frozenset(seen)


def started_since(pid: int, before: Snapshot) -> list[psutil.Process]:
    """Descendants of ``pid`` in its process group that are not in ``before`` and still run."""
    new = []
    for proc in descendants(pid) - before:
        try:
            if os.getpgid(proc.pid) != pid or proc.status() == psutil.STATUS_ZOMBIE:
                continue
        except (OSError, psutil.Error):
            continue  # gone meanwhile
        new.append(proc)
    return sorted(new, key=lambda p: p.pid)


def stop(procs: list[psutil.Process]) -> list[str]:
    """SIGTERM ``procs``, SIGKILL what is left after a bounded wait; describe each one stopped
    (one that outlives even SIGKILL, stuck in the kernel, is not named).

    Blocking (up to ``_TERM_WAIT + _KILL_WAIT``): run it in a thread.
    """
    names: dict[psutil.Process, str] = {}
    for proc in procs:
        try:
            names[proc] = f"{proc.name()} (pid {proc.pid})"
            proc.terminate()  # psutil refuses to signal a pid that now names another process
        except psutil.Error:
            names.pop(proc, None)
    alive = _wait_ended(list(names), _TERM_WAIT)
    for proc in alive:
        try:
            proc.kill()
        except psutil.Error:
            continue
    stuck = _wait_ended(alive, _KILL_WAIT)
    return [names[p] for p in procs if p in names and p not in stuck]


def _wait_ended(procs: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Wait up to ``timeout`` for ``procs`` to end; return those still running.

    A process that has ended but that its parent has not reaped yet (a zombie) has ended:
    the cell's processes are children of Julia or of its shells, which reap them only when
    their event loop runs, and a loaded machine kept Julia's from running for longer than
    the wait (psutil.wait_procs counts a zombie as alive: the shell that SIGKILL had ended
    was reported as never stopped).
    """
    deadline = time.monotonic() + timeout
    alive = procs
    while True:
        alive = [p for p in alive if not _ended(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.005)


def _ended(proc: psutil.Process) -> bool:
    try:
        return not proc.is_running() or proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:
        return False
