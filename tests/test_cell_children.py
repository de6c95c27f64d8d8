"""Interrupted cells against a real Julia: the interrupt is delivered again to code that caught
it and went on, and the processes the cell started are stopped when it ends, but never those of
earlier cells nor Distributed's workers."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path

import psutil
import pytest

from jutul_jkernel.supervisor.julia_supervisor import ExecutionResult, JuliaSupervisor

from .conftest import STARTUP_TIMEOUT, Output, StartSignal, private_depot
from .supervisors import CELL_BOUND, INTERRUPT_BOUND, run, started_or_ended, stop_cell

pytestmark = pytest.mark.integration

# Bound on a child's exit once the cell that started it ended by interrupt (the supervisor
# waits for the exits itself, then Julia reaps them while idle).
EXIT_BOUND = 10.0
# addprocs(1) takes ~2 s here; a loaded machine may need much more.
ADDPROCS_BOUND = 90.0
# A line printed every this many seconds by the child of the first test: the next cell waits
# until the child has been reaped, so a surviving child would print into it many times.
TICK = "0.2"


class Pids:
    """Processes a test started through Julia; any still alive at the end is killed."""

    def __init__(self) -> None:
        self.procs: list[psutil.Process] = []

    def add(self, pid: int) -> psutil.Process:
        proc = psutil.Process(pid)
        self.procs.append(proc)
        return proc

    def kill_all(self) -> None:
        for proc in self.procs:
            with contextlib.suppress(psutil.Error):
                proc.kill()  # psutil checks that the pid still names the same process


@pytest.fixture
def pids() -> Iterator[Pids]:
    found = Pids()
    try:
        yield found
    finally:
        found.kill_all()


def read_pid(path: Path) -> int:
    """The pid a process wrote before its start signal."""
    return int(path.read_text())


def gone(proc: psutil.Process) -> bool:
    try:
        return proc.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


async def interrupted(
    sup: JuliaSupervisor,
    code: str,
    started: StartSignal,
    out: Output,
    on_started: Callable[[], object] = lambda: None,
) -> ExecutionResult:
    """Run ``code`` until its start signal, call ``on_started``, interrupt the cell once;
    return its result."""
    task = asyncio.create_task(sup.execute(code, out))
    try:
        await started_or_ended(task, started)
        on_started()
        await sup.interrupt()
        return await asyncio.wait_for(asyncio.shield(task), INTERRUPT_BOUND)
    finally:
        await stop_cell(sup, task)


async def test_a_child_that_outlives_an_interrupted_cell_is_stopped(
    julia: JuliaSupervisor, tmp_path: Path, start_signal: StartSignal, pids: Pids
) -> None:
    """A cell starts a shell that would print forever and is interrupted: the shell (and its
    own child) are stopped when the cell ends, the cell's stderr says so, and the next cell
    sees the shell exited and gets none of its output. The shell ignores SIGINT, so that it
    outlives the interrupt by whichever path it came, and SIGTERM, so that only the SIGKILL
    that follows stops it."""
    pidfile = tmp_path / "child.pid"
    out = Output()
    code = (
        'ticker = run(`sh -c \'trap "" INT TERM; sleep 1; while true; do echo tick; sleep '
        + TICK
        + "; done'`; wait = false); "
        f'write("{pidfile}", string(getpid(ticker))); {start_signal.julia}; sleep(60)'
    )
    result = await interrupted(julia, code, start_signal, out, lambda: pids.add(read_pid(pidfile)))
    child = pids.procs[0]
    assert result.status == "interrupted", result
    assert result.state_kept
    assert "stopped" in out.text("stderr") and f"sh (pid {child.pid})" in out.text("stderr")
    after = Output()
    # Bounded: a child that lives on keeps the cell waiting until the bound, then says so.
    r = await run(julia, f"timedwait(() -> process_exited(ticker), {EXIT_BOUND})", after)
    assert r.text == ":ok", r
    assert "tick" not in after.text("stdout") + after.text("stderr")
    assert gone(child)


async def test_a_child_of_an_earlier_cell_survives_a_later_interrupt(
    julia: JuliaSupervisor, start_signal: StartSignal, pids: Pids
) -> None:
    """Only what the interrupted cell started is stopped: a background process started by an
    earlier cell that ended normally runs on."""
    r = await run(julia, "keeper = run(`sleep 300`; wait = false); getpid(keeper)")
    assert r.status == "ok", r
    keeper = pids.add(int(r.text))
    out = Output()
    result = await interrupted(julia, f"{start_signal.julia}; sleep(60)", start_signal, out)
    assert result.status == "interrupted", result
    assert "stopped" not in out.text("stderr")
    assert (await run(julia, "process_running(keeper)")).text == "true"
    assert not gone(keeper)
    await run(julia, "kill(keeper); wait(keeper)")


async def test_a_package_precompile_worker_is_stopped(
    tmp_path: Path, start_signal: StartSignal, pids: Pids
) -> None:
    """`using` a package that needs precompiling runs a `julia` worker (Base.compilecache); the
    cell interrupted while the worker compiles ends, and the worker does not compile on: it is
    stopped, so it never prints into a later cell nor writes its cache."""
    packages = tmp_path / "packages"
    packages.mkdir()
    pidfile = tmp_path / "worker.pid"
    # The module body runs in the worker while it compiles: it says where it is, then stalls.
    # It ignores SIGINT (signal(2, SIG_IGN)), so that it outlives the interrupt by any path.
    (packages / "SlowPrecompile.jl").write_text(
        "module SlowPrecompile\n"
        "ccall(:signal, Ptr{Cvoid}, (Cint, Ptr{Cvoid}), 2, Ptr{Cvoid}(1))\n"
        f'write("{pidfile}", string(getpid()))\n'
        f"{start_signal.julia}\n"
        "sleep(120)\n"
        'println("compiled")\n'
        "end\n"
    )
    sup = JuliaSupervisor(
        env={"JULIA_DEPOT_PATH": private_depot(tmp_path / "depot")},  # the cache goes there
        startup_timeout=STARTUP_TIMEOUT,
    )
    try:
        await sup.start()
        assert (await run(sup, f'push!(LOAD_PATH, "{packages}"); keep = 7')).status == "ok"
        out = Output()
        result = await interrupted(
            sup, "using SlowPrecompile", start_signal, out, lambda: pids.add(read_pid(pidfile))
        )
        worker = pids.procs[0]
        assert result.status == "interrupted", result
        assert result.state_kept
        assert f"julia (pid {worker.pid})" in out.text("stderr"), out.text("stderr")
        assert gone(worker)
        assert (await run(sup, "keep")).text == "7"
    finally:
        await sup.shutdown()


async def test_distributed_workers_survive_an_interrupted_cell(
    julia: JuliaSupervisor, start_signal: StartSignal
) -> None:
    """Distributed's workers are Julia's children too, but not the cell's to stop: one added
    before and one added by the interrupted cell itself both still answer afterwards."""
    added = await asyncio.wait_for(
        julia.execute("using Distributed; addprocs(1); nworkers()"), ADDPROCS_BOUND
    )
    assert added.text == "1", added
    try:
        out = Output()
        task = asyncio.create_task(
            julia.execute(f"addprocs(1); {start_signal.julia}; sleep(60)", out)
        )
        try:
            signal_wait = asyncio.create_task(start_signal.wait_async(ADDPROCS_BOUND))
            await asyncio.wait({signal_wait, task}, return_when=asyncio.FIRST_COMPLETED)
            assert signal_wait.done() and not task.done(), "the cell ended before its signal"
            signal_wait.result()
            await julia.interrupt()
            result = await asyncio.wait_for(asyncio.shield(task), INTERRUPT_BOUND)
        finally:
            await stop_cell(julia, task)
        assert result.status == "interrupted", result
        assert "stopped" not in out.text("stderr"), out.text("stderr")
        r = await asyncio.wait_for(
            julia.execute("sort([remotecall_fetch(myid, w) for w in workers()]) == [2, 3]"),
            CELL_BOUND,
        )
        assert r.text == "true", r
    finally:
        await asyncio.wait_for(julia.execute("rmprocs(workers()); nothing"), CELL_BOUND)


async def test_a_cancelled_cell_leaves_no_child(
    julia: JuliaSupervisor, tmp_path: Path, start_signal: StartSignal, pids: Pids
) -> None:
    """A caller that gives up on a cell (a timeout around execute) gets it interrupted, and
    what the cell started is stopped before the next execution runs."""
    pidfile = tmp_path / "child.pid"
    code = (
        "sleeper = run(`sh -c 'trap \"\" INT; sleep 300'`; wait = false); "
        f'write("{pidfile}", string(getpid(sleeper))); {start_signal.julia}; sleep(60)'
    )
    task = asyncio.create_task(julia.execute(code))
    await started_or_ended(task, start_signal)
    child = pids.add(read_pid(pidfile))
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    # The next execution waits until the cancelled one was settled.
    r = await run(julia, f"timedwait(() -> process_exited(sleeper), {EXIT_BOUND})")
    assert r.text == ":ok", r
    assert gone(child)


# The shape of Pkg's precompile under an interrupt (JuliaLang/julia release-1.12
# base/precompilation.jl, Pkg release-1.10 src/precompilation.jl), with stderr not a TTY: the
# main task catches the interrupt in `wait(interrupted_or_done)`, and `handle_interrupt` then
# waits for the print task, which waits for `first_started`, notified only after that first
# wait returns. Only a second interrupt ends it.
PRECOMPILE_DEADLOCK = (
    "first_started = Base.Event(); interrupted_or_done = Base.Event(); "
    "t_print = @async wait(first_started); "
    "try; {started}; wait(interrupted_or_done); "
    "catch err; notify(interrupted_or_done); wait(t_print); end; "
    "notify(first_started)"
)


async def test_a_cell_that_goes_on_after_its_interrupt_gets_it_again(
    julia: JuliaSupervisor, start_signal: StartSignal
) -> None:
    """One stop ends a cell that caught the interrupt and then waits for a task that waits on
    it (Pkg's precompile): the interrupt is delivered again, as a SIGINT, and the
    session is kept."""
    assert (await run(julia, "keep = 3")).status == "ok"
    pid = julia.pid
    code = PRECOMPILE_DEADLOCK.format(started=start_signal.julia)
    result = await interrupted(julia, code, start_signal, Output())
    assert result.status == "interrupted", result
    assert result.interrupt_path == "sigint", result
    assert result.state_kept and julia.pid == pid
    assert (await run(julia, "keep")).text == "3"


def test_a_process_that_ended_unreaped_is_named_as_stopped() -> None:
    """A process the stop ended is named even while its parent has not reaped it yet (a
    zombie): a loaded machine keeps Julia, or a cell's shell, from reaping for longer than the
    stop waits. Here the parent never reaps."""
    import subprocess
    import sys

    from jutul_jkernel.supervisor import children

    keeper = (
        "import subprocess, time; p = subprocess.Popen(['sleep', '100']); "
        "print(p.pid, flush=True); time.sleep(100)"
    )
    with subprocess.Popen(
        [sys.executable, "-c", keeper], stdout=subprocess.PIPE, text=True
    ) as parent:
        try:
            assert parent.stdout is not None
            child = psutil.Process(int(parent.stdout.readline()))
            assert children.stop([child]) == [f"sleep (pid {child.pid})"]
            assert child.status() == psutil.STATUS_ZOMBIE  # ended; its parent never reaped it
        finally:
            parent.kill()
            parent.wait(10)
