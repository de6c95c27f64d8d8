"""``python -m bench``: run the sections, print the table, write the JSON.

    python -m bench                    # everything (about 10 minutes here)
    python -m bench --quick            # fewer repetitions, 128 MiB instead of 1 GiB: CI-sized
    python -m bench --only roundtrip,profile --json /tmp/rt.json

A section that fails is reported as failed and the others still run; the exit status is then 1.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import hashlib
import importlib.metadata
import os
import platform
import subprocess
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from . import breakdown, cases, profiling, whatif
from .harness import REPO, JupyterEnv
from .report import Row, table, write_json

SECTIONS = {
    "roundtrip": cases.roundtrip,
    "throughput": cases.throughput,
    "startup": cases.startup,
    "interrupt": cases.interrupts,
    "restart": cases.restart,
    "memory": cases.memory,
    "persistent": cases.persistent,
    "breakdown-startup": breakdown.startup_breakdown,
    "breakdown-roundtrip": breakdown.roundtrip_breakdown,
    "breakdown-throughput": breakdown.throughput_breakdown,
    "profile": profiling.profiles,
    "whatif": whatif.whatif,
}
# `--only breakdown` selects every breakdown.
_ALIASES = {"breakdown": [s for s in SECTIONS if s.startswith("breakdown-")]}
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
        help=f"run only these sections: {', '.join([*SECTIONS, *_ALIASES])}",
    )
    p.add_argument(
        "--json",
        type=Path,
        default=DEFAULT_JSON,
        metavar="PATH",
        help=f"where to write the results (default: {DEFAULT_JSON})",
    )
    return p


def _selected(only: list[str]) -> list[str]:
    if not only:
        return list(SECTIONS)
    names: list[str] = []
    for chunk in only:
        for name in filter(None, (n.strip() for n in chunk.split(","))):
            expanded = _ALIASES.get(name, [name])
            for n in expanded:
                if n not in SECTIONS:
                    msg = f"unknown section {n!r}; choose from {', '.join([*SECTIONS, *_ALIASES])}"
                    raise SystemExit(msg)
                if n not in names:
                    names.append(n)
    return names


def _git(*args: str) -> str:
    done = subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True, check=False)
    return done.stdout.strip()


def _tree_hash() -> str:
    """Hash of the code under test as it is on disk now (the tree may differ from the commit)."""
    h = hashlib.sha256()
    files = sorted(
        [
            *REPO.glob("jutul_jkernel/*.py"),
            REPO / "julia" / "server.jl",
            REPO / "kernelspec" / "kernel.json",
        ]
    )
    for f in files:
        h.update(f.name.encode() + b"\0" + f.read_bytes())
    return h.hexdigest()[:16]


def _meta(plan: cases.Plan) -> dict[str, Any]:
    def version(pkg: str) -> str:
        try:
            return importlib.metadata.version(pkg)
        except importlib.metadata.PackageNotFoundError:
            return "not installed"

    julia = subprocess.run(
        [cases.JULIA_EXE, "--version"], capture_output=True, text=True, check=False
    ).stdout.strip()
    return {
        "started": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty": bool(_git("status", "--porcelain", "--", "jutul_jkernel", "julia")),
        "tree_hash": _tree_hash(),
        "python": sys.version.split()[0],
        "executable": sys.executable,
        "julia": julia,
        "platform": platform.platform(),
        "cpus": os.cpu_count(),
        "versions": {
            p: version(p)
            for p in ("jutul-jkernel", "ipykernel", "jupyter_client", "pyzmq", "tornado", "py-spy")
        },
        "plan": dataclasses.asdict(plan),
        "loadavg_start": os.getloadavg(),
    }


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    plan = cases.QUICK if args.quick else cases.Plan()
    names = _selected(args.only)
    meta = _meta(plan)
    meta["sections_run"] = names
    rows: list[Row] = []
    sections: dict[str, Any] = {}
    failed = []
    t_all = time.perf_counter()
    print(
        f"bench: {'quick' if plan.quick else 'full'} run of {', '.join(names)}; "
        f"load average {os.getloadavg()[0]:.2f}",
        flush=True,
    )
    with JupyterEnv() as env:
        for name in names:
            load0 = os.getloadavg()
            t0 = time.perf_counter()
            print(f"\n-- {name} ...", flush=True)
            try:
                got, data = SECTIONS[name](env, plan)
            except Exception as exc:
                failed.append(name)
                env.keep = True
                got = [Row(name, f"FAILED: {type(exc).__name__}: {exc}"[:300], "", None)]
                data = {"error": traceback.format_exc()}
                traceback.print_exc()
            took = time.perf_counter() - t0
            load1 = os.getloadavg()
            note = f"{took:.0f} s, load {load0[0]:.1f} -> {load1[0]:.1f}"
            sections[name] = {
                "seconds": took,
                "loadavg_before": load0,
                "loadavg_after": load1,
                "data": data,
            }
            rows += got
            print(table(got), flush=True)
            print(f"   ({note})", flush=True)
    meta["seconds"] = time.perf_counter() - t_all
    meta["loadavg_end"] = os.getloadavg()
    meta["failed"] = failed
    write_json(args.json, meta, sections, rows)
    print("\n" + "=" * 100)
    print(table(rows))
    missed = [r for r in rows if r.met is False]
    print(
        f"\n{len([r for r in rows if r.met])} targets met, {len(missed)} missed"
        + (f"; sections failed: {', '.join(failed)}" if failed else "")
    )
    print(
        f"took {meta['seconds']:.0f} s; load average {meta['loadavg_start'][0]:.2f} at start, "
        f"{meta['loadavg_end'][0]:.2f} at end; JSON: {args.json}"
    )
    return 1 if failed else 0
