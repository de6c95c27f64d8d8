"""Many kernels at once on one machine: a Monday morning on a shared server.

``JKERNEL_LOAD_KERNELS`` kernels (default 10) start at the same moment through jupyter_client,
each user's first cell sent as soon as the kernel answers kernel_info. Each kernel then runs
``JKERNEL_LOAD_CELLS`` mixed cells (default 40; 200 for the long run) concurrently with the
others: prints to stdout and stderr, results, errors, displays, and one cell interrupted
mid-run. Every reply and output is matched to its request by parent msg_id and checked exactly
(a message for a request nobody sent fails the test), execution counts are consecutive, state
survives the interrupt, and no Julia is left afterwards (conftest's guard).

The test prints the start-up latency distribution under that load, the memory of each kernel
(the Python kernel process and its Julia) idle and after the cells, and how many idle kernels
would fit in 24 GiB. No assertion is about time: a slow start is reported, a failed one fails.
"""

from __future__ import annotations

import asyncio
import os
import statistics
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import psutil
import pytest
import zmq
from jupyter_client.asynchronous.client import AsyncKernelClient
from jupyter_client.manager import AsyncKernelManager

from .conftest import KERNEL_NAME

pytestmark = pytest.mark.e2e

KERNELS = int(os.environ.get("JKERNEL_LOAD_KERNELS", "10"))
CELLS = int(os.environ.get("JKERNEL_LOAD_CELLS", "40"))
# A kernel's first cell waits for its Julia; ten Julias starting on two busy cores need far
# more than the ~1 s one needs alone. The kernel's own start-up timeout (60 s) fails the cell
# first, and that failure is what this test would report.
FIRST_CELL_TIMEOUT = 180.0
# Later cells are trivial; under this load one may still wait seconds for a core.
CELL_TIMEOUT = 60.0
READY_TIMEOUT = 120.0
# Only these may arrive for requests the test did not send as cells: wait_for_ready's
# kernel_info requests (their replies and statuses) and the IOPub subscription's welcome.
_EXPECTED_STRAY = ("status", "iopub_welcome", "kernel_info_reply")
OUTCOMES = ("kept", "forced", "restarted")
_GIB = 2**30
_MIB = 2**20


@dataclass
class Expected:
    """What a cell must produce: the reply status and the exact outputs, in order."""

    status: str
    outputs: list[tuple[str, Any]]  # (msg_type, the part of content compared)


def mixed_cell(k: int, i: int) -> tuple[str, Expected]:
    """The i-th cell of kernel k; every kind of output, each traceable to its cell."""
    tag = f"k{k}c{i}"
    kind = i % 6
    if kind == 0:
        return f'println("{tag}")', Expected("ok", [("stream", ("stdout", f"{tag}\n"))])
    if kind == 1:
        return f"{i} * {k + 1}", Expected("ok", [("execute_result", str(i * (k + 1)))])
    if kind == 2:
        return f'error("{tag}")', Expected("error", [("error", ("ErrorException", tag))])
    if kind == 3:
        return (
            f'display(HTML("<i>{tag}</i>"))',
            Expected("ok", [("display_data", f"<i>{tag}</i>")]),
        )
    if kind == 4:
        return (
            f'println(stderr, "{tag}"); "{tag}"',
            Expected("ok", [("stream", ("stderr", f"{tag}\n")), ("execute_result", f'"{tag}"')]),
        )
    return (
        f'println("{tag}"); display(HTML("<b>{tag}</b>")); "{tag}"',
        Expected(
            "ok",
            [
                ("stream", ("stdout", f"{tag}\n")),
                ("display_data", f"<b>{tag}</b>"),
                ("execute_result", f'"{tag}"'),
            ],
        ),
    )


def comparable(msg: dict[str, Any]) -> tuple[str, Any]:
    kind, content = msg["msg_type"], msg["content"]
    if kind == "stream":
        return kind, (content["name"], content["text"])
    if kind == "execute_result":
        return kind, content["data"]["text/plain"]
    if kind == "display_data":
        return kind, content["data"].get("text/html")
    if kind == "error":
        return kind, (content["ename"], content["evalue"])
    return kind, content


def merge_streams(outputs: list[tuple[str, Any]]) -> list[tuple[str, Any]]:
    """Join consecutive chunks of one stream (how output is cut into messages is timing)."""
    merged: list[tuple[str, Any]] = []
    for kind, value in outputs:
        if kind == "stream" and merged and merged[-1][0] == "stream":
            name, text = merged[-1][1]
            if name == value[0]:
                merged[-1] = ("stream", (name, text + value[1]))
                continue
        merged.append((kind, value))
    return merged


@dataclass
class Kernel:
    index: int
    km: AsyncKernelManager
    kc: AsyncKernelClient
    started_at: float
    ready_after: float = 0.0
    first_reply_after: float = 0.0
    first_statuses: list[str] = field(default_factory=list)
    kernel_info: list[dict[str, Any]] = field(default_factory=list)  # what wait_for_ready got
    interrupt_outcome: str = ""  # kept, forced (state kept, flagged) or restarted (state lost)
    stray: list[dict[str, Any]] = field(default_factory=list)
    count: int | None = None

    @property
    def pid(self) -> int:
        pid = self.km.provisioner.pid if self.km.provisioner else None
        assert pid is not None
        return int(pid)

    async def run(
        self, code: str, timeout: float = CELL_TIMEOUT, on_output: Any = None
    ) -> tuple[dict[str, Any], list[dict[str, Any]], list[str]]:
        """Send one cell; return its reply, outputs and statuses, all matched by msg_id."""
        msg_id = self.kc.execute(code, stop_on_error=False)
        deadline = time.monotonic() + timeout
        # IOPub first, up to idle: on_output may be what ends the cell (an interrupt). The
        # reply, sent before idle, waits on the shell channel meanwhile.
        outputs: list[dict[str, Any]] = []
        statuses: list[str] = []
        while not statuses or statuses[-1] != "idle":
            msg = await self.kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
            if msg["parent_header"].get("msg_id") != msg_id:
                self.stray.append(msg)
                continue
            kind = msg["msg_type"]
            if kind == "status":
                statuses.append(msg["content"]["execution_state"])
            elif kind != "execute_input":
                outputs.append(msg)
                if on_output is not None:
                    await on_output(msg)
        reply = None
        while reply is None:
            msg = await self.kc.get_shell_msg(timeout=max(0.01, deadline - time.monotonic()))
            if msg["parent_header"].get("msg_id") == msg_id:
                reply = msg
            else:  # wait_for_ready may leave a kernel_info_reply; anything else fails the test
                self.stray.append(msg)
        count = reply["content"]["execution_count"]
        if self.count is not None:
            assert count == self.count + 1, f"kernel {self.index}: replies out of order"
        self.count = count
        return reply, outputs, statuses


async def start(index: int) -> Kernel:
    """Start a kernel, wait for kernel_info, then send the user's first cell at once."""
    t0 = time.perf_counter()
    km = AsyncKernelManager(kernel_name=KERNEL_NAME)
    await km.start_kernel()
    km.context.setsockopt(zmq.RCVHWM, 0)
    kc = km.client()
    kc.start_channels()
    kernel = Kernel(index, km, kc, t0)
    handle = kc._handle_kernel_info_reply

    def keep(msg: dict[str, Any]) -> None:  # what a frontend shows on connecting
        kernel.kernel_info.append(msg["content"])
        handle(msg)

    kc._handle_kernel_info_reply = keep  # type: ignore[method-assign]
    try:
        await kc.wait_for_ready(timeout=READY_TIMEOUT)
        kernel.ready_after = time.perf_counter() - t0
        reply, outputs, statuses = await kernel.run("VERSION", timeout=FIRST_CELL_TIMEOUT)
        kernel.first_reply_after = time.perf_counter() - t0
        kernel.first_statuses = statuses
        assert reply["content"]["status"] == "ok", f"kernel {index}'s first cell: {reply}"
        assert outputs and outputs[0]["content"]["data"]["text/plain"].startswith('v"')
    except BaseException:
        await stop(kernel)
        raise
    return kernel


async def stop(kernel: Kernel) -> None:
    kernel.kc.stop_channels()
    if await kernel.km.is_alive():
        await kernel.km.shutdown_kernel()
    await kernel.km.cleanup_resources()


@pytest.fixture
async def kernels(kernel_env: dict[str, str]) -> AsyncIterator[list[Kernel]]:
    """KERNELS kernels started at the same moment; all shut down afterwards."""
    started = await asyncio.gather(*(start(i) for i in range(KERNELS)), return_exceptions=True)
    ok = [k for k in started if isinstance(k, Kernel)]
    try:
        failures = [k for k in started if not isinstance(k, Kernel)]
        if failures:
            raise failures[0]
        yield ok
    finally:
        await asyncio.gather(*(stop(k) for k in ok))


def memory(pid: int) -> tuple[int, int]:
    """RSS and PSS (shared pages divided among their users) of one process, in bytes."""
    info = psutil.Process(pid).memory_full_info()
    return int(info.rss), int(getattr(info, "pss", info.rss))


def julia_pid(kernel: Kernel) -> int:
    found = [
        p.pid for p in psutil.Process(kernel.pid).children(recursive=True) if "julia" in p.name()
    ]
    assert len(found) == 1, f"kernel {kernel.index}: expected one Julia, found {found}"
    return found[0]


async def interrupted_cell(kernel: Kernel) -> None:
    """A sleeping cell interrupted once it runs; the kernel's variables survive, unless the
    cell said that Julia had to be restarted.

    A sleeping cell stops at the interrupt request within milliseconds when Julia gets a core;
    on two cores shared by ten kernels (and, here, other users) the supervisor's escalation,
    which runs on wall-clock time, may still force the interrupt (state kept, flagged) or
    restart Julia (state lost). Both outcomes are told to the user in the cell; the test checks
    that they are, and counts them.
    """
    interrupted: list[bool] = []

    async def interrupt(msg: dict[str, Any]) -> None:
        # once the cell runs (it printed), never before: then there is something to stop
        if msg["msg_type"] == "stream" and not interrupted:
            interrupted.append(True)
            await kernel.km.interrupt_kernel()

    k = kernel.index
    reply, outputs, _ = await kernel.run(
        f'println("k{k} sleeping"); sleep(600)', on_output=interrupt
    )
    assert reply["content"]["status"] == "error", reply["content"]
    assert reply["content"]["ename"] == "InterruptException"
    got = merge_streams([comparable(m) for m in outputs])
    error = ("error", ("InterruptException", reply["content"]["evalue"]))
    assert got[0] == ("stream", ("stdout", f"k{k} sleeping\n")), got
    assert got[-1] == error, got
    notices = got[1:-1]
    assert len(notices) <= 1, got
    notice = notices[0][1][1] if notices else ""
    assert not notices or notices[0][1][0] == "stderr", got
    if "was restarted" in notice:
        kernel.interrupt_outcome = "restarted"
        reply, outputs, _ = await kernel.run("isdefined(Main, :load_state)")
        assert [comparable(m) for m in outputs] == [("execute_result", "false")]
        return
    assert not notices or "had to be forced" in notice, got
    kernel.interrupt_outcome = "forced" if notices else "kept"
    reply, outputs, _ = await kernel.run("load_state")
    assert [comparable(m) for m in outputs] == [("execute_result", str(k))]


async def run_mix(kernel: Kernel) -> None:
    """Every mixed cell, one interrupted in the middle, each reply and output checked."""
    k = kernel.index
    reply, outputs, _ = await kernel.run(f"load_state = {k}")
    assert reply["content"]["status"] == "ok"
    for i in range(CELLS):
        if i == CELLS // 2:
            await interrupted_cell(kernel)
            continue
        code, want = mixed_cell(k, i)
        reply, outputs, statuses = await kernel.run(code)
        assert reply["content"]["status"] == want.status, f"kernel {k} cell {i}: {reply}"
        assert statuses == ["busy", "idle"]
        got = merge_streams([comparable(m) for m in outputs])
        assert got == want.outputs, f"kernel {k} cell {i} ({code!r}): {got}"


def distribution(values: list[float]) -> str:
    values = sorted(values)
    p90 = values[min(len(values) - 1, round(0.9 * (len(values) - 1)))]
    return (
        f"min {values[0]:.1f} s, median {statistics.median(values):.1f} s, p90 {p90:.1f} s, "
        f"max {values[-1]:.1f} s (all: {', '.join(f'{v:.1f}' for v in values)})"
    )


@pytest.mark.timeout(180 + KERNELS * CELLS // 4)
async def test_many_kernels_at_once(kernels: list[Kernel]) -> None:
    """Every kernel starts (its first cell answers ok), runs its cells correctly, in order,
    alongside the others; the figures a shared server is sized by are printed."""
    cores = psutil.cpu_count() or 1
    idle = {k.index: (memory(k.pid), memory(julia_pid(k))) for k in kernels}
    t0 = time.perf_counter()
    await asyncio.gather(*(run_mix(k) for k in kernels))
    elapsed = time.perf_counter() - t0
    busy = {k.index: (memory(k.pid), memory(julia_pid(k))) for k in kernels}
    for k in kernels:
        assert await k.km.is_alive()
        assert k.first_statuses == ["busy", "idle"]
        assert k.kernel_info, f"kernel {k.index}: wait_for_ready saw no kernel_info_reply"
        assert CELLS == 0 or k.interrupt_outcome in OUTCOMES
        bad = [m for m in k.stray if m["msg_type"] not in _EXPECTED_STRAY]
        assert not bad, f"kernel {k.index}: messages for requests never sent: {bad}"

    def mib(values: list[int]) -> str:
        return f"median {statistics.median(values) / _MIB:.0f} MiB (max {max(values) / _MIB:.0f})"

    py_rss = [v[0][0] for v in idle.values()]
    py_pss = [v[0][1] for v in idle.values()]
    jl_rss = [v[1][0] for v in idle.values()]
    jl_pss = [v[1][1] for v in idle.values()]
    per_kernel_pss = statistics.median(p + j for p, j in zip(py_pss, jl_pss, strict=True))
    per_kernel_rss = statistics.median(p + j for p, j in zip(py_rss, jl_rss, strict=True))
    budget = 24 * _GIB
    outcomes = {o: [k.interrupt_outcome for k in kernels].count(o) for o in OUTCOMES}
    # kernel_info waits a bounded time for Julia; past it the reply has no Julia version yet
    unknown = sum(k.kernel_info[0]["language_info"]["version"] == "unknown" for k in kernels)
    cells = KERNELS * (CELLS + 2)  # with the state cell and the check after the interrupt
    print(
        f"\n[many kernels] {KERNELS} kernels on {cores} logical cores, {CELLS} mixed cells each"
        f"\n  start to kernel_info reply: {distribution([k.ready_after for k in kernels])}"
        f"\n  kernel_info answered before Julia was up (version 'unknown'): {unknown} of {KERNELS}"
        f"\n  start to first cell's reply: {distribution([k.first_reply_after for k in kernels])}"
        f"\n  {cells} cells in {elapsed:.1f} s ({cells / elapsed:.0f} cells/s over all kernels)"
        f"\n  interrupts: {outcomes}"
        f"\n  idle, per kernel: Python kernel RSS {mib(py_rss)}, PSS {mib(py_pss)}; "
        f"Julia RSS {mib(jl_rss)}, PSS {mib(jl_pss)}"
        f"\n  after the cells: Python RSS {mib([v[0][0] for v in busy.values()])}, "
        f"Julia RSS {mib([v[1][0] for v in busy.values()])}"
        f"\n  idle kernels in 24 GiB: 24576 MiB / {per_kernel_pss / _MIB:.0f} MiB (PSS, Python "
        f"+ Julia) = {budget // per_kernel_pss:.0f}; counting shared pages in full (RSS): "
        f"24576 / {per_kernel_rss / _MIB:.0f} = {budget // per_kernel_rss:.0f}"
    )
