"""Driving a real Julia through JuliaSupervisor in a test: every wait is bounded.

A cell run with a bound, a wait for a cell's start signal that fails at once if the cell ends
first, the stop of a cell a failed test left running, the wait for Julia's warm-up, and a
supervisor that a module's tests share. conftest.py keeps the leftover guard these register with.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator

import pytest

from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor
from jutul_jkernel.supervisor.output_sink import OutputSink
from jutul_jkernel.supervisor.results import ExecutionResult

from .conftest import (
    SHARED,
    STARTUP_TIMEOUT,
    WARM_UP_BOUND,
    WARM_UP_POLL,
    Output,
    StartSignal,
)

# Bounds for the interrupt cases: each must end well within the escalation's own budget
# (INT 0.05 s + SIGINT 2 s + burst 0.25 s + 3 s + restart).
INTERRUPT_BOUND = 15.0
CELL_BOUND = 30.0


async def run(
    julia: JuliaSupervisor,
    code: str,
    out: Output | OutputSink | None = None,
    *,
    bound: float = CELL_BOUND,
) -> ExecutionResult:
    """Run one cell; fail if it has not ended within ``bound`` seconds."""
    return await asyncio.wait_for(julia.execute(code, out), bound)


async def started_or_ended(task: asyncio.Task[ExecutionResult], started: StartSignal) -> None:
    """Wait for the cell's start signal; fail at once, with its result, if it ends first."""
    signal_task = asyncio.create_task(started.wait_async(CELL_BOUND))
    try:
        await asyncio.wait({signal_task, task}, return_when=asyncio.FIRST_COMPLETED)
        if not signal_task.done():
            result = task.result() if not task.exception() else task.exception()
            pytest.fail(f"the cell ended before its start signal: {result!r}")
        signal_task.result()
    except BaseException:
        task.cancel()
        signal_task.cancel()
        raise


async def stop_cell(julia: JuliaSupervisor, task: asyncio.Task[ExecutionResult]) -> None:
    """After a test that may have failed: a cell still running is stopped by the supervisor
    (which restarts Julia at worst), so that the next test in a shared session does not fail
    behind it."""
    if not task.done():
        with contextlib.suppress(Exception):
            await asyncio.wait_for(julia.interrupt(), INTERRUPT_BOUND)
            await asyncio.wait_for(asyncio.shield(task), INTERRUPT_BOUND)
    task.cancel()


async def wait_until_warm(sup: JuliaSupervisor) -> None:
    """Poll, idle between polls, until the supervisor's Julia has finished its warm-up."""
    deadline = time.monotonic() + WARM_UP_BOUND
    while (await run(sup, "JKernel.WARMING[]")).text != "false":
        assert time.monotonic() < deadline, "Julia did not finish its warm-up"
        await asyncio.sleep(WARM_UP_POLL)


@contextlib.asynccontextmanager
async def shared_supervisor(*julia_args: str, warm: bool = False) -> AsyncIterator[JuliaSupervisor]:
    """A started supervisor that outlives single tests (the leftover guard ignores its Julia
    meanwhile), with ``julia_args`` after the settings' own; ``warm``: once its warm-up is over."""
    sup = JuliaSupervisor(julia_args=julia_args, startup_timeout=STARTUP_TIMEOUT)
    await sup.start()
    SHARED.append(sup)
    try:
        if warm:
            await wait_until_warm(sup)
        yield sup
    finally:
        await sup.shutdown()
        SHARED.remove(sup)
