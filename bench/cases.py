"""The seven side-by-side measurements: each returns table rows and its raw samples.

Every case measures julia-supervised and its baseline in the same run, interleaving the two
where it can so that the machine's noise falls on both alike.
"""

from __future__ import annotations

import asyncio
import math
import os
import subprocess
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import psutil

from jutul_jkernel.streams import FLUSH_BYTES, FLUSH_DELAY
from jutul_jkernel.supervisor import JuliaSupervisor

from .harness import JULIA, PYTHON, BenchError, CellRun, JupyterEnv, Kernel, run_wall
from .report import Row, ratio_target, summary, value_target

JULIA_EXE = "julia"


@dataclass(frozen=True)
class Plan:
    """How many repetitions each case makes: the full run, or a CI-sized quick one."""

    roundtrip_runs: int = 200
    roundtrip_warmup: int = 20
    throughput_runs: int = 5
    startup_runs: int = 7
    breakdown_runs: int = 5
    interrupt_runs: int = 10
    escalation_runs: int = 3
    restart_runs: int = 5
    memory_bytes: int = 1 << 30
    memory_runs: int = 2
    persistent_passes: int = 3
    profile_cells: int = 600
    quick: bool = False


QUICK = Plan(
    roundtrip_runs=40,
    roundtrip_warmup=10,
    throughput_runs=2,
    startup_runs=3,
    breakdown_runs=2,
    interrupt_runs=3,
    escalation_runs=1,
    restart_runs=2,
    memory_bytes=1 << 27,
    memory_runs=1,
    persistent_passes=1,
    profile_cells=200,
    quick=True,
)

Result = tuple[list[Row], dict[str, Any]]


# ---- shared helpers ----


def settle(
    k: Kernel, window: float = 1.0, cpu_limit: float = 0.015, timeout: float = 30.0
) -> float:
    """Wait until the kernel and its Julia use < ``cpu_limit`` CPU seconds per ``window``.

    julia-supervised compiles its error and display paths in steps while idle; a measurement
    that starts during those steps waits behind one. Returns the seconds waited.
    """
    t0 = time.monotonic()

    def cpu() -> float:
        total = 0.0
        for p in [psutil.Process(k.pid), *k.julia_processes()]:
            try:
                c = p.cpu_times()
                total += c.user + c.system
            except psutil.NoSuchProcess:
                continue
        return total

    prev = cpu()
    while time.monotonic() - t0 < timeout:
        time.sleep(window)
        cur = cpu()
        if cur - prev < cpu_limit:
            break
        prev = cur
    return time.monotonic() - t0


def julia_e(
    code: str, *, stdout: Any = subprocess.PIPE, timeout: float = 300.0
) -> tuple[float, str, str]:
    """Run ``julia --startup-file=no -e code``; return wall time, stdout, stderr."""
    t0 = time.perf_counter()
    done = subprocess.run(
        [JULIA_EXE, "--startup-file=no", "-e", code],
        stdout=stdout,
        stderr=subprocess.PIPE,
        text=True,
        timeout=timeout,
        check=False,
    )
    took = time.perf_counter() - t0
    if done.returncode != 0:
        msg = f"julia -e {code[:60]!r}... exited {done.returncode}: {done.stderr[-1500:]}"
        raise BenchError(msg)
    return took, done.stdout or "", done.stderr


def bare_julia(runs: int) -> list[float]:
    return [julia_e("nothing")[0] for _ in range(runs)]


# ---- 1. round trip ----


def roundtrip(env: JupyterEnv, plan: Plan) -> Result:
    """execute_request -> reply and idle for ``1+1``, interleaved in blocks of 20."""
    samples: dict[str, dict[str, list[float]]] = {}
    with Kernel(env, JULIA) as j, Kernel(env, PYTHON) as p:
        j.start()
        p.start()
        settle(j)
        kernels = (j, p)
        for k in kernels:
            samples[k.label] = {"done": [], "reply": [], "idle": []}
            for _ in range(plan.roundtrip_warmup):
                k.check("1+1", "2")
        block = 20
        for start in range(0, plan.roundtrip_runs, block):
            for k in kernels:
                for _ in range(min(block, plan.roundtrip_runs - start)):
                    r = k.check("1+1", "2")
                    s = samples[k.label]
                    s["done"].append(r.t_done)
                    s["reply"].append(r.t_reply)
                    s["idle"].append(r.t_idle)
    sup = asyncio.run(_supervisor_roundtrip(plan.roundtrip_runs, plan.roundtrip_warmup))
    js, ps = (summary(samples[k]["done"]) for k in ("julia-supervised", "ipykernel"))
    sups = summary(sup)
    rows = [
        ratio_target(
            Row(
                "1. round trip",
                "1+1: execute_request -> reply + idle, median",
                "ms",
                js["median"],
                ps["median"],
                "ipykernel",
            ),
            0.5,
        ),
        Row("1. round trip", "1+1: max", "ms", js["max"], ps["max"], "ipykernel"),
        Row("1. round trip", "1+1: p90", "ms", js["p90"], ps["p90"], "ipykernel"),
        Row(
            "1. round trip",
            "1+1 through JuliaSupervisor alone (no Jupyter), median",
            "ms",
            sups["median"],
            js["median"],
            "julia-supervised via Jupyter",
            note="the supervisor+Julia share of a round trip",
        ),
    ]
    data = {
        "samples": samples,
        "summary": {"julia-supervised": js, "ipykernel": ps, "supervisor_alone": sups},
    }
    return rows, data


async def _supervisor_roundtrip(runs: int, warmup: int) -> list[float]:
    out: list[float] = []
    async with JuliaSupervisor() as sup:
        for _ in range(warmup):
            await sup.execute("1+1")
        await asyncio.sleep(4)  # let its idle warm-up steps pass
        for _ in range(runs):
            t0 = time.perf_counter()
            r = await sup.execute("1+1")
            out.append(time.perf_counter() - t0)
            if r.text != "2":
                msg = f"JuliaSupervisor: 1+1 gave {r.text!r}"
                raise BenchError(msg)
    return out


# ---- 2. output throughput ----

LINES = 200_000
BLOB = 20_000_000
_CASES = {
    "lines": {
        JULIA: "for i in 1:200_000; println(lpad(i, 99)); end",
        PYTHON: "for i in range(200000): print(str(i).rjust(99))",
        "floor": "for i in 1:200_000; println(lpad(i, 99)); end",
        "floor_devnull": "for i in 1:200_000; println(devnull, lpad(i, 99)); end",
        "what": "20 MB as 200,000 println lines",
    },
    "blob": {
        JULIA: 'print("x"^20_000_000)',
        PYTHON: 'print("x"*20_000_000, end="")',
        "floor": 'print("x"^20_000_000)',
        "floor_devnull": 'print(devnull, "x"^20_000_000)',
        "what": "20 MB in one print",
    },
}


def _expected(case: str, name: str) -> str:
    if case == "blob":
        return "x" * BLOB
    first = 1 if name == JULIA else 0
    return "".join(f"{i:>99}\n" for i in range(first, first + LINES))


def message_bound(nbytes: int, seconds: float) -> int:
    """Most stream messages the coalescer should send: one per FLUSH_BYTES or FLUSH_DELAY."""
    return math.ceil(nbytes / FLUSH_BYTES) + math.ceil(seconds / FLUSH_DELAY) + 2


def _floor(code: str, runs: int) -> dict[str, Any]:
    """Time ``code`` inside one Julia process writing to /dev/null: cold, then warm runs."""
    script = (
        "ts = Float64[]\n"
        f"for r in 1:{runs + 1}\n"
        f"    push!(ts, @elapsed begin {code} end)\n"
        "end\n"
        'print(stderr, join(ts, " "))\n'
    )
    wall, _, err = julia_e(script, stdout=subprocess.DEVNULL)
    ts = [float(x) for x in err.strip().split()[-(runs + 1) :]]
    return {"cold": ts[0], "warm": summary(ts[1:]), "process_wall": wall}


def _capture_floor(code: str, runs: int, buffered: bool) -> dict[str, Any]:
    """``code`` with stdout redirected into an in-process pipe that one task drains.

    What server.jl's capture costs before any socket or Python: Julia's writes to a pipe
    endpoint, the task switches to the reader, its reads; optionally with buffered writes.
    """
    buffering = "Base.buffer_writes(wr, 64 * 1024)\n" if buffered else ""
    script = (
        "rd, wr = redirect_stdout()\n" + buffering + "got = Ref(0)\n"
        "pump = @async while !eof(rd); got[] += length(readavailable(rd)); end\n"
        "ts = Float64[]\n"
        f"for r in 1:{runs + 1}\n"
        "    before = got[]\n"
        f"    t = @elapsed begin begin {code} end; flush(wr)\n"
        f"        while got[] - before < {BLOB}; yield(); end end\n"
        "    push!(ts, t)\n"
        "end\n"
        'print(stderr, join(ts, " "))\n'
    )
    _, _, err = julia_e(script)
    ts = [float(x) for x in err.strip().split()[-(runs + 1) :]]
    return {"cold": ts[0], "warm": summary(ts[1:])}


async def _supervisor_prints(code: str, runs: int) -> list[float]:
    """The cell through JuliaSupervisor alone, its output bytes only counted."""
    out: list[float] = []
    async with JuliaSupervisor() as sup:
        got = [0]

        def count(stream: str, data: bytes) -> None:
            got[0] += len(data)

        await sup.execute(code, count)
        await asyncio.sleep(4)  # its idle warm-up
        for _ in range(runs):
            got[0] = 0
            t0 = time.perf_counter()
            await sup.execute(code, count)
            out.append(time.perf_counter() - t0)
            if got[0] != BLOB:
                msg = f"JuliaSupervisor: {got[0]} bytes of output, not {BLOB}"
                raise BenchError(msg)
    return out


def throughput(env: JupyterEnv, plan: Plan) -> Result:
    rows: list[Row] = []
    data: dict[str, Any] = {}
    with Kernel(env, JULIA) as j, Kernel(env, PYTHON) as p:
        j.start()
        p.start()
        settle(j)
        for case, spec in _CASES.items():
            runs: dict[str, list[CellRun]] = {j.label: [], p.label: []}
            verified: dict[str, list[bool]] = {j.label: [], p.label: []}
            expected = {k.label: _expected(case, k.name) for k in (j, p)}
            for i in range(plan.throughput_runs + 1):  # run 0 is the cold one
                for k in (j, p):
                    r = k.run(str(spec[k.name]), timeout=600)
                    if r.status != "ok":
                        msg = f"{k.label}: {case} failed: {r.reply['content']}"
                        raise BenchError(msg)
                    ok = r.text == expected[k.label]
                    r.text = None  # 20 MB each: keep only what was measured
                    runs[k.label].append(r)
                    verified[k.label].append(ok)
                    if i == 0 and k is j:
                        settle(k)
            floor = _floor(str(spec["floor"]), plan.throughput_runs)
            floor_dn = _floor(str(spec["floor_devnull"]), plan.throughput_runs)
            capture = _capture_floor(str(spec["floor"]), plan.throughput_runs, buffered=False)
            capture_b = _capture_floor(str(spec["floor"]), plan.throughput_runs, buffered=True)
            alone = summary(asyncio.run(_supervisor_prints(str(spec[JULIA]), plan.throughput_runs)))
            jt = summary([r.t_done for r in runs[j.label][1:]])
            pt = summary([r.t_done for r in runs[p.label][1:]])
            jm = summary([r.stream_messages for r in runs[j.label][1:]])
            pm = summary([r.stream_messages for r in runs[p.label][1:]])
            nbytes = len(expected[j.label])
            bound = message_bound(nbytes, jt["max"])
            what = str(spec["what"])
            sec = "2. throughput"
            all_ok = all(verified[j.label]) and all(verified[p.label])
            rows += [
                ratio_target(
                    Row(
                        sec,
                        f"{what}: time to idle, median",
                        "s",
                        jt["median"],
                        pt["median"],
                        "ipykernel",
                    ),
                    1.0,
                ),
                Row(sec, f"{what}: time to idle, max", "s", jt["max"], pt["max"], "ipykernel"),
                ratio_target(
                    Row(
                        sec,
                        f"{what}: vs Julia floor (stdout -> /dev/null, warm)",
                        "s",
                        jt["median"],
                        floor["warm"]["median"],
                        "floor",
                    ),
                    3.0,
                ),
                Row(
                    sec,
                    f"{what}: vs Julia print to devnull (formatting only, warm)",
                    "s",
                    jt["median"],
                    floor_dn["warm"]["median"],
                    "devnull",
                ),
                Row(
                    sec,
                    f"{what}: through JuliaSupervisor alone (no Jupyter), median",
                    "s",
                    alone["median"],
                    jt["median"],
                    "julia-supervised via Jupyter",
                ),
                Row(
                    sec,
                    f"{what}: Julia into an in-process pipe + reader task, warm",
                    "s",
                    capture["warm"]["median"],
                    floor["warm"]["median"],
                    "floor",
                    note=f"with 64 KiB buffered writes: {capture_b['warm']['median']:.3f} s",
                ),
                Row(
                    sec,
                    f"{what}: first run (compiles the loop)",
                    "s",
                    runs[j.label][0].t_done,
                    runs[p.label][0].t_done,
                    "ipykernel",
                    note=f"floor cold {floor['cold']:.2f} s",
                ),
                value_target(
                    Row(
                        sec,
                        f"{what}: stream messages, median",
                        "n",
                        jm["median"],
                        pm["median"],
                        "ipykernel",
                    ),
                    bound,
                    f"<= {bound} (64 KiB or 50 ms each)",
                ),
                Row(
                    sec,
                    f"{what}: every byte, in order",
                    "",
                    "yes" if all(verified[j.label]) else "NO",
                    "yes" if all(verified[p.label]) else "NO",
                    "ipykernel",
                    target="all runs",
                    met=all_ok,
                ),
                Row(
                    sec,
                    f"{what}: MiB/s to the client, median",
                    "MiB/s",
                    nbytes / jt["median"] / (1 << 20),
                    nbytes / pt["median"] / (1 << 20),
                    "ipykernel",
                ),
            ]
            data[case] = {
                "julia": {
                    "time": jt,
                    "messages": jm,
                    "verified": verified[j.label],
                    "cold": runs[j.label][0].t_done,
                },
                "python": {
                    "time": pt,
                    "messages": pm,
                    "verified": verified[p.label],
                    "cold": runs[p.label][0].t_done,
                },
                "floor_stdout_devnull": floor,
                "floor_print_devnull": floor_dn,
                "capture_pipe": capture,
                "capture_pipe_buffered": capture_b,
                "supervisor_alone": alone,
                "bytes": nbytes,
                "message_bound": bound,
            }
    starts = bare_julia(3 if plan.quick else 5)
    rows.append(
        Row(
            "2. throughput",
            "Julia process start (julia -e nothing), median",
            "s",
            summary(starts)["median"],
            note="not included in the floor figures",
        )
    )
    data["julia_process_start"] = summary(starts)
    return rows, data


# ---- 3. start-up ----


def _cpu_seconds(k: Kernel) -> float:
    """CPU (user + system) the kernel and its Julia have used so far: immune to the load."""
    total = 0.0
    for p in [psutil.Process(k.pid), *k.julia_processes()]:
        c = p.cpu_times()
        total += c.user + c.system + c.children_user + c.children_system
    return total


def start_once(env: JupyterEnv, name: str) -> dict[str, float]:
    """start_kernel -> first kernel_info_reply -> first cell result, in seconds."""
    k = Kernel(env, name)
    try:
        t0 = time.perf_counter()
        k.launch()
        kc = k._client()
        k._wait_shell(kc.kernel_info(), 60)
        t_info = time.perf_counter() - t0
        k.wait_iopub(60)
        r = k.check("1+1", "2", timeout=60)
        t_first = time.perf_counter() - t0
        cpu = _cpu_seconds(k)
        return {"kernel_info": t_info, "first_result": t_first, "cell": r.t_done, "cpu": cpu}
    finally:
        k.stop()


def startup(env: JupyterEnv, plan: Plan) -> Result:
    for name in (JULIA, PYTHON):
        start_once(env, name)  # cold caches, IPython's profile directory: not measured
    got: dict[str, list[dict[str, float]]] = {JULIA: [], PYTHON: []}
    bare: list[float] = []
    bare_cpu: list[float] = []
    for _ in range(plan.startup_runs):
        for name in (JULIA, PYTHON):
            got[name].append(start_once(env, name))
        before = psutil.Process().cpu_times()
        bare.append(julia_e("nothing")[0])
        after = psutil.Process().cpu_times()
        bare_cpu.append(
            after.children_user
            + after.children_system
            - before.children_user
            - before.children_system
        )
    metrics = ("kernel_info", "first_result", "cpu")
    js = {m: summary([g[m] for g in got[JULIA]]) for m in metrics}
    ps = {m: summary([g[m] for g in got[PYTHON]]) for m in metrics}
    bs = summary(bare)
    sec = "3. start-up"
    limit = bs["median"] + 0.3
    rows = [
        Row(
            sec,
            "start_kernel -> kernel_info_reply, median",
            "s",
            js["kernel_info"]["median"],
            ps["kernel_info"]["median"],
            "ipykernel",
        ),
        Row(
            sec,
            "start_kernel -> first result (1+1), median",
            "s",
            js["first_result"]["median"],
            ps["first_result"]["median"],
            "ipykernel",
        ),
        Row(
            sec,
            "start_kernel -> first result, max",
            "s",
            js["first_result"]["max"],
            ps["first_result"]["max"],
            "ipykernel",
        ),
        Row(
            sec,
            "CPU used by kernel + Julia up to the first result, median",
            "s",
            js["cpu"]["median"],
            ps["cpu"]["median"],
            "ipykernel",
            note=f"bare julia -e nothing: {summary(bare_cpu)['median']:.2f} s CPU",
        ),
        value_target(
            Row(
                sec,
                "first result vs bare julia -e nothing (median)",
                "s",
                js["first_result"]["median"],
                bs["median"],
                "bare julia",
            ),
            limit,
            f"<= bare + 0.3 s ({limit:.2f} s)",
        ),
    ]
    data = {
        "julia": got[JULIA],
        "python": got[PYTHON],
        "bare_julia": bs,
        "bare_julia_cpu": summary(bare_cpu),
        "summary": {"julia": js, "python": ps},
    }
    return rows, data


# ---- 4. interrupts ----

_INTERRUPTS = {
    "allocating loop": (
        "while true; global junk = [1, 2, 3]; end",
        "while True:\n    junk = [1, 2, 3]",
    ),
    "sleep(1000)": ("sleep(1000)", "time.sleep(1000)"),
    "I/O wait: read(`sleep 1000`)": (
        "read(`sleep 1000`)",
        'subprocess.check_output(["sleep", "1000"])',
    ),
}
_ESCALATION = (
    "function spin(); x = 0.0; while true; x += 1.0; end; end; spin()",
    "x = 0.0\nwhile True:\n    x += 1.0",
)
_RUNNING_BEFORE_INTERRUPT = 0.3


def _interrupt_once(k: Kernel, code: str) -> tuple[float, str]:
    msg_id, _ = k.send(code)
    k.wait_busy(msg_id)
    time.sleep(_RUNNING_BEFORE_INTERRUPT)
    t0 = time.perf_counter()
    k.interrupt()
    r = k.collect(msg_id, t0, timeout=_NO_REPLY)
    k.kill_descendants_named("sleep")
    return r.t_reply, f"{r.reply['content'].get('ename', r.status)}|{r.text or ''}"


_NO_REPLY = 30.0  # an interrupt that gets no reply within this counts as failed


def _fresh(env: JupyterEnv, k: Kernel) -> None:
    """Replace a kernel that failed to answer an interrupt with a new, idle one."""
    env.keep = True  # its log explains the failure
    k.stop()
    k.start()
    k.check("keep = 42" if k.name == JULIA else "import time, subprocess\nkeep = 42")
    settle(k)


def interrupts(env: JupyterEnv, plan: Plan) -> Result:
    rows: list[Row] = []
    data: dict[str, Any] = {}
    sec = "4. interrupt"
    with Kernel(env, JULIA) as j, Kernel(env, PYTHON) as p:
        j.start()
        p.start()
        j.check("keep = 42")
        p.check("import time, subprocess\nkeep = 42")
        waited = settle(j)
        time.sleep(max(0.0, 3.0 - waited))  # idle "a few seconds after start"
        for case, (jcode, pcode) in _INTERRUPTS.items():
            lat: dict[str, list[float]] = {j.label: [], p.label: []}
            how: dict[str, list[str]] = {j.label: [], p.label: []}
            failures: dict[str, int] = {j.label: 0, p.label: 0}
            for _ in range(plan.interrupt_runs):
                for k, code in ((j, jcode), (p, pcode)):
                    try:
                        t, ename = _interrupt_once(k, code)
                    except BenchError as exc:
                        failures[k.label] += 1
                        how[k.label].append(f"no reply: {exc}")
                        lat[k.label].append(_NO_REPLY)
                        _fresh(env, k)
                        continue
                    lat[k.label].append(t)
                    how[k.label].append(ename)
            kept = j.check("keep").result == "42"
            js, ps = summary(lat[j.label]), summary(lat[p.label])
            bad = [h for h in how[j.label] if not h.startswith("InterruptException")]
            notes = []
            if failures[j.label]:
                notes.append(
                    f"{failures[j.label]}/{plan.interrupt_runs} got no reply in "
                    f"{_NO_REPLY:.0f} s (counted as {_NO_REPLY:.0f} s)"
                )
            if not kept:
                notes.append("state lost")
            if bad and not failures[j.label]:
                notes.append(f"ended as {bad[0][:40]!r}")
            rows += [
                value_target(
                    Row(
                        sec,
                        f"{case}: interrupt -> reply, median",
                        "ms",
                        js["median"],
                        ps["median"],
                        "ipykernel",
                        note="; ".join(notes),
                    ),
                    0.1,
                    "<= 100 ms",
                ),
                value_target(
                    Row(sec, f"{case}: max", "ms", js["max"], ps["max"], "ipykernel"),
                    1.0,
                    "<= 1 s",
                ),
            ]
            data[case] = {
                "julia": js,
                "python": ps,
                "how": how,
                "state_kept": kept,
                "failures": failures,
            }
        lat = {j.label: [], p.label: []}
        notes: list[str] = []
        for _ in range(plan.escalation_runs):
            for k, code in ((j, _ESCALATION[0]), (p, _ESCALATION[1])):
                try:
                    t, how_ = _interrupt_once(k, code)
                except BenchError as exc:
                    t, how_ = _NO_REPLY, f"no reply: {exc}"
                    _fresh(env, k)
                lat[k.label].append(t)
                if k is j:
                    notes.append(how_)
        js, ps = summary(lat[j.label]), summary(lat[p.label])
        told = all("[jutul-jkernel]" in n for n in notes)
        rows += [
            Row(
                sec,
                "escalation (float spin, no safepoint): median",
                "ms",
                js["median"],
                ps["median"],
                "ipykernel",
                note=f"user told: {told}",
            ),
            Row(sec, "escalation: max", "ms", js["max"], ps["max"], "ipykernel"),
        ]
        data["escalation"] = {"julia": js, "python": ps, "notes": notes}
    return rows, data


# ---- 5. restart ----


def _restart_once(k: Kernel) -> dict[str, float]:
    km = k._manager()
    k.drain()
    t0 = time.perf_counter()
    km.restart_kernel(now=False)
    t_call = time.perf_counter() - t0
    k.wait_iopub(60)  # the same sockets reconnect: wait for IOPub as after a start
    r = k.check("1+1", "2", timeout=60)
    return {"restart_call": t_call, "first_result": time.perf_counter() - t0, "cell": r.t_done}


def restart(env: JupyterEnv, plan: Plan) -> Result:
    got: dict[str, list[dict[str, float]]] = {JULIA: [], PYTHON: []}
    starts: dict[str, list[float]] = {JULIA: [], PYTHON: []}
    for i in range(plan.restart_runs + 1):
        for name in (JULIA, PYTHON):
            k = Kernel(env, name)
            try:
                t0 = time.perf_counter()
                k.launch()
                k.wait_iopub(60)
                k.check("1+1", "2", timeout=60)
                t_start = time.perf_counter() - t0
                k.check("x = 1")
                time.sleep(0.5)
                once = _restart_once(k)
                if i > 0:  # the first round warms caches
                    starts[name].append(t_start)
                    got[name].append(once)
            finally:
                k.stop()
    js = {m: summary([g[m] for g in got[JULIA]]) for m in ("restart_call", "first_result")}
    ps = {m: summary([g[m] for g in got[PYTHON]]) for m in ("restart_call", "first_result")}
    jstart, pstart = summary(starts[JULIA]), summary(starts[PYTHON])
    sec = "5. restart"
    rows = [
        Row(
            sec,
            "restart_kernel -> next result, median",
            "s",
            js["first_result"]["median"],
            ps["first_result"]["median"],
            "ipykernel",
        ),
        Row(
            sec,
            "restart_kernel -> next result, max",
            "s",
            js["first_result"]["max"],
            ps["first_result"]["max"],
            "ipykernel",
        ),
        Row(
            sec,
            "restart_kernel() call alone (shutdown + launch), median",
            "s",
            js["restart_call"]["median"],
            ps["restart_call"]["median"],
            "ipykernel",
        ),
        Row(
            sec,
            "restart -> result vs start -> result (same kernels), median",
            "s",
            js["first_result"]["median"],
            jstart["median"],
            "julia start-up",
            note=f"ipykernel: {ps['first_result']['median']:.2f} s vs {pstart['median']:.2f} s",
        ),
    ]
    data = {
        "julia": got[JULIA],
        "python": got[PYTHON],
        "start_julia": jstart,
        "start_python": pstart,
    }
    return rows, data


# ---- 6. memory ----


class _RssSampler:
    """Sample kernel and Julia RSS every ``interval`` seconds in a thread; keep the peaks."""

    def __init__(self, k: Kernel, interval: float = 0.1) -> None:
        self.k = k
        self.interval = interval
        self.peak_kernel = self.peak_julia = self.peak_total = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                kern, jl = self.k.rss()
            except (psutil.NoSuchProcess, BenchError):
                return
            self.peak_kernel = max(self.peak_kernel, kern)
            self.peak_julia = max(self.peak_julia, jl)
            self.peak_total = max(self.peak_total, kern + jl)
            self._stop.wait(self.interval)

    def __enter__(self) -> _RssSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


def _idle_rss(k: Kernel) -> tuple[int, int]:
    samples = []
    for _ in range(5):
        samples.append(k.rss())
        time.sleep(0.2)
    kern = sorted(s[0] for s in samples)[2]
    jl = sorted(s[1] for s in samples)[2]
    return kern, jl


def memory(env: JupyterEnv, plan: Plan) -> Result:
    n = plan.memory_bytes // 1024
    codes = {
        JULIA: f's = "x"^1023 * "\\n"; for i in 1:{n}; print(s); end',
        PYTHON: f's = "x"*1023 + "\\n"\nfor i in range({n}): print(s, end="")',
    }
    size = (
        f"{plan.memory_bytes / (1 << 30):g} GiB"
        if plan.memory_bytes >= 1 << 30
        else f"{plan.memory_bytes >> 20} MiB"
    )
    data: dict[str, Any] = {}
    with Kernel(env, JULIA) as j, Kernel(env, PYTHON) as p:
        j.start()
        p.start()
        settle(j)
        time.sleep(1)
        for k in (j, p):
            idle = _idle_rss(k)
            runs = []
            for _ in range(plan.memory_runs):
                with _RssSampler(k) as s:
                    r = k.run(codes[k.name], keep_text=False, timeout=1800)
                if r.status != "ok" or r.stream_bytes != n * 1024:
                    msg = f"{k.label}: streamed {r.stream_bytes} of {n * 1024} bytes ({r.status})"
                    raise BenchError(msg)
                time.sleep(1.0)
                after = _idle_rss(k)
                runs.append(
                    {
                        "peak_kernel": s.peak_kernel,
                        "peak_julia": s.peak_julia,
                        "peak_total": s.peak_total,
                        "after_kernel": after[0],
                        "after_julia": after[1],
                        "time": r.t_done,
                        "messages": r.stream_messages,
                    }
                )
            data[k.label] = {"idle_kernel": idle[0], "idle_julia": idle[1], "runs": runs}
    jd, pd = data[j.label], data[p.label]

    def peak(d: dict[str, Any], key: str) -> int:
        return max(r[key] for r in d["runs"])

    def last(d: dict[str, Any], key: str) -> int:
        return int(d["runs"][-1][key])

    sec = "6. memory"
    rows = [
        Row(
            sec,
            "kernel process RSS, idle",
            "MiB",
            jd["idle_kernel"],
            pd["idle_kernel"],
            "ipykernel",
        ),
        Row(sec, "Julia process RSS, idle", "MiB", jd["idle_julia"]),
        Row(
            sec,
            "kernel + Julia RSS, idle",
            "MiB",
            jd["idle_kernel"] + jd["idle_julia"],
            pd["idle_kernel"],
            "ipykernel",
        ),
        Row(
            sec,
            f"kernel process RSS, peak while streaming {size}",
            "MiB",
            peak(jd, "peak_kernel"),
            peak(pd, "peak_kernel"),
            "ipykernel",
        ),
        Row(sec, f"Julia process RSS, peak while streaming {size}", "MiB", peak(jd, "peak_julia")),
        Row(
            sec,
            f"kernel + Julia RSS, peak while streaming {size}",
            "MiB",
            peak(jd, "peak_total"),
            peak(pd, "peak_total"),
            "ipykernel",
        ),
        Row(
            sec,
            f"kernel process RSS, after {size}",
            "MiB",
            last(jd, "after_kernel"),
            last(pd, "after_kernel"),
            "ipykernel",
        ),
        Row(sec, f"Julia process RSS, after {size}", "MiB", last(jd, "after_julia")),
        Row(
            sec,
            f"time to stream {size}, median",
            "s",
            summary([r["time"] for r in jd["runs"]])["median"],
            summary([r["time"] for r in pd["runs"]])["median"],
            "ipykernel",
            note=f"{jd['runs'][0]['messages']} vs {pd['runs'][0]['messages']} messages",
        ),
    ]
    return rows, data


# ---- 7. what a persistent kernel saves ----

# (code with {s} for a per-pass suffix, the earlier cells a lone `julia -e` needs first)
_CELLS: list[tuple[str, tuple[int, ...]]] = [
    ("f{s}(x) = 2x + 1", ()),
    ("f{s}(20)", (0,)),
    ("v{s} = collect(1:1000);", ()),
    ("sum(v{s})", (2,)),
    ("g{s}(xs) = sum(x -> x^2, xs)", ()),
    ("g{s}(v{s})", (2, 4)),
    ('d{s} = Dict("a" => 1, "b" => 2); d{s}["b"]', ()),
    ("sort([3, 1, 2]; rev = true)", ()),
    ('join(string.(1:5), ", ")', ()),
    ("mapreduce(f{s}, +, 1:10)", (0,)),
]


def persistent(env: JupyterEnv, plan: Plan) -> Result:
    """The ten cells through the kernel vs one `julia -e` per cell (with what it needs)."""
    kernel_passes: list[dict[str, Any]] = []
    script_passes: list[dict[str, Any]] = []
    shown: dict[str, str | None] = {}
    mismatches: list[str] = []
    with Kernel(env, JULIA) as j:
        j.start()
        settle(j)
        for n in range(1 + plan.persistent_passes):
            s = f"_{n}"
            times = []
            t0 = time.perf_counter()
            for code, _needs in _CELLS:
                r = j.check(code.format(s=s))
                times.append(r.t_done)
                shown[code.format(s=s)] = r.result
            kernel_passes.append({"total": time.perf_counter() - t0, "cells": times})
    for n in range(max(1, plan.persistent_passes)):
        s = f"_{n}"
        times = []
        for code, needs in _CELLS:
            prelude = "".join(_CELLS[i][0].format(s=s) + "\n" for i in needs)
            script = f'{prelude}print(repr(MIME("text/plain"), begin {code.format(s=s)} end))'
            t, out, _ = julia_e(script)
            times.append(t)
            seen = shown.get(code.format(s=s))
            if seen is not None and not code.rstrip().endswith(";") and seen != out:
                mismatches.append(f"{code}: kernel {seen!r}, julia -e {out!r}")
        script_passes.append({"total": sum(times), "cells": times})
    first = kernel_passes[0]
    warm = (
        summary([p["total"] for p in kernel_passes[1:]])
        if len(kernel_passes) > 1
        else summary([first["total"]])
    )
    scripted = summary([p["total"] for p in script_passes])
    per_cell_k = summary([t for p in kernel_passes[1:] for t in p["cells"]] or first["cells"])
    per_cell_s = summary([t for p in script_passes for t in p["cells"]])
    sec = "7. persistent"
    rows = [
        Row(
            sec,
            "ten cells through a running kernel, total (median pass)",
            "s",
            warm["median"],
            scripted["median"],
            "one julia -e per cell",
        ),
        Row(
            sec,
            "ten cells, first pass (new code to compile)",
            "s",
            first["total"],
            scripted["median"],
            "one julia -e per cell",
        ),
        Row(
            sec,
            "per cell, median",
            "ms",
            per_cell_k["median"],
            per_cell_s["median"],
            "one julia -e per cell",
        ),
        Row(sec, "saved per ten cells (median pass)", "s", scripted["median"] - warm["median"]),
    ]
    if mismatches:
        rows.append(Row(sec, "outputs differ from julia -e", "", "; ".join(mismatches)[:200]))
    data = {
        "kernel": kernel_passes,
        "julia_e": script_passes,
        "cells": [c[0] for c in _CELLS],
        "mismatches": mismatches,
    }
    return rows, data


CASES: dict[str, Callable[[JupyterEnv, Plan], Result]] = {
    "roundtrip": roundtrip,
    "throughput": throughput,
    "startup": startup,
    "interrupt": interrupts,
    "restart": restart,
    "memory": memory,
    "persistent": persistent,
}


def load() -> tuple[float, float, float]:
    return os.getloadavg()


__all__ = ["CASES", "QUICK", "Plan", "load", "run_wall", "settle"]
