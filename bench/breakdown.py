"""Where julia-supervised's time goes: start-up, a round trip and a printing cell, stage by stage.

These run the probe kernel (:mod:`bench.probe_kernel`) over the instrumented server copy
(:mod:`bench.trace`), so both sides write wall-clock timestamps; the client adds its own. Each
stage is the median, over runs, of the gap between two events. Tracing costs a few tens of
microseconds per event, so absolute round-trip figures here run slightly above section 1's.
Python's import time is measured apart with ``python -X importtime``, Julia's module load and
compilation with a plain ``julia`` process and ``--trace-compile``.
"""

from __future__ import annotations

import asyncio
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

from jutul_jkernel import _resources
from jutul_jkernel.supervisor import JuliaSupervisor

from .cases import JULIA_EXE, Plan, Result, settle
from .harness import PROBE, JupyterEnv, Kernel
from .report import Row, summary
from .trace import Event, instrumented_server, read_events

# (label, from event, to event): names are client_*, the probe's and the server copy's events.
STARTUP_STAGES = [
    (
        "start_kernel -> kernel's first Python line (Popen, interpreter, site)",
        "client_launch",
        "py_main",
    ),
    ("Python imports (ipykernel, IPython, zmq, jutul_jkernel)", "py_main", "imported"),
    ("IPKernelApp.initialize (sockets, threads, kernel object)", "imported", "app_init_end"),
    ("kernel.start -> Julia process spawned", "app_init_end", "exec_returned"),
    ("Julia runtime start-up (exec -> server.jl first line)", "exec_returned", "script_start"),
    ("server.jl: define module JKernel (parse, lower, load)", "script_start", "main_enter"),
    ("main(): connect, redirect, display, interrupt sink", "main_enter", "rdy_send"),
    ("RDY -> handshake accepted in Python", "rdy_send", "accepted"),
    ("handshake -> INF received (Julia compiles json, INF)", "accepted", "inf"),
    ("INF -> kernel_info_reply sent", "inf", "kinfo_end"),
    ("kernel_info_reply -> client", "kinfo_end", "client_kinfo"),
    ("client waits for IOPub to connect", "client_kinfo", "client_exec_send"),
    ("client sends 1+1 -> execute_request handler", "client_exec_send", "exec_req_begin"),
    ("execute_request -> EXE frame sent", "exec_req_begin", "exe_sent"),
    ("EXE sent -> Julia reads it (compiles the listener)", "exe_sent", "exe_recv"),
    ("EXE read -> evaluation starts", "exe_recv", "eval_start"),
    ("run_cell: parse, eval, show (compiled on first use)", "eval_start", "run_cell_done"),
    ("drain output (flush, markers through the pumps)", "run_cell_done", "drained"),
    ("RES sent -> received in Python", "res_send", "res_recv"),
    ("RES -> execute_reply sent", "res_recv", "exec_req_end"),
    ("reply -> client has result and idle", "exec_req_end", "client_first"),
]
# Coarser groups of the same timeline: what a change would have to attack.
STARTUP_GROUPS = [
    ("Python side before Julia is spawned", "client_launch", "exec_returned"),
    ("Julia start -> handshake (RDY)", "exec_returned", "rdy_send"),
    ("handshake -> kernel_info_reply at the client", "rdy_send", "client_kinfo"),
    ("kernel_info_reply -> first result at the client", "client_kinfo", "client_first"),
]
ROUNDTRIP_STAGES = [
    (
        "client send -> execute_request handler (ZMQ, dispatch, busy, execute_input)",
        "client_send",
        "exec_req_begin",
    ),
    ("execute_request -> do_execute", "exec_req_begin", "do_exec_begin"),
    ("do_execute -> EXE frame written", "do_exec_begin", "exe_sent"),
    ("EXE on the wire -> Julia listener has it", "exe_sent", "exe_recv"),
    ("listener -> eval task starts (Channel hand-off)", "exe_recv", "eval_start"),
    ("run_cell (parse, eval, show)", "eval_start", "run_cell_done"),
    ("drain_output (flush + markers through both pumps)", "run_cell_done", "drained"),
    ("drained -> RES written", "drained", "res_send"),
    ("RES on the wire -> Python reader dispatches it", "res_send", "res_recv"),
    ("RES -> do_execute returns (execute_result published)", "res_recv", "do_exec_end"),
    (
        "do_execute -> reply sent (ipykernel flushes stdout/stderr, sleeps)",
        "do_exec_end",
        "exec_req_end",
    ),
    ("reply sent -> client has reply and idle", "exec_req_end", "client_done"),
]


_CELL_EVENTS = {
    "exec_req_begin",
    "exe_sent",
    "exe_recv",
    "eval_start",
    "run_cell_done",
    "drained",
    "res_send",
    "res_recv",
    "exec_req_end",
}


def _stages(points: dict[str, float], stages: list[tuple[str, str, str]]) -> dict[str, float]:
    out = {}
    for label, a, b in stages:
        if a in points and b in points:
            out[label] = points[b] - points[a]
    return out


def _probe_env(env: JupyterEnv, server: Path, tag: str) -> tuple[dict[str, str], Path, Path]:
    jt = env.root / f"trace-{tag}-julia.txt"
    kt = env.root / f"trace-{tag}-kernel.jsonl"
    extra = {"BENCH_TRACE": str(kt), "BENCH_JULIA_TRACE": str(jt), "BENCH_SERVER_JL": str(server)}
    return extra, jt, kt


def _probe_start(env: JupyterEnv, server: Path, tag: str, *, after_start: Any = None) -> Any:
    """Start the probe kernel, time kernel_info and the first cell; run ``after_start(k)``."""
    extra, jt, kt = _probe_env(env, server, tag)
    k = Kernel(env, PROBE)
    try:
        client: dict[str, float] = {"client_launch": time.time()}
        k.launch(extra)
        kc = k._client()
        k._wait_shell(kc.kernel_info(), 60)
        client["client_kinfo"] = time.time()
        k.wait_iopub(60)
        client["client_exec_send"] = time.time()
        k.check("1+1", "2", timeout=60)
        client["client_first"] = time.time()
        extra_out = after_start(k) if after_start is not None else None
    finally:
        k.stop()
    events = read_events(jt, kt)
    points = dict(client)
    for e in events:  # in time order: the first of each, the cell's only after it was sent
        if e.name not in _CELL_EVENTS or e.t >= client["client_exec_send"]:
            points.setdefault(e.name, e.t)
    return points, events, extra_out


def _warm_up_steps(events: list[Event]) -> list[float]:
    begins = [e for e in events if e.name == "warm_begin"]
    ends = [e for e in events if e.name == "warm_end"]
    return [e.t - b.t for b, e in zip(begins, ends, strict=False)]


def _cells_during_warm_up(k: Kernel) -> list[float]:
    """Cells sent 0.3 s apart right after start: some land while a warm-up step runs."""
    out = []
    for _ in range(12):
        time.sleep(0.3)
        out.append(k.check("1+1", "2").t_done)
    return out


def _wait_warm_up_done(jt: Path, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if jt.exists() and re.search(r"^warm_end 0 ", jt.read_text(), re.MULTILINE):
            return
        time.sleep(0.2)


def startup_breakdown(env: JupyterEnv, plan: Plan) -> Result:
    inst = instrumented_server(env.root / "server-traced")
    runs = []
    during: list[float] = []
    for i in range(plan.breakdown_runs + 1):
        after = _cells_during_warm_up if i == 1 else None
        points, _events, extra = _probe_start(env, inst.path, f"start{i}", after_start=after)
        if i == 0:
            continue  # caches
        if extra:
            during = extra
        runs.append(points)
    # One more start left alone until every warm-up step ran, to time the steps.
    extra_env, jt, kt = _probe_env(env, inst.path, "warmup")
    with Kernel(env, PROBE) as k:
        k.launch(extra_env)
        k.wait_ready()
        _wait_warm_up_done(jt)
    steps = _warm_up_steps(read_events(jt, kt))
    stages = [_stages(p, STARTUP_STAGES) for p in runs]
    groups = [_stages(p, STARTUP_GROUPS) for p in runs]
    totals = [p["client_first"] - p["client_launch"] for p in runs]
    med = {
        label: statistics.median([s[label] for s in stages if label in s])
        for label, _, _ in STARTUP_STAGES
        if any(label in s for s in stages)
    }
    gmed = {
        label: statistics.median([s[label] for s in groups if label in s])
        for label, _, _ in STARTUP_GROUPS
        if any(label in s for s in groups)
    }
    total = statistics.median(totals)
    sec = "3b. start-up breakdown (probe kernel, median of runs)"
    rows = [Row(sec, "total: start_kernel -> first result (probe)", "s", total)]
    for label, v in gmed.items():
        rows.append(Row(sec, f"[group] {label}", "s", v, note=f"{100 * v / total:.0f}%"))
    for label, v in med.items():
        rows.append(Row(sec, label, "ms", v, note=f"{100 * v / total:.0f}%"))
    imports = python_import_times()
    for mod in (
        "ipykernel.kernelapp",
        "IPython",
        "jupyter_client",
        "zmq",
        "jutul_jkernel.kernel",
        "psutil",
        "ipykernel.debugger",
    ):
        if mod in imports:
            rows.append(
                Row(
                    sec,
                    f"python -X importtime: {mod} (cumulative)",
                    "ms",
                    imports[mod],
                    note="lazy, at 1st kernel_info" if mod == "ipykernel.debugger" else "",
                )
            )
    julia = julia_load_times()
    rows += [
        Row(sec, "julia: using Sockets, REPL, Base64, Logging", "ms", julia["usings"]),
        Row(sec, "julia: parse server.jl", "ms", julia["parse"]),
        Row(
            sec,
            "julia: lower and evaluate server.jl (define the module)",
            "ms",
            julia["lower_eval"],
        ),
        Row(
            sec,
            "julia: methods compiled from launch to first result",
            "n",
            julia["compiled_to_first"],
            note="--trace-compile",
        ),
        Row(sec, "julia: methods compiled by the idle warm-up", "n", julia["compiled_warm_up"]),
    ]
    ss = summary(steps)
    dw = summary(during)
    rows += [
        Row(
            sec,
            "idle warm-up: steps, total CPU-bound time",
            "s",
            sum(steps),
            note=f"{len(steps)} steps",
        ),
        Row(sec, "idle warm-up: longest step (a cell arriving then waits)", "ms", ss["max"]),
        Row(sec, "1+1 sent every 0.3 s during warm-up: median", "ms", dw["median"]),
        Row(sec, "1+1 sent every 0.3 s during warm-up: max", "ms", dw["max"]),
    ]
    data = {
        "runs": runs,
        "stages": stages,
        "median_stages": med,
        "groups": gmed,
        "totals": summary(totals),
        "warm_up_steps": steps,
        "cells_during_warm_up": dw,
        "python_imports_ms": imports,
        "julia_load": julia,
        "missing_anchors": inst.missing,
    }
    return rows, data


def python_import_times(runs: int = 3) -> dict[str, float]:
    """Median cumulative import time (seconds) of the kernel's main modules."""
    got: dict[str, list[float]] = {}
    code = "import ipykernel.kernelapp, jutul_jkernel.kernel; import ipykernel.debugger"
    for _ in range(runs):
        done = subprocess.run(
            [sys.executable, "-X", "importtime", "-c", code],
            capture_output=True,
            text=True,
            check=True,
        )
        for line in done.stderr.splitlines():
            m = re.match(r"import time:\s+\d+ \|\s+(\d+) \|( *)(\S+)", line)
            if m:
                got.setdefault(m.group(3), []).append(int(m.group(1)) / 1e6)
    return {mod: statistics.median(v) for mod, v in got.items() if len(v) == runs}


def julia_load_times(runs: int = 3) -> dict[str, Any]:
    server = _resources.server_script()
    path = json.dumps(str(server))
    script = (
        "t0 = time(); using Sockets, REPL, Base64, Logging; t1 = time(); "
        f"src = read({path}, String); "
        f"ex = Base.parse_input_line(src; filename = {path}); t2 = time(); "
        "Core.eval(Main, ex); t3 = time(); "
        'print(stderr, t1 - t0, " ", t2 - t1, " ", t3 - t2)'
    )
    got: list[list[float]] = [[], [], []]
    for _ in range(runs):
        done = subprocess.run(
            [JULIA_EXE, "--startup-file=no", "-e", script],
            capture_output=True,
            text=True,
            check=True,
        )
        for acc, x in zip(got, done.stderr.strip().split()[-3:], strict=True):
            acc.append(float(x))
    compiled = _compiled_methods()
    return {
        "usings": statistics.median(got[0]),
        "parse": statistics.median(got[1]),
        "lower_eval": statistics.median(got[2]),
        **compiled,
    }


def _compiled_methods() -> dict[str, Any]:
    """Count precompile statements Julia emits from launch to the first result and in warm-up."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "compiled.jl"

        async def go() -> tuple[int, int, list[str]]:
            async with JuliaSupervisor(julia_args=[f"--trace-compile={path}"]) as sup:
                await sup.execute("1+1")
                first = _count_lines(path)
                await asyncio.sleep(8)  # the idle warm-up runs its steps
                return first, _count_lines(path), _top_compiled(path)

        first, total, top = asyncio.run(go())
    return {"compiled_to_first": first, "compiled_warm_up": total - first, "compiled_sample": top}


def _count_lines(path: Path) -> int:
    return (
        sum(1 for line in path.read_text().splitlines() if line.startswith("precompile("))
        if path.exists()
        else 0
    )


def _top_compiled(path: Path) -> list[str]:
    """Which functions the compiled methods belong to, most methods first."""
    names: Counter[str] = Counter()
    for line in path.read_text().splitlines():
        m = re.match(r"precompile\(Tuple\{(?:typeof\()?([^,)}]+)", line)
        if m:
            names[m.group(1)] += 1
    return [f"{n} x{c}" for n, c in names.most_common(15)]


def roundtrip_breakdown(env: JupyterEnv, plan: Plan) -> Result:
    """Per-stage medians of ``1+1`` round trips through the probe kernel."""
    inst = instrumented_server(env.root / "server-traced")
    extra, jt, kt = _probe_env(env, inst.path, "roundtrip")
    n = max(50, plan.roundtrip_runs)
    sends: list[tuple[float, float]] = []
    with Kernel(env, PROBE) as k:
        k.launch(extra)
        k.wait_ready()
        settle(k)
        for _ in range(20):
            k.check("1+1", "2")
        for _ in range(n):
            t_send = time.time()
            r = k.check("1+1", "2")
            sends.append((t_send, t_send + r.t_done))
    events = read_events(jt, kt)
    per: list[dict[str, float]] = []
    idx = 0
    for t_send, t_done in sends:
        points = {"client_send": t_send, "client_done": t_done}
        while idx < len(events) and events[idx].t < t_send:
            idx += 1
        j = idx
        while j < len(events) and events[j].t <= t_done:
            points.setdefault(events[j].name, events[j].t)
            j += 1
        per.append(_stages(points, ROUNDTRIP_STAGES))
    med = {
        label: statistics.median([p[label] for p in per if label in p])
        for label, _, _ in ROUNDTRIP_STAGES
        if any(label in p for p in per)
    }
    total = statistics.median([b - a for a, b in sends])
    sec = "1b. round-trip breakdown (probe kernel, median per stage)"
    rows = [Row(sec, "total 1+1 round trip (probe, traced)", "ms", total)]
    for label, v in med.items():
        rows.append(Row(sec, label, "ms", v, note=f"{100 * v / total:.0f}%"))
    return rows, {"stages": per, "median": med, "total": total}


def throughput_breakdown(env: JupyterEnv, plan: Plan) -> Result:
    """Julia-side and Python-side stages of the 200,000-line cell."""
    inst = instrumented_server(env.root / "server-traced")
    extra, jt, kt = _probe_env(env, inst.path, "throughput")
    code = "for i in 1:200_000; println(lpad(i, 99)); end"
    sends = []
    with Kernel(env, PROBE) as k:
        k.launch(extra)
        k.wait_ready()
        settle(k)
        k.run(code, keep_text=False, timeout=600)
        for _ in range(max(2, plan.throughput_runs)):
            t_send = time.time()
            r = k.run(code, keep_text=False, timeout=600)
            sends.append((t_send, t_send + r.t_done, r.stream_messages))
    events = read_events(jt, kt)
    per = []
    for t_send, t_done, msgs in sends:
        window = [e for e in events if t_send <= e.t <= t_done]
        pts = {e.name: e.t for e in reversed(window)}
        frames = next((e.extra for e in window if e.name == "do_exec_end"), "")
        m = re.match(r"out_frames=(\d+) out_bytes=(\d+)", frames)
        nframes, nbytes = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
        per.append(
            {
                "total": t_done - t_send,
                "loop in Julia (eval_start -> run_cell_done)": pts.get("run_cell_done", 0)
                - pts.get("eval_start", 0),
                "drain after the loop": pts.get("drained", 0) - pts.get("run_cell_done", 0),
                "RES -> client idle": t_done - pts.get("res_send", t_done),
                "first OUT frame after send": pts.get("first_out", t_send) - t_send,
                "OUT frames": nframes,
                "mean OUT frame bytes": nbytes / nframes if nframes else 0,
                "stream messages": msgs,
            }
        )
    sec = "2b. throughput breakdown (200,000 lines, probe kernel)"
    rows = []
    for key in per[0]:
        if key in ("OUT frames", "mean OUT frame bytes", "stream messages"):
            shown = ", ".join(f"{p[key]:.0f}" for p in per)
            rows.append(Row(sec, f"{key} (each run)", "", shown))
        else:
            rows.append(Row(sec, f"{key}, median", "s", statistics.median([p[key] for p in per])))
    return rows, {"runs": per}
