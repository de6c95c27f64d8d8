"""``python -m bench``: run the sections, print the table, write the JSON.

    python -m bench                          # everything (about 10 minutes here)
    python -m bench --quick                  # fewer repetitions, 128 MiB instead of 1 GiB
    python -m bench --only startup,restart --json /tmp/start.json
    JKERNEL_IJULIA_KERNELSPEC=/opt/ijulia-1.34.4/kernels/ijulia-110 \
        PATH=/opt/julia-1.10.0/bin:$PATH python -m bench     # beside the real IJulia

A section that fails is reported as failed and the others still run; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import importlib.metadata
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from . import cases
from .harness import REPO, BenchError, JupyterEnv, check_same_julia, ijulia_kernelspec
from .report import Row, rows, table, write_json

DEFAULT_JSON = REPO / "bench" / "results" / "latest.json"


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="python -m bench",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--quick", action="store_true", help="a short CI-sized run")
    p.add_argument(
        "--only",
        action="append",
        default=[],
        metavar="NAME[,NAME]",
        help=f"run only these sections: {', '.join(cases.SECTIONS)}",
    )
    p.add_argument("--json", type=Path, default=DEFAULT_JSON, metavar="PATH",
                   help=f"where to write the results (default: {DEFAULT_JSON})")  # fmt: skip
    return p


def _selected(only: list[str]) -> list[str]:
    names = [n.strip() for chunk in only for n in chunk.split(",") if n.strip()]
    unknown = [n for n in names if n not in cases.SECTIONS]
    if unknown:
        msg = f"unknown section {unknown[0]!r}; choose from {', '.join(cases.SECTIONS)}"
        raise SystemExit(msg)
    return [n for n in cases.SECTIONS if n in names] if names else list(cases.SECTIONS)


def _meta(plan: cases.Plan) -> dict[str, Any]:
    def git(*args: str) -> str:
        done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True)
        return done.stdout.strip()

    def version(pkg: str) -> str:
        try:
            return importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    julia = subprocess.run([cases.JULIA_EXE, "--version"], capture_output=True, text=True)
    return {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": git("rev-parse", "HEAD"),
        "git_dirty": bool(git("status", "--porcelain", "--", "jutul_jkernel", "julia")),
        "python": sys.version.split()[0],
        "julia": julia.stdout.strip(),
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "versions": {p: version(p) for p in ("jutul-jkernel", "ipykernel", "jupyter_client")},
        "plan": dataclasses.asdict(plan),
    }


def _section_rows(name: str, samples: dict[str, list[float]], plan: cases.Plan) -> list[Row]:
    specs = [s for s in cases.ROWS if cases.ROW_SECTION[s.section] == name]
    return rows(specs, samples, size=cases.size_label(plan))


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    plan = cases.QUICK if args.quick else cases.Plan()
    names = _selected(args.only)
    try:
        ijulia = ijulia_kernelspec()
        same_julia = check_same_julia(ijulia, cases.JULIA_EXE) if ijulia else None
    except BenchError as exc:
        print(f"bench: {exc}", file=sys.stderr)
        return 2
    meta = _meta(plan)
    meta["ijulia"] = str(ijulia) if ijulia else None
    got: list[Row] = []
    samples: dict[str, Any] = {}
    failed = []
    t_all = time.perf_counter()
    print(f"bench: {'quick' if plan.quick else 'full'} run of {', '.join(names)}; "
          f"load average {os.getloadavg()[0]:.2f}", flush=True)  # fmt: skip
    print(f"IJulia: {ijulia}, on {same_julia}" if ijulia else
          "IJulia: not measured (JKERNEL_IJULIA_KERNELSPEC is not set)")  # fmt: skip
    with JupyterEnv(ijulia) as env:
        for name in names:
            load0, t0 = os.getloadavg()[0], time.perf_counter()
            print(f"\n-- {name} ...", flush=True)
            try:
                measured = cases.SECTIONS[name](env, plan)
            except Exception as exc:
                failed.append(name)
                env.keep = True
                traceback.print_exc()
                samples[name] = {"error": f"{type(exc).__name__}: {exc}"}
                continue
            load1 = os.getloadavg()[0]
            samples[name] = {**measured, "load": [load0, load1]}
            section_rows = _section_rows(name, measured, plan)
            got += section_rows
            print(table(section_rows), flush=True)
            print(f"   ({time.perf_counter() - t0:.0f} s, load {load0:.1f} -> {load1:.1f})")
    meta["seconds"] = time.perf_counter() - t_all
    meta["failed"] = failed
    write_json(args.json, meta, samples, got)
    print("\n" + "=" * 100)
    print(table(got))
    met = [r for r in got if r.met]
    missed = [r for r in got if r.met is False]
    print(f"\n{len(met)} targets met, {len(missed)} missed"
          + (f"; sections failed: {', '.join(failed)}" if failed else ""))  # fmt: skip
    print(f"took {meta['seconds']:.0f} s; load average now {os.getloadavg()[0]:.2f}; "
          f"JSON: {args.json}")  # fmt: skip
    return 1 if failed else 0
