"""Executions beside the main one (a subshell's requests) through the supervisor, against a
real Julia: they answer while the main execution runs, their output is theirs by task, an
interrupt reaches the main one only, abandoning ends them at once, a death fails them all,
and a burst is bounded."""

from __future__ import annotations

import asyncio
import re
import time
from collections.abc import AsyncIterator

import pytest
import pytest_asyncio

from jutul_jkernel.supervisor import beside
from jutul_jkernel.supervisor.errors import JuliaDiedError
from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor
from jutul_jkernel.supervisor.output_sink import CommMessage, Display, OutputSink
from jutul_jkernel.supervisor.results import ExecutionResult

from .conftest import STARTUP_TIMEOUT, Output, StartSignal
from .supervisors import CELL_BOUND, INTERRUPT_BOUND, run, shared_supervisor, stop_cell

pytestmark = [pytest.mark.integration, pytest.mark.asyncio(loop_scope="module")]

# The acceptance bound of issue 47: a subshell answers within this while the main cell runs.
ANSWER_BOUND = 0.2
# The main cell of the acceptance test: a global that grows, a line per step.
COUNTING = 'while true; global x += 1; println("main ", x); sleep(0.01); end'


@pytest_asyncio.fixture(loop_scope="module", scope="module")
async def julia() -> AsyncIterator[JuliaSupervisor]:
    async with shared_supervisor(warm=True) as sup:
        yield sup


async def beside_run(
    julia: JuliaSupervisor, code: str, out: Output | OutputSink | None = None, *, shell: int = 1
) -> ExecutionResult:
    return await asyncio.wait_for(julia.execute_beside(code, out, shell=shell), CELL_BOUND)


async def test_a_beside_execution_answers_while_the_main_one_runs_and_keeps_its_output(
    julia: JuliaSupervisor,
) -> None:
    """The issue's acceptance case, without Jupyter: while the main execution counts and
    prints, a beside one answers `x` within 0.2 s, three times, each a larger number; no line
    of the one reaches the other's sink."""
    assert (await run(julia, "global x = 0")).status == "ok"
    warm = await beside_run(julia, 'println("sub"); x')
    assert warm.status == "ok", warm
    main_out = Output()
    main = asyncio.ensure_future(julia.execute(COUNTING, main_out))
    try:
        seen: list[int] = []
        for _ in range(3):
            await asyncio.sleep(0.1)
            sub_out = Output()
            t0 = time.monotonic()
            result = await julia.execute_beside('println("sub"); x', sub_out, shell=1)
            took = time.monotonic() - t0
            assert result.status == "ok", result
            assert took < ANSWER_BOUND, f"the beside execution took {took:.3f} s"
            seen.append(int(result.text))
            assert sub_out.text() == "sub\n"
            assert sub_out.text("stderr") == ""
        assert seen == sorted(seen) and seen[0] < seen[-1], seen
        await julia.interrupt()
        ended = await asyncio.wait_for(main, INTERRUPT_BOUND)
        assert ended.status == "interrupted"
    finally:
        await stop_cell(julia, main)
    lines = main_out.text().splitlines()
    assert lines and all(re.fullmatch(r"main \d+", line) for line in lines), lines[:5]


async def test_what_a_beside_execution_starts_prints_and_displays_into_it(
    julia: JuliaSupervisor, start_signal: StartSignal
) -> None:
    """Output is told apart by task: an `@async` child, a `Threads.@spawn` child, stderr and a
    display of the beside execution reach its sink while the main execution prints; a task
    that outlives it prints into its route's stray sink, never into the main execution."""
    main_out = Output()
    main = asyncio.ensure_future(
        julia.execute(
            f'{start_signal.julia}; while true; println("main"); sleep(0.01); end', main_out
        )
    )
    try:
        await start_signal.wait_async(CELL_BOUND)
        shown: list[Display] = []
        sub_out = Output()
        code = (
            'wait(@async (sleep(0.05); println("child")));'
            'fetch(Threads.@spawn println("spawned"));'
            'println(stderr, "err"); display("text/plain", "shown"); '
            '@async (sleep(0.3); println("late")); 1'
        )
        result = await beside_run(julia, code, OutputSink(stream=sub_out, display=shown.append))
        assert result.status == "ok", result
        assert sub_out.text() == "child\nspawned\n"
        assert sub_out.text("stderr") == "err\n"
        assert [d.data.get("text/plain") for d in shown] == ["shown"]
        stray = Output()
        julia.route_shell_output(1, OutputSink(stream=stray))
        deadline = time.monotonic() + CELL_BOUND
        while "late" not in stray.text():
            assert time.monotonic() < deadline, "the late task's line never came"
            await asyncio.sleep(0.05)
        await julia.interrupt()
        await asyncio.wait_for(main, INTERRUPT_BOUND)
    finally:
        julia.route_shell_output(1, None)
        await stop_cell(julia, main)
    assert set(main_out.text().splitlines()) == {"main"}
    assert stray.text() == "late\n"


async def test_an_interrupt_reaches_the_main_execution_only(
    julia: JuliaSupervisor, start_signal: StartSignal
) -> None:
    """As in ipykernel: interrupt() stops the main execution; a beside one runs to its end."""
    main = asyncio.ensure_future(julia.execute(f"{start_signal.julia_once_waiting}; sleep(30)"))
    sub = asyncio.ensure_future(julia.execute_beside("sleep(1.5); 7", shell=1))
    try:
        await start_signal.wait_async(CELL_BOUND)
        await julia.interrupt()
        ended = await asyncio.wait_for(main, INTERRUPT_BOUND)
        assert ended.status == "interrupted" and ended.state_kept
        assert not sub.done()
        result = await asyncio.wait_for(sub, CELL_BOUND)
        assert (result.status, result.text) == ("ok", "7")
    finally:
        await stop_cell(julia, main)
        sub.cancel()


async def test_abandoning_a_route_ends_its_execution_at_once_and_julia_stops_it(
    julia: JuliaSupervisor,
) -> None:
    """A deleted subshell's running request ends now with SubshellDeleted; Julia gets an
    interrupt for it (the worker is free again), and the route works for new requests."""
    sub = asyncio.ensure_future(julia.execute_beside("sleep(60); 1", shell=2))
    deadline = time.monotonic() + CELL_BOUND
    while julia._beside.running == 0:
        assert time.monotonic() < deadline, "the beside execution was never sent"
        await asyncio.sleep(0.01)
    await asyncio.sleep(0.1)  # in its sleep
    t0 = time.monotonic()
    julia.abandon_shell(2, "subshell 'two' was deleted while this request ran")
    result = await asyncio.wait_for(sub, 1.0)
    assert time.monotonic() - t0 < 0.1
    assert result.status == "error"
    err = result.error_info()
    assert (err.ename, err.evalue) == (
        "SubshellDeleted",
        "subshell 'two' was deleted while this request ran",
    )
    deadline = time.monotonic() + CELL_BOUND
    while julia._beside.running:  # Julia answered the INT frame: its slot is free
        assert time.monotonic() < deadline, "Julia never stopped the abandoned execution"
        await asyncio.sleep(0.02)
    assert (await run(julia, "length(JKernel.BESIDE)")).text == "0"
    assert (await beside_run(julia, "1 + 1", shell=2)).text == "2"


async def test_stdin_cannot_be_read_beside(julia: JuliaSupervisor) -> None:
    """readline() in a subshell is an error that says why, at once."""
    result = await beside_run(julia, "readline()")
    assert result.status == "error"
    assert "stdin is not available in a subshell" in result.error_info().evalue


async def test_a_comm_message_beside_reaches_a_running_main_cell(julia: JuliaSupervisor) -> None:
    """A comm's on_msg, delivered beside, runs while the main cell waits on what it sets."""
    setup = """
    const beside_value = Ref(0)
    function JKernel.register_comm(comm::JKernel.Comm{:beside_test}, msg)
        comm.on_msg = m -> (beside_value[] = m.content["data"]["value"])
    end
    """
    assert (await run(julia, setup)).status == "ok"
    opened = await julia.deliver_comm(
        CommMessage("comm_open", {"comm_id": "c1", "target_name": "beside_test", "data": {}})
    )
    assert opened.status == "ok", opened
    main = asyncio.ensure_future(
        julia.execute("while beside_value[] < 50; sleep(0.01); end; beside_value[]")
    )
    try:
        await asyncio.sleep(0.2)
        assert not main.done()
        sent = await asyncio.wait_for(
            julia.deliver_comm_beside(
                CommMessage("comm_msg", {"comm_id": "c1", "data": {"value": 60}}), shell=3
            ),
            CELL_BOUND,
        )
        assert sent.status == "ok", sent
        result = await asyncio.wait_for(main, CELL_BOUND)
        assert result.text == "60"
    finally:
        await stop_cell(julia, main)


async def test_a_burst_is_bounded_and_every_execution_answers(julia: JuliaSupervisor) -> None:
    """50 beside executions at once: at most beside.LIMIT run in Julia at a time, each in a
    worker task that is reused, and every one answers with its own value."""
    t0 = time.monotonic()
    results = await asyncio.wait_for(
        asyncio.gather(
            *(julia.execute_beside(f"sleep(0.3); {k}", shell=k + 10) for k in range(50))
        ),
        CELL_BOUND,
    )
    took = time.monotonic() - t0
    assert [r.text for r in results] == [str(k) for k in range(50)]
    assert took < 50 / beside.LIMIT * 0.3 + 5, took
    workers = int((await run(julia, "JKernel.BESIDE_WORKERS[]")).text)
    assert workers <= beside.LIMIT, workers


async def test_a_cancelled_beside_execution_is_stopped_in_julia(julia: JuliaSupervisor) -> None:
    """A caller that gives up (a timeout) gets its CancelledError; Julia stops the execution."""
    with pytest.raises((TimeoutError, asyncio.TimeoutError)):
        await asyncio.wait_for(julia.execute_beside("sleep(60)", shell=4), 0.5)
    deadline = time.monotonic() + CELL_BOUND
    while julia._beside.running:
        assert time.monotonic() < deadline, "Julia never stopped the cancelled execution"
        await asyncio.sleep(0.02)


@pytest.mark.asyncio(loop_scope="function")
async def test_a_death_fails_every_beside_execution_and_the_next_one_says_so() -> None:
    """Julia dies while two beside executions run: both fail with JuliaDiedError within 2 s;
    each route's next execution runs in a fresh Julia and says that the state was lost."""
    sup = JuliaSupervisor(startup_timeout=STARTUP_TIMEOUT)
    try:
        await sup.start()
        assert (await run(sup, "x = 1")).status == "ok"
        subs = [asyncio.ensure_future(sup.execute_beside("sleep(30)", shell=n)) for n in (1, 2)]
        await asyncio.sleep(0.3)
        t0 = time.monotonic()
        with pytest.raises(JuliaDiedError):
            await run(sup, "ccall(:abort, Cvoid, ())")
        for sub in subs:
            with pytest.raises(JuliaDiedError, match="SIGABRT"):
                await asyncio.wait_for(sub, 2.0)
        assert time.monotonic() - t0 < 2.0
        first = await asyncio.wait_for(sup.execute_beside("isdefined(Main, :x)", shell=1), 60)
        assert first.text == "false"
        assert first.notice is not None and "fresh Julia session" in first.notice
        again = await asyncio.wait_for(sup.execute_beside("1", shell=1), CELL_BOUND)
        assert again.notice is None
        other = await asyncio.wait_for(sup.execute_beside("1", shell=2), CELL_BOUND)
        assert other.notice is not None and "fresh Julia session" in other.notice
    finally:
        await sup.shutdown()
