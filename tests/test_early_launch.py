"""Julia launched before ipykernel is imported: adopted by start(), never doubled, never left.

``python -m jutul_jkernel`` spawns Julia first (supervisor/early_launch.py), before it imports
the supervisor and ipykernel, so that Julia boots meanwhile; the supervisor adopts that process
and the kernel's start() connects to it. ``JuliaSupervisor.launch()`` does the same from Python.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path

import psutil
import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from jutul_jkernel.supervisor.early_launch import launch_from_env
from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor

from .clients import execute, result_of
from .conftest import REAP_GRACE, STARTUP_TIMEOUT, julia_descendants

pytestmark = pytest.mark.integration

CELL_BOUND = 30.0
ENTRY_BOUND = 60.0

# Modules the kernel process must not have imported when it spawns Julia: each delays the
# spawn, and Julia's boot is what a kernel's start waits for (supervisor/early_launch.py).
HEAVY = (
    "asyncio",
    "logging",
    "psutil",
    "jutul_jkernel.supervisor.julia_supervisor",
    "zmq",
    "ipykernel",
)

# Runs the kernel's entry point as `python -m jutul_jkernel` does, and stops the process at the
# spawn of Julia (an audit hook sees the Popen before the fork: nothing is spawned) or at the
# first import of ipykernel, whichever comes first, printing which it was and what was loaded.
_ENTRY_PROBE = textwrap.dedent(
    """
    import os, runpy, sys

    HEAVY = HEAVY_NAMES

    def stop(what):
        print(what, sorted(m for m in HEAVY if m in sys.modules), flush=True)
        os._exit(0)

    def audit(event, args):
        if event == "subprocess.Popen" and any("server.jl" in str(a) for a in args[1] or ()):
            stop("spawned with")

    class StopAtIpykernel:
        def find_spec(self, name, path=None, target=None):
            if name == "ipykernel":
                stop("ipykernel imported first, with")
            return None

    sys.addaudithook(audit)
    sys.meta_path.insert(0, StopAtIpykernel())
    sys.argv = ["jutul_jkernel", "-f", "never-read.json"]
    runpy.run_module("jutul_jkernel", run_name="__main__", alter_sys=True)
    print("Julia was never spawned", flush=True)
    """
).replace("HEAVY_NAMES", repr(HEAVY))


def _running(procs: list[psutil.Process]) -> list[int]:
    return [p.pid for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def _entry_probe() -> str:
    """What the kernel's entry point had loaded when it spawned Julia (or imported ipykernel)."""
    # The probe ends itself at the spawn: the log and socket directories it had made go with
    # this temporary folder.
    with tempfile.TemporaryDirectory(prefix="entry-probe-") as tmp:
        done = subprocess.run(
            [sys.executable, "-c", _ENTRY_PROBE],
            capture_output=True,
            text=True,
            timeout=ENTRY_BOUND,
            env={**os.environ, "TMPDIR": tmp},
            check=False,
        )
    assert done.returncode == 0, done.stderr
    return done.stdout.strip()


def test_kernel_launches_julia_before_it_imports_ipykernel() -> None:
    """The kernel's entry point spawns Julia while ipykernel is not yet imported."""
    assert _entry_probe().startswith("spawned with"), _entry_probe()


def test_kernel_spawns_julia_before_anything_heavy_is_imported() -> None:
    """Nor asyncio, logging, psutil, zmq or the supervisor: the entry point spawns Julia through
    supervisor/early_launch.py, whose imports are light, so that Julia's boot starts as early
    as the process can start it (the supervisor's imports took 0.3 s under load)."""
    assert _entry_probe() == "spawned with []"


@pytest.mark.parametrize(
    "held_at",
    [
        # the early launch's own handler (EarlyLaunch.kill_now): no supervisor yet
        "jutul_jkernel.supervisor.from_env",
        # the supervisor's (kill_now), which adopted that Julia
        "ipykernel",
    ],
)
def test_a_sigterm_during_the_imports_takes_the_early_julia_along(
    tmp_path: Path, held_at: str
) -> None:
    """A kernel SIGTERMed after it spawned Julia but before its own SIGTERM handler is in place
    (while the supervisor or ipykernel is imported) kills that Julia: Python's default SIGTERM
    runs no atexit, and a Julia still booting (here: held in its -L file) would live on without
    a parent. Its socket's and log directories go too."""
    stall = tmp_path / "slow-start.jl"
    stall.write_text("sleep(60)\n")
    # The entry point, held at its import of `held_at` once Julia is spawned.
    probe = textwrap.dedent(
        """
        import runpy, sys, time

        class HoldAtImport:
            def find_spec(self, name, path=None, target=None):
                if name == HELD_AT:
                    print("held", flush=True)
                    time.sleep(60)
                return None

        sys.meta_path.insert(0, HoldAtImport())
        sys.argv = ["jutul_jkernel", "-f", "never-read.json"]
        runpy.run_module("jutul_jkernel", run_name="__main__", alter_sys=True)
        """
    ).replace("HELD_AT", repr(held_at))
    env = {**os.environ, "JUTUL_JKERNEL_JULIA_ARGS": f"-L {stall}"}
    kernel = subprocess.Popen(
        [sys.executable, "-c", probe], stdout=subprocess.PIPE, text=True, env=env
    )
    julia: list[psutil.Process] = []
    try:
        assert kernel.stdout is not None
        assert kernel.stdout.readline().strip() == "held"
        julia = [p for p in psutil.Process(kernel.pid).children() if "julia" in p.name()]
        assert len(julia) == 1, julia
        # Its socket's directory (the last argument) and its log directory (the claims'
        # parent): the SIGTERM removes them too.
        made = [Path(julia[0].cmdline()[-1]).parent]
        made.append(Path(julia[0].environ()["JUTUL_JKERNEL_CLAIMS"]).parent)
        assert all(d.is_dir() for d in made), made
        kernel.send_signal(signal.SIGTERM)
        assert kernel.wait(ENTRY_BOUND) == -signal.SIGTERM
        _, alive = psutil.wait_procs(julia, timeout=REAP_GRACE)
        assert not alive, "the early Julia outlived its kernel's SIGTERM"
        assert not [d for d in made if d.exists()], "left in the temporary folder"
    finally:
        kernel.kill()  # a no-op once it was reaped
        kernel.wait(ENTRY_BOUND)
        if kernel.stdout is not None:
            kernel.stdout.close()
        for p in julia:
            with contextlib.suppress(psutil.Error):
                p.kill()


async def test_start_adopts_the_launched_julia() -> None:
    """start() after launch() connects to that Julia: one process, and it runs cells."""
    sup = JuliaSupervisor(startup_timeout=STARTUP_TIMEOUT)
    try:
        sup.launch()
        launched = julia_descendants()
        assert len(launched) == 1, f"launch() started {len(launched)} Julia processes"
        await sup.start()
        assert sup.pid == launched[0].pid
        result = await asyncio.wait_for(sup.execute("1+1"), CELL_BOUND)
        assert result.text == "2"
        assert _running(_serving(julia_descendants())) == [launched[0].pid]
    finally:
        await sup.shutdown()


async def test_a_supervisor_adopts_the_julia_spawned_before_it_existed() -> None:
    """The entry point's early Julia (spawned before the supervisor was imported) is the one
    the supervisor starts and runs cells in, with the log it was spawned with."""
    early = launch_from_env()
    assert early is not None
    sup = JuliaSupervisor(startup_timeout=STARTUP_TIMEOUT)
    try:
        sup.adopt_early_launch(early)
        await sup.start()
        assert sup.pid == early.launch.popen.pid
        assert sup.log_path == early.launch.log_path
        result = await asyncio.wait_for(sup.execute("1+1"), CELL_BOUND)
        assert result.text == "2"
        assert _running(_serving(julia_descendants())) == [early.launch.popen.pid]
    finally:
        await sup.shutdown()
    assert not early.log_dir.exists()  # the supervisor's to remove, as its own


async def test_launch_with_other_settings_since_is_replaced() -> None:
    """Settings changed between launch() and start(): the launched Julia goes, a new one
    with the new settings runs the cells."""
    sup = JuliaSupervisor(startup_timeout=STARTUP_TIMEOUT)
    try:
        sup.launch()
        launched = julia_descendants()
        sup.env = {"JKERNEL_TEST_LATE_SETTING": "yes"}
        await sup.start()
        assert sup.pid not in {p.pid for p in launched}
        assert not _running(launched)
        result = await asyncio.wait_for(sup.execute('ENV["JKERNEL_TEST_LATE_SETTING"]'), CELL_BOUND)
        assert result.text == '"yes"'
    finally:
        await sup.shutdown()


def _serving(procs: list[psutil.Process]) -> list[psutil.Process]:
    """``procs`` without the launcher's compile for the next start and what runs below it: a
    Julia that found JKernel's cache stale (sources edited since the last compile) loads it
    from source and runs `server.jl --precompile --no-wait` (launcher.jl), two more Julias for
    the length of a compile."""

    def compiling(p: psutil.Process) -> bool:
        for q in (p, *p.parents()):
            with contextlib.suppress(psutil.Error):
                if "--precompile" in q.cmdline():
                    return True
        return False

    return [p for p in procs if not compiling(p)]


def _command_line(p: psutil.Process) -> list[str]:
    """``p``'s command line once it has one: a process that is exec'ing has none for a moment
    (/proc/<pid>/cmdline reads empty while its memory is replaced), and 1.5.3's `julia` here is
    a script that execs the real one (.venv/julia-bin, scripts/ensure-julia.sh), which a
    fresh-checkout run caught once (IndexError on the empty list)."""
    deadline = time.monotonic() + STARTUP_TIMEOUT
    while not (args := p.cmdline()):
        assert time.monotonic() < deadline, f"{p} never had a command line"
        time.sleep(0.001)
    return args


@pytest.mark.parametrize("end", ["shutdown", "kill_now"])
async def test_an_end_before_start_leaves_no_julia_and_no_socket(end: str) -> None:
    """A launched Julia that was never started is killed and reaped by shutdown(), or killed
    by kill_now() (the kernel's atexit), and the socket it was to connect to is gone."""
    sup = JuliaSupervisor(startup_timeout=STARTUP_TIMEOUT)
    sup.launch()
    try:
        # The Julia launched is this process's child; a Julia below it (the launcher's compile
        # for the next start, when it found the cache stale) is not it (a fresh-clone run took
        # that one, which had ended, for it).
        launched = [p for p in julia_descendants() if p.ppid() == os.getpid()]
        assert len(launched) == 1, launched
        address = Path(_command_line(launched[0])[-1])
        assert address.is_socket()
        if end == "shutdown":
            await sup.shutdown()
        else:
            sup.kill_now()  # at exit: nothing runs after it
            gone = not address.parent.exists()
            psutil.wait_procs(launched, timeout=STARTUP_TIMEOUT)
            await sup.shutdown()  # reaps it, here where the process goes on
            assert gone
        assert not _running(launched)
        assert not address.parent.exists()
    finally:
        await sup.shutdown()  # after a failed step, too: no Julia outlives the test


@pytest.mark.e2e
def test_kernel_through_jupyter_client_runs_one_julia(
    own_kernel: tuple[KernelManager, BlockingKernelClient],
) -> None:
    """The installed kernel, started by jupyter_client, has exactly one Julia, and uses it."""
    km, kc = own_kernel
    pid = km.provisioner.pid if km.provisioner else None
    assert pid is not None
    shown = result_of(execute(kc, "getpid()")[1])
    assert shown is not None
    children = [p for p in psutil.Process(pid).children() if "julia" in p.name()]
    assert [p.pid for p in children] == [int(shown)]
