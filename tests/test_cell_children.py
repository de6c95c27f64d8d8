"""Interrupted cells against a real Julia: the interrupt is delivered again to code that caught
it and went on."""

from __future__ import annotations

import asyncio
from collections.abc import Callable

import pytest

from jutul_jkernel.supervisor import ExecutionResult, JuliaSupervisor

from .conftest import Output, StartSignal
from .test_supervisor_julia import INTERRUPT_BOUND, run, started_or_ended, stop_cell

pytestmark = pytest.mark.integration

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
    it (Pkg's precompile, audit N14): the interrupt is delivered again, as a SIGINT, and the
    session is kept."""
    assert (await run(julia, "keep = 3")).status == "ok"
    pid = julia.pid
    code = PRECOMPILE_DEADLOCK.format(started=start_signal.julia)
    result = await interrupted(julia, code, start_signal, Output())
    assert result.status == "interrupted", result
    assert result.interrupt_path == "sigint", result
    assert result.state_kept and julia.pid == pid
    assert (await run(julia, "keep")).text == "3"
