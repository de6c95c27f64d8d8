"""Distributed.jl through Jupyter: workers start, print into the cell, stop on interrupt, die
with their kernel, however it dies.

Workers run detached (their own session), so once their master Julia is gone they are no
longer descendants of this test: their pids are recorded while they run and checked with psutil,
and any survivor is killed in teardown.
"""

from __future__ import annotations

import os
import queue
import re
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from .clients import collect, drain, execute, result_of, text_of
from .conftest import (
    SHARED_KERNEL_PIDS,
    START_TIMEOUT,
    StartSignal,
    julia_of,
    start_kernel,
    stop_kernel,
)

pytestmark = pytest.mark.e2e

ADDPROCS_TIMEOUT = 60.0  # addprocs(2) takes ~2 s here; a loaded machine may need much more
CELL_TIMEOUT = 30.0
INTERRUPT_REPLY_WITHIN = 5.0
WORKERS_GONE_WITHIN = 10.0
# After a SIGKILL of Julia: the lifeline's SIGTERM, its 5 s of grace (lifeline.jl
# LIFELINE_GRACE), then SIGKILL, on a loaded machine.
LIFELINE_ENDS_WITHIN = 30.0
ADD_WORKERS = "using Distributed; addprocs(2); nworkers()"
WORKER_PIDS = "[remotecall_fetch(getpid, w) for w in workers()]"
WORKER_STATES = (
    "[(w.id, w.state, isdefined(w, :r_stream) && isopen(w.r_stream)) "
    "for w in Distributed.PGRP.workers if w isa Distributed.Worker]"
)


def _worker_processes(kc: BlockingKernelClient) -> list[psutil.Process]:
    """The running workers, as psutil handles (which survive pid reuse checks)."""
    reply, outputs = execute(kc, WORKER_PIDS, CELL_TIMEOUT)
    assert reply["content"]["status"] == "ok", reply["content"]
    text = result_of(outputs) or ""
    pids = [int(n) for n in re.findall(r"^\s*(\d+)\s*$", text, re.MULTILINE)]
    assert len(pids) == 2, text
    procs = [psutil.Process(pid) for pid in pids]
    for p in procs:
        assert "--worker" in p.cmdline(), p.cmdline()
    return procs


def sigint_a_running_cell(kc: BlockingKernelClient, julia: int) -> None:
    """SIGINT Julia's process group while a cell runs, as the supervisor's escalation does, and
    wait for that cell to end interrupted.

    Sent while Julia is idle, such a SIGINT has no cell to end, and Julia may take it late: still
    busy in Distributed's tasks after a pmap, it took 2 of 25 only once the next cell ran, which
    then ended interrupted (fresh clone A of 9328f3d; `kill -INT` beside the supervisor's own
    SIGINTs, which a SYN round trip settles before the next cell, supervisor/execution_queue.py
    `_sync`).
    """
    msg_id = kc.execute('println("jjk-waiting"); sleep(600)')
    deadline = time.monotonic() + CELL_TIMEOUT
    printed = ""
    while "jjk-waiting" not in printed:
        try:
            msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"the waiting cell printed nothing within {CELL_TIMEOUT:g} s")
        if msg["parent_header"].get("msg_id") == msg_id and msg["msg_type"] == "stream":
            printed += msg["content"]["text"]
    os.killpg(julia, signal.SIGINT)
    reply, _ = collect(kc, msg_id, CELL_TIMEOUT)
    assert reply["content"].get("ename") == "InterruptException", reply["content"]


def _lifelines(julia: int) -> list[psutil.Process]:
    """The local lifeline loops (julia/JKernel/src/lifeline.jl) that this Julia started."""
    return [
        p
        for p in psutil.Process(julia).children()
        if p.name() == "sh" and any("while read" in a for a in p.cmdline())
    ]


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``procs`` still running (a zombie has ended)."""
    found = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def _kill_survivors(procs: list[psutil.Process]) -> list[int]:
    survivors = []
    for p in procs:
        try:
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                survivors.append(p.pid)
                p.kill()
        except psutil.NoSuchProcess:
            continue
    return survivors


def assert_everywhere_prints(kc: BlockingKernelClient) -> None:
    """`@everywhere println` on the master and workers 2 and 3 shows up in the cell's stdout."""
    drain(kc)
    reply, outputs = execute(kc, '@everywhere println("hello from ", myid())', CELL_TIMEOUT)
    assert reply["content"]["status"] == "ok"
    out = text_of(outputs)
    assert "hello from 1\n" in out
    assert "From worker 2:\thello from 2" in out
    assert "From worker 3:\thello from 3" in out


def _execute_or_explain(
    km: KernelManager, kc: BlockingKernelClient, code: str, timeout: float = CELL_TIMEOUT
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """execute(), but a cell that hangs is interrupted, and where it waited goes into the
    failure. (Twice in ~50 runs, in whole-suite runs on a loaded machine and never in a loop,
    the first remotecall_fetch after an interrupted pmap hung until a later SIGINT; this
    records where, should it come back.)"""
    msg_id = kc.execute(code)
    try:
        return collect(kc, msg_id, timeout)
    except queue.Empty:
        km.interrupt_kernel()
        reply, outputs = collect(kc, msg_id, CELL_TIMEOUT)
        where = "\n".join(reply["content"].get("traceback", []))
        try:  # Distributed's view of its workers (internals, for the record only)
            _, states = execute(kc, WORKER_STATES, CELL_TIMEOUT)
            workers = result_of(states) or text_of(states, "stderr")
        except queue.Empty:
            workers = "(no answer)"
        pytest.fail(
            f"{code!r} hung for {timeout:g} s; interrupted, it was in:\n{where}\n"
            f"stderr: {text_of(outputs, 'stderr')}\nworkers: {workers}"
        )


def _add_workers(kc: BlockingKernelClient) -> list[psutil.Process]:
    reply, outputs = execute(kc, ADD_WORKERS, ADDPROCS_TIMEOUT)
    assert reply["content"]["status"] == "ok", reply["content"]
    assert result_of(outputs) == "2"
    return _worker_processes(kc)


@pytest.fixture(scope="module")
def cluster(
    kernel_env: dict[str, str],
) -> Iterator[tuple[KernelManager, BlockingKernelClient, list[psutil.Process]]]:
    """One kernel whose Julia has two workers, for the tests that keep it running."""
    km, kc = start_kernel()
    pid = km.provisioner.pid if km.provisioner else None
    assert pid is not None
    SHARED_KERNEL_PIDS.add(pid)
    workers: list[psutil.Process] = []
    try:
        workers = _add_workers(kc)
        yield km, kc, workers
    finally:
        stop_kernel(km, kc)
        SHARED_KERNEL_PIDS.discard(pid)
        _, alive = psutil.wait_procs(workers, timeout=WORKERS_GONE_WITHIN)
        _kill_survivors(alive)


def test_addprocs_gives_two_workers(
    cluster: tuple[KernelManager, BlockingKernelClient, list[psutil.Process]],
) -> None:
    """addprocs(2) from a cell works; the workers are Julia processes that answer."""
    _, kc, workers = cluster
    assert all(p.is_running() for p in workers)
    _, outputs = execute(kc, "sort([remotecall_fetch(myid, w) for w in workers()])")
    assert (result_of(outputs) or "").split()[-2:] == ["2", "3"]


def test_worker_output_reaches_the_running_cell(
    cluster: tuple[KernelManager, BlockingKernelClient, list[psutil.Process]],
) -> None:
    """println on every process (and in a remotecall) shows up in that cell's stdout."""
    _, kc, _ = cluster
    assert_everywhere_prints(kc)
    _, outputs = execute(
        kc, 'remotecall_fetch(() -> (println("remote hi"); myid()), 2)', CELL_TIMEOUT
    )
    assert "From worker 2:\tremote hi" in text_of(outputs)
    assert result_of(outputs) == "2"


def test_interrupting_pmap_stops_it_and_keeps_the_cluster(
    cluster: tuple[KernelManager, BlockingKernelClient, list[psutil.Process]],
    start_signal: StartSignal,
) -> None:
    """interrupt_request during pmap replies InterruptException within 5 s; pmap hands out no
    more work; the session, its variables and both workers survive."""
    km, kc, workers = cluster
    drain(kc)
    execute(kc, "keep = 42; @everywhere done_items = Ref(0)")
    # The worker that finished item 1 signals: pmap is under way and has done some work.
    msg_id = kc.execute(
        f"pmap(x -> (sleep(0.3); Main.done_items[] += 1; x == 1 && {start_signal.julia}; x), 1:200)"
    )
    start_signal.wait(CELL_TIMEOUT)
    t0 = time.perf_counter()
    km.interrupt_kernel()
    reply, outputs = collect(kc, msg_id, CELL_TIMEOUT)
    latency = time.perf_counter() - t0
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "InterruptException", reply["content"]
    assert latency < INTERRUPT_REPLY_WITHIN, f"{latency:.1f} s to stop pmap"
    count = "sum(remotecall_fetch(() -> Main.done_items[], w) for w in workers())"
    before = int(result_of(_execute_or_explain(km, kc, count)[1]) or "-1")
    assert 0 < before < 200
    time.sleep(2.0)  # two workers at 0.3 s per item would do ~13 more items if pmap went on
    after = int(result_of(_execute_or_explain(km, kc, count)[1]) or "-1")
    assert after - before <= 2, f"pmap kept going after the interrupt: {before} -> {after}"
    _, outputs = _execute_or_explain(km, kc, "(nworkers(), remotecall_fetch(myid, 2), keep)")
    assert result_of(outputs) == "(2, 2, 42)"
    assert all(p.is_running() for p in workers)
    print(f"\n[distributed] pmap interrupted in {latency * 1000:.0f} ms, {before} items done")


def test_interrupting_a_computing_pmap(
    cluster: tuple[KernelManager, BlockingKernelClient, list[psutil.Process]],
    start_signal: StartSignal,
) -> None:
    """A pmap whose workers compute (no sleep) stops just as fast; the cluster still answers."""
    km, kc, _ = cluster
    drain(kc)
    execute(kc, "keep = 42")
    code = (
        f"pmap(x -> (x == 1 && {start_signal.julia}; s = 0.0; for i in 1:10^8; s += sin(i); "
        "end; s), 1:200)"
    )
    msg_id = kc.execute(code)
    start_signal.wait(CELL_TIMEOUT)
    t0 = time.perf_counter()
    km.interrupt_kernel()
    reply, _ = collect(kc, msg_id, CELL_TIMEOUT)
    latency = time.perf_counter() - t0
    assert reply["content"]["ename"] == "InterruptException", reply["content"]
    assert latency < INTERRUPT_REPLY_WITHIN, f"{latency:.1f} s to stop pmap"
    # Each worker may finish the item it holds (~1 s of compute) before answering.
    _, outputs = _execute_or_explain(km, kc, "(nworkers(), remotecall_fetch(myid, 3), keep)")
    assert result_of(outputs) == "(2, 3, 42)"


# What a SIGINT landing in a task inside Distributed's send_msg_ leaves (seen with a pmap
# feeder compiling its call's serializer): the message's first part in the worker stream's
# write buffer. Here a serialize method throws the InterruptException midway, as the SIGINT did.
TEAR_A_SEND = (
    "import Serialization; struct TornSend end; "
    "Serialization.serialize(::Serialization.AbstractSerializer, ::TornSend) = "
    "throw(InterruptException()); "
    "try remotecall_fetch(x -> x, 2, (1, TornSend(), 2)) catch e; e end"
)


def test_a_call_after_a_send_an_interrupt_tore_is_answered(
    cluster: tuple[KernelManager, BlockingKernelClient, list[psutil.Process]],
) -> None:
    """The worker's next call is answered, and the cell says what was dropped. Left in the
    buffer, the fragment went out ahead of the next message, which the worker then skipped on
    its way to the next boundary: that call was never answered (a hang, 1 in ~4
    module runs beside a whole-suite run)."""
    km, kc, _ = cluster
    drain(kc)
    reply, outputs = execute(kc, TEAR_A_SEND, CELL_TIMEOUT)
    assert reply["content"]["status"] == "ok", reply["content"]
    assert "InterruptException" in (result_of(outputs) or ""), outputs
    reply, outputs = _execute_or_explain(km, kc, "remotecall_fetch(myid, 2)")
    assert result_of(outputs) == "2"
    assert "cut a message to worker 2 short" in text_of(outputs, "stderr")
    _, outputs = _execute_or_explain(km, kc, "remotecall_fetch(myid, 2)")
    assert result_of(outputs) == "2"


def test_a_signalled_interrupt_keeps_the_local_workers_and_their_lifeline(
    cluster: tuple[KernelManager, BlockingKernelClient, list[psutil.Process]],
) -> None:
    """A SIGINT to Julia's process group (the supervisor's interrupt when Julia does not
    answer its INT frame) leaves the lifeline's sh running, so the workers stay: the lifeline
    ends them only when Julia ends."""
    km, kc, workers = cluster
    drain(kc)
    julia = julia_of(km)
    lifelines = _lifelines(julia)
    assert len(lifelines) == 1, [p.cmdline() for p in psutil.Process(julia).children()]
    sigint_a_running_cell(kc, julia)
    # A cell's round trip to both workers: by its end a sh the SIGINT reached has ended and
    # SIGTERMed the workers.
    after = _worker_processes(kc)
    assert _alive(lifelines) == lifelines, "the SIGINT ended the lifeline's sh"
    assert [p.pid for p in after] == [p.pid for p in workers]
    assert _alive(workers) == workers


# ---- workers die with their kernel ----


def _own_cluster(
    kernel_env: dict[str, str],
) -> tuple[KernelManager, BlockingKernelClient, list[psutil.Process]]:
    km, kc = start_kernel()
    try:
        return km, kc, _add_workers(kc)
    except BaseException:
        stop_kernel(km, kc)
        raise


def test_shutdown_request_leaves_no_worker(kernel_env: dict[str, str]) -> None:
    """After a shutdown_request the kernel, its Julia and both workers are gone within 10 s."""
    km, kc, workers = _own_cluster(kernel_env)
    try:
        msg_id = kc.shutdown()
        reply = kc.get_control_msg(timeout=CELL_TIMEOUT)
        assert reply["parent_header"]["msg_id"] == msg_id
        assert reply["msg_type"] == "shutdown_reply"
        t0 = time.perf_counter()
        _, alive = psutil.wait_procs(workers, timeout=WORKERS_GONE_WITHIN)
        assert not alive, f"workers alive after shutdown: {[p.pid for p in alive]}"
        print(f"\n[distributed] workers gone {time.perf_counter() - t0:.2f} s after shutdown")
    finally:
        stop_kernel(km, kc)
        survivors = _kill_survivors(workers)
    assert not survivors


def test_restart_kernel_leaves_no_worker(kernel_env: dict[str, str]) -> None:
    """KernelManager.restart_kernel: the old workers are gone within 10 s; the new kernel runs."""
    km, kc, workers = _own_cluster(kernel_env)
    try:
        km.restart_kernel()
        t0 = time.perf_counter()
        _, alive = psutil.wait_procs(workers, timeout=WORKERS_GONE_WITHIN)
        assert not alive, f"workers alive after restart: {[p.pid for p in alive]}"
        print(f"\n[distributed] workers gone {time.perf_counter() - t0:.2f} s after restart")
        kc.wait_for_ready(timeout=START_TIMEOUT)
        drain(kc)
        assert result_of(execute(kc, "isdefined(Main, :Distributed)")[1]) == "false"
    finally:
        stop_kernel(km, kc)
        survivors = _kill_survivors(workers)
    assert not survivors


def test_sigkilled_julia_ends_busy_local_workers(
    kernel_env: dict[str, str], tmp_path: Path
) -> None:
    """Julia's process group SIGKILLed (the supervisor's kill_now and _kill, the OOM killer)
    while its local workers compute without yielding: no Julia code runs at its death and the
    workers never look at their master's socket again, yet both end, and so does the lifeline
    loop that ends them (julia/JKernel/src/lifeline.jl). One worker is stopped (SIGSTOP)
    first, so that SIGTERM cannot end it and the lifeline must escalate."""
    km, kc, workers = _own_cluster(kernel_env)
    lifelines: list[psutil.Process] = []
    try:
        julia = julia_of(km)
        # Each worker writes its marker, then spins without a yield point: once both markers
        # exist, neither worker runs the task that exits on its master's EOF.
        spin = (
            f'for w in workers(); @spawnat w (touch("{tmp_path}/spin-$(myid())"); '
            "while true; end); end"
        )
        reply, _ = execute(kc, spin, CELL_TIMEOUT)
        assert reply["content"]["status"] == "ok", reply["content"]
        deadline = time.monotonic() + CELL_TIMEOUT
        while len(list(tmp_path.glob("spin-*"))) < 2 and time.monotonic() < deadline:
            time.sleep(0.05)
        assert sorted(p.name for p in tmp_path.glob("spin-*")) == ["spin-2", "spin-3"]
        lifelines = _lifelines(julia)
        workers[-1].suspend()
        t0 = time.perf_counter()
        os.killpg(julia, signal.SIGKILL)
        _, alive = psutil.wait_procs(workers + lifelines, timeout=LIFELINE_ENDS_WITHIN)
        gone_s = time.perf_counter() - t0
        assert not alive, f"still running after SIGKILL of Julia: {[p.pid for p in alive]}"
        assert len(lifelines) == 1, "no lifeline loop, or more than one, was running"
    finally:
        stop_kernel(km, kc)
        survivors = _kill_survivors(workers + lifelines)
    assert not survivors
    print(f"\n[distributed] busy and stopped local workers gone {gone_s:.2f} s after SIGKILL")
