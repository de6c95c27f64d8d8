"""Julia launched before ipykernel is imported: adopted by start(), never doubled, never left.

``python -m jutul_jkernel`` builds its supervisor and calls ``launch()`` first, so that Julia
boots while ipykernel is imported and set up; the kernel's start() then adopts that process.
"""

from __future__ import annotations

import asyncio
import subprocess
import sys
import textwrap
from pathlib import Path

import psutil
import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor

from .clients import execute, result_of
from .conftest import STARTUP_TIMEOUT, julia_descendants

pytestmark = pytest.mark.integration

CELL_BOUND = 30.0
ENTRY_BOUND = 60.0

# Runs the kernel's entry point with launch() recording instead of spawning, and stops the
# process at the first import of ipykernel, printing what had happened by then.
_ENTRY_PROBE = textwrap.dedent(
    """
    import sys
    from jutul_jkernel.supervisor import julia_supervisor as supervisor

    events = []
    supervisor.JuliaSupervisor.launch = lambda self: events.append("launch")

    class StopAtIpykernel:
        def find_spec(self, name, path=None, target=None):
            if name == "ipykernel":
                print("before ipykernel:", events, flush=True)
                raise SystemExit(0)
            return None

    sys.meta_path.insert(0, StopAtIpykernel())
    from jutul_jkernel.__main__ import main
    main()
    print("ipykernel was never imported", flush=True)
    """
)


def _running(procs: list[psutil.Process]) -> list[int]:
    return [p.pid for p in procs if p.is_running() and p.status() != psutil.STATUS_ZOMBIE]


def test_kernel_launches_julia_before_it_imports_ipykernel() -> None:
    """The kernel's entry point calls launch() while ipykernel is not yet imported."""
    done = subprocess.run(
        [sys.executable, "-c", _ENTRY_PROBE],
        capture_output=True,
        text=True,
        timeout=ENTRY_BOUND,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "before ipykernel: ['launch']", done.stdout + done.stderr


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
        assert _running(julia_descendants()) == [launched[0].pid]
    finally:
        await sup.shutdown()


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


@pytest.mark.parametrize("end", ["shutdown", "kill_now"])
async def test_an_end_before_start_leaves_no_julia_and_no_socket(end: str) -> None:
    """A launched Julia that was never started is killed and reaped by shutdown(), or killed
    by kill_now() (the kernel's atexit), and the socket it was to connect to is gone."""
    sup = JuliaSupervisor(startup_timeout=STARTUP_TIMEOUT)
    sup.launch()
    launched = julia_descendants()
    assert launched
    address = Path(launched[0].cmdline()[-1])
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
