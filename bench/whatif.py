"""What the main suggestions would buy, measured before anyone edits the package.

The probe kernel (:mod:`bench.probe_kernel`, tracing off) is the real kernel started with the
same options as ``python -m jutul_jkernel``, with knobs patched in at start-up. Variants run
side by side, interleaved in blocks, and each is reported against the unchanged kernel started
the same way.
"""

from __future__ import annotations

import time
from typing import Any

from ipykernel.kernelbase import Kernel as IPyKernel

from .cases import _CASES, BLOB, Plan, Result, settle
from .harness import JULIA, PROBE, BenchError, JupyterEnv, Kernel
from .report import Row, summary

# "as is" is the kernel users run (no OutStream, JuliaKernel._execute_sleep = 0); the variants
# put back what ipykernel would do by default, to show what leaving it out buys.
_ROUNDTRIP_VARIANTS = {
    "as is": {},
    "with ipykernel's OutStream": {"BENCH_OUTSTREAM": "1"},
    "with ipykernel's _execute_sleep": {
        "BENCH_EXECUTE_SLEEP": str(IPyKernel._execute_sleep.default_value)
    },
}
_OUTPUT_VARIANTS = {
    "as is (FLUSH_BYTES 64 KiB, IOPub sync every 1 MiB)": {},
    "FLUSH_BYTES = 1 MiB": {"BENCH_FLUSH_BYTES": str(1 << 20)},
    "FLUSH_BYTES = 1 MiB, IOPub sync every 16 MiB": {
        "BENCH_FLUSH_BYTES": str(1 << 20),
        "BENCH_IOPUB_SYNC_BYTES": str(16 << 20),
    },
}


def _kernels(env: JupyterEnv, variants: dict[str, dict[str, str]]) -> dict[str, Kernel]:
    kernels: dict[str, Kernel] = {}
    for name, knobs in variants.items():
        k = Kernel(env, PROBE)
        k.start(knobs)
        kernels[name] = k
    for k in kernels.values():
        settle(k)
    return kernels


def whatif(env: JupyterEnv, plan: Plan) -> Result:
    rows: list[Row] = []
    data: dict[str, Any] = {}
    sec = "8. what-if (probe kernel with knobs; ratio vs the same kernel as is)"
    n = max(60, plan.roundtrip_runs // 2)
    kernels = _kernels(env, _ROUNDTRIP_VARIANTS)
    try:
        rt: dict[str, list[float]] = {v: [] for v in kernels}
        for k in kernels.values():
            for _ in range(10):
                k.check("1+1", "2")
        for start in range(0, n, 20):
            for v, k in kernels.items():
                for _ in range(min(20, n - start)):
                    rt[v].append(k.check("1+1", "2").t_done)
    finally:
        for k in kernels.values():
            k.stop()
    base = summary(rt["as is"])
    for v, xs in rt.items():
        s = summary(xs)
        rows.append(Row(sec, f"1+1 round trip, {v}", "ms", s["median"], base["median"], "as is"))
    data["roundtrip"] = {v: summary(xs) for v, xs in rt.items()}

    kernels = _kernels(env, _OUTPUT_VARIANTS)
    try:
        for case in ("blob", "lines"):
            code = str(_CASES[case][JULIA])
            times: dict[str, list[float]] = {v: [] for v in kernels}
            msgs: dict[str, list[int]] = {v: [] for v in kernels}
            for i in range(plan.throughput_runs + 1):
                for v, k in kernels.items():
                    r = k.run(code, keep_text=False, timeout=600)
                    if r.status != "ok" or r.stream_bytes != BLOB:
                        msg = f"{v}: {case} gave {r.stream_bytes} bytes ({r.status})"
                        raise BenchError(msg)
                    if i > 0:
                        times[v].append(r.t_done)
                        msgs[v].append(r.stream_messages)
            first = next(iter(times))
            base_t = summary(times[first])
            what = str(_CASES[case]["what"])
            for v in kernels:
                s = summary(times[v])
                rows.append(
                    Row(
                        sec,
                        f"{what}: {v}",
                        "s",
                        s["median"],
                        base_t["median"],
                        "as is",
                        note=f"{summary(msgs[v])['median']:.0f} messages",
                    )
                )
            data[case] = {v: {"time": summary(times[v]), "messages": msgs[v]} for v in kernels}
            time.sleep(0.5)
    finally:
        for k in kernels.values():
            k.stop()
    return rows, data
