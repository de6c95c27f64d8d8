"""Output by output against the real IJulia: the same notebooks through both kernels.

    JKERNEL_IJULIA_KERNELSPEC=/opt/ijulia-1.34.4/kernels/ijulia-110 \\
        PATH=/opt/julia-1.10.0/bin:$PATH python -m bench.compare_ijulia
    python -m bench.compare_ijulia --packages /opt/julia-packages-1.10 \\
        --packages-depot /opt/julia-packages-depot     # the real-packages notebook too

Runs each notebook (examples/, tests/notebooks/, and bench/notebooks/real_packages.ipynb where
a folder of package sources is given) through IJulia and through this kernel with nbclient, on
the same Julia, then compares each cell's outputs after normalising what must differ (colour
codes, addresses, timings, temporary paths, each kernel's depot, how a stream was cut into
messages, tracebacks' frames). A cell differs in *kind* (the sequence of output types), in
*MIME* (the types of a rich output) or in *text* (what a stream, a text/plain or an error's
name and message say).

Each difference is either explained in ``bench/ijulia_differences.toml`` (with its reason:
docs/clients.md summarises them) or reported as unexplained; the exit status is 1 while any
is unexplained. Nothing of IJulia's output is kept unless ``--keep DIR`` asks for the executed
notebooks.
"""

from __future__ import annotations

import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import tomllib
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import nbformat
from nbclient import NotebookClient

from .harness import (
    IJULIA_KERNELSPEC,
    REPO,
    BenchError,
    check_same_julia,
    ijulia_kernelspec,
)

NOTEBOOKS = [
    *sorted((REPO / "examples").glob("*.ipynb")),
    *sorted((REPO / "tests" / "notebooks").glob("*.ipynb")),
]
PACKAGES_NOTEBOOK = REPO / "bench" / "notebooks" / "real_packages.ipynb"
DIFFERENCES = REPO / "bench" / "ijulia_differences.toml"
# The folder of package sources (an implicit environment: NAME/Project.toml, NAME/src) and a
# depot where they are compiled; docs/development.md says how they were made here.
PACKAGES = "JKERNEL_REAL_PACKAGES"
PACKAGES_DEPOT = "JKERNEL_REAL_PACKAGES_DEPOT"
OURS, THEIRS = "jj-compare-ours", "jj-compare-ijulia"
# A first `using DataFrames` compiles for minutes where the depot holds no cache yet.
_CELL_TIMEOUT = 900

# ---- normalising ----

_ANSI = re.compile(r"\x1b\[[0-9;?]*[A-Za-z]")
_RULES: list[tuple[re.Pattern[str], str]] = [
    (re.compile(r"0x[0-9a-f]{6,16}"), "0x…"),  # addresses, pointers
    (re.compile(r"(?:/tmp|/var/tmp)/[^\s\"'):]+"), "/tmp/…"),
    # Pkg's environments live in each kernel's first depot (IJulia's own, here), as in `] st`
    (re.compile(r"[^\s`'\"]*/environments/(v\d+\.\d+)/"), r"<depot>/environments/\1/"),
    # timings: "0.000123 seconds", "1.2 ms", "(3 allocations: 48 bytes)" and @btime's figures
    (re.compile(r"\d+(?:\.\d+)?(?:e-?\d+)? ?(?:seconds|s|ms|μs|µs|ns)\b"), "T"),
    (re.compile(r"\d+(?:\.\d+)? (?:allocations?|bytes|KiB|MiB|GiB)"), "N units"),
    (re.compile(r"\d+(?:\.\d+)?% (?:gc|compilation) time(?:[^)]*)?"), "P% time"),
    (re.compile(r"\b(ETA|Time): \d+:\d\d:\d\d"), r"\1: T"),  # ProgressMeter's clocks
    (re.compile(r"[ \t]+\n"), "\n"),
]


def normalise(text: str) -> str:
    text = _ANSI.sub("", text).replace("\r\n", "\n")
    for pattern, replacement in _RULES:
        text = pattern.sub(replacement, text)
    return text.strip()


@dataclass(frozen=True)
class Output:
    """One output as compared: its kind, its MIME types and its text."""

    kind: str  # "stdout", "stderr", "execute_result", "display_data", "error", ...
    mimes: tuple[str, ...] = ()
    text: str = ""


def outputs_of(cell: dict[str, Any]) -> list[Output]:
    """A code cell's outputs, consecutive pieces of one stream joined (how output is cut into
    messages is timing), errors by name and message (their frames are each kernel's own)."""
    out: list[Output] = []
    for o in cell.get("outputs", []):
        kind = o["output_type"]
        if kind == "stream":
            text = o["text"] if isinstance(o["text"], str) else "".join(o["text"])
            if out and out[-1].kind == o["name"]:
                out[-1] = Output(o["name"], (), out[-1].text + text)
            else:
                out.append(Output(o["name"], (), text))
        elif kind == "error":
            out.append(Output("error", (), f"{o['ename']}: {o['evalue']}"))
        else:
            data = o.get("data", {})
            plain = data.get("text/plain", "")
            plain = plain if isinstance(plain, str) else "".join(plain)
            out.append(Output(kind, tuple(sorted(data)), plain))
    return [Output(o.kind, o.mimes, normalise(o.text)) for o in out]


@dataclass
class Difference:
    notebook: str
    cell: int
    source: str
    what: str  # "kind", "mime" or "text"
    ours: str
    theirs: str
    reason: str | None = None  # from bench/ijulia_differences.toml, when explained


def compare_cells(notebook: str, ours: Any, theirs: Any) -> list[Difference]:
    found = []
    cells = [c for c in ours.cells if c.cell_type == "code"]
    other = [c for c in theirs.cells if c.cell_type == "code"]
    for i, (a, b) in enumerate(zip(cells, other, strict=True)):
        oa, ob = outputs_of(a), outputs_of(b)
        if oa == ob:
            continue

        def diff(what: str, x: object, y: object, *, i: int = i, a: Any = a) -> None:
            found.append(Difference(notebook, i, a.source, what, str(x)[:400], str(y)[:400]))

        kinds_a, kinds_b = [o.kind for o in oa], [o.kind for o in ob]
        if kinds_a != kinds_b:
            diff("kind", kinds_a, kinds_b)
            continue
        for x, y in zip(oa, ob, strict=True):
            if x.mimes != y.mimes:
                diff("mime", f"{x.kind} {list(x.mimes)}", f"{y.kind} {list(y.mimes)}")
            if x.text != y.text:
                diff("text", f"{x.kind}: {x.text}", f"{y.kind}: {y.text}")
    return found


def explain(found: list[Difference], known: list[dict[str, str]]) -> list[dict[str, str]]:
    """Give each difference the reason of the first entry that matches it; return the
    entries that matched nothing (stale: the difference they explain is gone)."""
    used = set()
    for d in found:
        for n, k in enumerate(known):
            if (
                fnmatch.fnmatch(d.notebook, k["notebook"])
                and k["cell"] in d.source
                and k["what"] == d.what
                and k.get("ours", "") in d.ours
                and k.get("theirs", "") in d.theirs
            ):
                d.reason = k["reason"]
                used.add(n)
                break
    return [k for n, k in enumerate(known) if n not in used]


# ---- running ----


def _install(prefix: Path, ijulia: Path, packages: Path | None, depot: Path | None) -> None:
    subprocess.run(
        [sys.executable, "-m", "jutul_jkernel.install", "--prefix", str(prefix), "--name", OURS,
         "--no-doctor"],
        check=True, capture_output=True, timeout=600,
    )  # fmt: skip
    kernels = prefix / "share" / "jupyter" / "kernels"
    ours = json.loads((kernels / OURS / "kernel.json").read_text())
    theirs = json.loads((ijulia / "kernel.json").read_text())
    if packages is not None:
        # Both find the packages after their own environments, and their compiled caches in
        # the packages' depot after their own first depot.
        ours_env, theirs_env = ours.setdefault("env", {}), theirs.setdefault("env", {})
        ours_env["JULIA_LOAD_PATH"] = f"@:@v#.#:@stdlib:{packages}"
        # IJulia's own entries first, then the default environments (an active project, which
        # Pkg needs to compile a package whose cache IJulia's loaded JSON made stale), then
        # the packages: each kernel finds the same packages after its own environment.
        own = theirs_env.get("JULIA_LOAD_PATH", "@stdlib")
        theirs_env["JULIA_LOAD_PATH"] = f"{own}:@:@v#.#:@stdlib:{packages}"
        if depot is not None:
            ours_env["JULIA_DEPOT_PATH"] = f"{depot}:"
            first = theirs_env.get("JULIA_DEPOT_PATH", "").rstrip(":")
            theirs_env["JULIA_DEPOT_PATH"] = f"{first}:{depot}:" if first else f"{depot}:"
    (kernels / OURS / "kernel.json").write_text(json.dumps(ours, indent=1))
    (kernels / THEIRS).mkdir()
    (kernels / THEIRS / "kernel.json").write_text(json.dumps(theirs, indent=1))


def _execute(path: Path, kernel: str, workdir: Path, *, loads_only: bool = False) -> Any:
    """Run the notebook at ``path`` in ``kernel``; with ``loads_only``, only its `using` and
    `import` lines, as one cell."""
    nb = nbformat.read(path, as_version=4)
    if loads_only:
        lines = [
            line
            for cell in nb.cells
            if cell.cell_type == "code"
            for line in cell.source.splitlines()
            if line.startswith(("using ", "import "))
        ]
        nb.cells = [nbformat.v4.new_code_cell("\n".join(lines))]
    for cell in nb.cells:
        cell.outputs = [] if cell.cell_type == "code" else getattr(cell, "outputs", None)
    client = NotebookClient(
        nb,
        kernel_name=kernel,
        timeout=_CELL_TIMEOUT,
        allow_errors=True,
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute()
    return nb


def run(
    notebooks: list[Path],
    ijulia: Path,
    packages: Path | None,
    depot: Path | None,
    keep: Path | None,
) -> tuple[list[Difference], list[dict[str, str]]]:
    root = Path(tempfile.mkdtemp(prefix="jj-compare-"))
    saved = {v: os.environ.get(v) for v in ("JUPYTER_PATH", "JUPYTER_DATA_DIR")}
    os.environ["JUPYTER_PATH"] = str(root / "prefix" / "share" / "jupyter")
    os.environ["JUPYTER_DATA_DIR"] = str(root / "data")
    found: list[Difference] = []
    try:
        _install(root / "prefix", ijulia, packages, depot)
        for path in notebooks:
            name = str(path.relative_to(REPO))
            print(f"-- {name}", flush=True)
            results = {}
            for label, kernel in (("ours", OURS), ("ijulia", THEIRS)):
                # Each kernel runs the notebook in a fresh copy of its folder: cells may write.
                workdir = root / label / path.parent.name
                if not workdir.exists():
                    shutil.copytree(path.parent, workdir)
                if path == PACKAGES_NOTEBOOK:
                    # A package's first `using` in a kernel whose first depot has no cache of it
                    # compiles it there and says so on stderr ("Precompiling DataFrames"):
                    # IJulia's depot comes first in its path, and its own copies of JSON,
                    # PrecompileTools and others make the packages' depot's caches stale for
                    # it. That is the machine's history, not the kernel: each loads the
                    # packages once before the run that is compared.
                    _execute(path, kernel, workdir, loads_only=True)
                results[label] = _execute(path, kernel, workdir)
                if keep is not None:
                    (keep / label).mkdir(parents=True, exist_ok=True)
                    nbformat.write(results[label], keep / label / path.name)
            found += compare_cells(name, results["ours"], results["ijulia"])
    finally:
        for var, value in saved.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        shutil.rmtree(root, ignore_errors=True)
    known = tomllib.loads(DIFFERENCES.read_text()).get("difference", [])
    ran = {str(p.relative_to(REPO)) for p in notebooks}
    stale = [
        k for k in explain(found, known) if any(fnmatch.fnmatch(r, k["notebook"]) for r in ran)
    ]
    return found, stale


def report(found: list[Difference], stale: list[dict[str, str]]) -> int:
    unexplained = [d for d in found if d.reason is None]
    for d in found:
        head = d.source.strip().splitlines()[0][:70] if d.source.strip() else ""
        verdict = f"explained: {d.reason}" if d.reason else "UNEXPLAINED"
        print(f"{d.notebook} cell {d.cell} ({head!r}): {d.what} differs; {verdict}")
        if d.reason is None:
            print(f"    ours:   {d.ours}\n    IJulia: {d.theirs}")
    for k in stale:
        print(f"stale entry in {DIFFERENCES.name}: {k['notebook']} {k['cell']!r} ({k['what']})")
    print(
        f"\n{len(found)} differences: {len(found) - len(unexplained)} explained, "
        f"{len(unexplained)} unexplained; {len(stale)} stale entries"
    )
    return 1 if unexplained or stale else 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.compare_ijulia", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    p.add_argument("notebooks", nargs="*", type=Path, help="default: examples/, tests/notebooks/")
    p.add_argument("--packages", type=Path, default=os.environ.get(PACKAGES) or None,
                   help=f"folder of package sources (default: ${PACKAGES})")  # fmt: skip
    p.add_argument("--packages-depot", type=Path, default=os.environ.get(PACKAGES_DEPOT) or None,
                   help=f"depot their caches go to (default: ${PACKAGES_DEPOT})")  # fmt: skip
    p.add_argument("--keep", type=Path, help="write the executed notebooks here")
    args = p.parse_args(argv)
    try:
        ijulia = ijulia_kernelspec()
        if ijulia is None:
            print(f"set {IJULIA_KERNELSPEC} to the folder of IJulia's kernelspec", file=sys.stderr)
            return 2
        print(f"both kernels on {check_same_julia(ijulia, 'julia')}", flush=True)
    except BenchError as exc:
        print(exc, file=sys.stderr)
        return 2
    notebooks = [p.resolve() for p in args.notebooks] or list(NOTEBOOKS)
    if args.packages is not None and not args.notebooks:
        notebooks.append(PACKAGES_NOTEBOOK)
    found, stale = run(notebooks, ijulia, args.packages, args.packages_depot, args.keep)
    return report(found, stale)


if __name__ == "__main__":
    raise SystemExit(main())
