r"""make mutants: deliberate breaks that the tests guarding each promise must catch.

Each mutant breaks one promise of the docs on purpose: a list of edits (file, pattern,
replacement) applied to a temporary copy of the tree, and the tests that guard that promise.
The mutants are data, in scripts/mutants/: one TOML file per area of the promise map
(tests/README.md), whose name's number places the area in the map. The runner first runs every
guarding test on the unbroken copy (they must pass), then, for each mutant, applies it to a
fresh copy and runs only its guarding tests: a failure is "killed", a pass "survived". It
prints one line per mutant and exits non-zero if any survived, if a pattern is not found (the
code it targets changed: fix the pattern, never drop the mutant), or if a run errs.

A data file holds its area's title and the page that makes its promises, then its mutants in
id order, each with one or more edits, applied in order:

    title = "Interrupts"
    page = "docs/interrupts.md"

    [[mutant]]
    id = "M2"
    promise = "a loop without safepoints is forced, state kept"
    tests = ["tests/test_supervisor_julia.py::test_interrupt_of_a_loop_without_safepoints"]
    env = { JKERNEL_STORM_INTERRUPTS = "20" }  # optional, for its tests' run
    julia_needs = 'isdefined(Base, :x)'  # optional: where its tests can fail (below)
    [[mutant.edit]]
    file = "jutul_jkernel/supervisor/interrupts.py"
    find = '(?re)^_BURST_COUNT = \d+$'
    replace = '_BURST_COUNT = 0'

A `find` is text in which every run of whitespace matches any whitespace, so reformatting
does not lose it; after a "(?re)" prefix it is a raw regular expression (multi-line mode).
Each must match exactly once. A promise that only some Julias can keep or break (the native
code in package caches, 1.9+) has its tests skip elsewhere; its mutant says so with
`julia_needs`, a Julia expression that is true on a Julia where they run. On another Julia the
mutant is reported "not run", counted apart from killed and survived: run `make mutants` again
with such a Julia first on PATH. Where no field or definition tells (what Julia's package
cache holds), the expression includes a probe from scripts/mutants/probes that asks this Julia
by experiment; it runs in the repository's root. Code goes in TOML literal strings, '...' or
'''...''' across lines (the newline right after the opening ''' is not part of the text): they
keep backslashes and quotes as typed. A test is "tests/file.py::name", a name prefix (parametrized
ids too), or a file alone for all of its tests. Add a mutant whenever a new promise is made,
then run `make promise-map`; tests/test_promise_map.py checks that every pattern applies and
every guarding test exists.

    python scripts/mutants.py                 # all mutants
    python scripts/mutants.py M3 M9           # some of them
    python scripts/mutants.py --list          # what they are
    python scripts/mutants.py --tree main     # the same mutants against another commit's tree
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

if sys.version_info >= (3, 11):
    import tomllib
else:  # the test extra installs tomli, which tomllib came from, on 3.10
    import tomli as tomllib

ROOT = Path(__file__).resolve().parent.parent
DATA = ROOT / "scripts" / "mutants"
# One mutant's guarding tests on this 2-core machine take at most a few minutes; past this the
# run is stuck, which counts as an error, not as killed.
RUN_TIMEOUT = 900
# The baseline runs every guarding test at once (~180: 9 min alone here, and past 15 beside a
# fresh clone's `make test`, where the old single bound stopped a whole run).
BASELINE_TIMEOUT = 3600


@dataclass(frozen=True)
class Edit:
    file: str  # from the repository's root
    find: str  # text; runs of spaces match any whitespace; (?re) prefix: a raw regex
    replace: str


@dataclass(frozen=True)
class Mutant:
    id: str
    promise: str  # what the README or docs/ promise, which this break violates
    edits: tuple[Edit, ...]
    tests: tuple[str, ...]  # "tests/file.py::test_name" (a name prefix: parametrized ids too)
    env: dict[str, str] = field(default_factory=dict)
    julia_needs: str = ""  # a Julia expression, true where its tests can fail; "" everywhere


@dataclass(frozen=True)
class Area:
    """One data file: an area of the kernel, the page that makes its promises, its mutants."""

    title: str
    page: str  # from the repository's root, with an optional #anchor
    path: Path
    mutants: tuple[Mutant, ...]


class CatalogueError(Exception):
    """A data file in scripts/mutants/ is not TOML, or not in the shape the docstring shows."""


# ---- the data files ----

# Each table's keys and their types; the optional ones may be left out.
_AREA_KEYS: dict[str, type] = {"title": str, "page": str, "mutant": list}
_MUTANT_KEYS: dict[str, type] = {"id": str, "promise": str, "tests": list, "env": dict,
                                 "julia_needs": str, "edit": list}  # fmt: skip
_EDIT_KEYS: dict[str, type] = {"file": str, "find": str, "replace": str}
_OPTIONAL = frozenset({"mutant", "env", "julia_needs"})


def _checked(table: object, keys: dict[str, type], where: str) -> dict[str, Any]:
    """``table``, once it is a table with every key it needs, no other, each of its type."""
    if not isinstance(table, dict):
        msg = f"{where}: {type(table).__name__} where a table belongs"
        raise CatalogueError(msg)
    problems = [f"no {k}" for k in keys if k not in table and k not in _OPTIONAL]
    problems += [f"unknown key {k!r}" for k in table if k not in keys]
    problems += [
        f"{k} is {type(v).__name__}, not {keys[k].__name__}"
        for k, v in table.items()
        if k in keys and not isinstance(v, keys[k])
    ]
    if problems:
        msg = f"{where}: {'; '.join(problems)}"
        raise CatalogueError(msg)
    return table


def _mutant(table: object, where: str) -> Mutant:
    where = f"{where}, mutant {table.get('id', '?') if isinstance(table, dict) else '?'}"
    raw = _checked(table, _MUTANT_KEYS, where)
    edits = tuple(
        Edit(**_checked(e, _EDIT_KEYS, f"{where}, edit {n}")) for n, e in enumerate(raw["edit"], 1)
    )
    env = raw.get("env", {})
    if not edits or not raw["tests"]:
        msg = f"{where}: a mutant needs at least one edit and one test"
        raise CatalogueError(msg)
    if not all(isinstance(t, str) for t in raw["tests"]) or not all(
        isinstance(v, str) for v in env.values()
    ):
        msg = f"{where}: its tests and env values must be strings"
        raise CatalogueError(msg)
    return Mutant(
        raw["id"], raw["promise"], edits, tuple(raw["tests"]), dict(env), raw.get("julia_needs", "")
    )


def load_area(path: Path) -> Area:
    """The area and the mutants of one data file."""
    where = str(path.relative_to(ROOT) if path.is_relative_to(ROOT) else path)
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except tomllib.TOMLDecodeError as exc:
        msg = f"{where}: {exc}"
        raise CatalogueError(msg) from exc
    raw = _checked(data, _AREA_KEYS, where)
    found = tuple(_mutant(m, where) for m in raw.get("mutant", []))
    return Area(raw["title"], raw["page"], path, found)


def load_areas(directory: Path = DATA) -> tuple[Area, ...]:
    """Every data file's area, in the order of the files' names: the map's order."""
    return tuple(load_area(path) for path in sorted(directory.glob("*.toml")))


def id_key(mutant: Mutant) -> tuple[int, str]:
    """M9 before M10."""
    digits = "".join(ch for ch in mutant.id if ch.isdigit())
    return (int(digits) if digits else 0, mutant.id)


AREAS = load_areas()
MUTANTS: tuple[Mutant, ...] = tuple(sorted((m for a in AREAS for m in a.mutants), key=id_key))


# ---- the runner ----


def _pattern(find: str) -> re.Pattern[str]:
    if find.startswith("(?re)"):
        return re.compile(find[5:], re.MULTILINE)
    return re.compile(r"\s+".join(re.escape(word) for word in find.split()))


class PatternError(Exception):
    """A mutant's pattern does not match exactly once: the code it targets changed."""


def mutate(mutant: Mutant, read: Callable[[str], str]) -> dict[str, str]:
    """The text of each file the mutant edits, once edited; ``read`` gives a file's text.

    Raise PatternError naming a pattern that does not match exactly once.
    """
    texts: dict[str, str] = {}
    for edit in mutant.edits:
        text = texts[edit.file] if edit.file in texts else read(edit.file)
        matches = list(_pattern(edit.find).finditer(text))
        if len(matches) != 1:
            what = "not found" if not matches else f"found {len(matches)} times"
            msg = f"mutant {mutant.id}: pattern {what} in {edit.file}: {edit.find!r}"
            raise PatternError(msg)
        m = matches[0]
        texts[edit.file] = text[: m.start()] + edit.replace + text[m.end() :]
    return texts


def apply(mutant: Mutant, tree: Path) -> None:
    """Apply the mutant's edits to ``tree``; raise PatternError naming a pattern not found."""
    for name, text in mutate(mutant, lambda name: (tree / name).read_text()).items():
        (tree / name).write_text(text)


def copy_tree(dest: Path, rev: str | None) -> None:
    """The working tree's files (tracked and new, not ignored), or those of commit ``rev``."""
    if rev is not None:
        archive = subprocess.run(
            ["git", "-C", str(ROOT), "archive", rev], capture_output=True, check=True
        ).stdout
        subprocess.run(["tar", "-x", "-C", str(dest)], input=archive, check=True)
        return
    files = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "-z", "--cached", "--others", "--exclude-standard"],
        capture_output=True,
        check=True,
    ).stdout.split(b"\0")
    for name in filter(None, files):
        src = ROOT / os.fsdecode(name)
        if src.is_file():
            target = dest / os.fsdecode(name)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, target)


def pytest_args(tests: tuple[str, ...]) -> list[str]:
    files = sorted({t.split("::")[0] for t in tests})
    names = sorted({t.split("::")[1] for t in tests if "::" in t})
    return [*files, *(["-k", " or ".join(names)] if names else [])]


def run_tests(
    tree: Path, tests: tuple[str, ...], env: dict[str, str], timeout: float = RUN_TIMEOUT
) -> tuple[int, str]:
    cmd = [sys.executable, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider",
           *pytest_args(tests)]  # fmt: skip
    # The tree's Julia side is compiled first, into a cache depot inside the tree, as
    # `make setup` does for a checkout: kernels then start the way users' kernels do.
    full_env = {**os.environ, **env, "PYTHONPATH": str(tree),
                "JUTUL_JKERNEL_DEPOT": str(tree / ".jkernel-depot")}  # fmt: skip
    compiled = subprocess.run(
        ["julia", "--startup-file=no", str(tree / "julia" / "server.jl"), "--precompile"],
        env=full_env, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False,
    )  # fmt: skip
    if compiled.returncode != 0:
        return -1, f"compiling the tree's Julia side failed:\n{compiled.stdout}{compiled.stderr}"
    try:
        done = subprocess.run(
            cmd, cwd=tree, env=full_env, capture_output=True, text=True, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        return -1, f"no result within {timeout:g} s"
    return done.returncode, done.stdout + done.stderr


def julia_has(expression: str) -> bool:
    """Whether ``expression`` is true in the Julia on PATH (a mutant's ``julia_needs``), run
    in the repository's root (a probe in scripts/mutants/probes is included by that path)."""
    done = subprocess.run(
        ["julia", "--startup-file=no", "-e", f"print(({expression}) === true)"],
        capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False, cwd=ROOT,
    )  # fmt: skip
    if done.returncode != 0:
        raise SystemExit(f"julia_needs {expression!r} failed in Julia:\n{done.stderr}")
    return done.stdout.strip() == "true"


def summary(output: str) -> str:
    lines = [line for line in output.strip().splitlines() if line.strip()]
    return lines[-1] if lines else "(no output)"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("ids", nargs="*", help="mutant ids (default: all)")
    parser.add_argument("--list", action="store_true", help="list the mutants and exit")
    parser.add_argument("--tree", metavar="REV", help="mutate this commit's tree instead")
    parser.add_argument("--no-baseline", action="store_true", help="skip the unbroken run")
    parser.add_argument(
        "--check", action="store_true", help="only check that every pattern applies"
    )
    args = parser.parse_args()
    chosen = [m for m in MUTANTS if not args.ids or m.id in args.ids]
    unknown = set(args.ids) - {m.id for m in MUTANTS}
    if unknown:
        parser.error(f"no such mutant: {', '.join(sorted(unknown))}")
    if args.list:
        for m in chosen:
            print(f"{m.id:4} {m.promise}\n     guarded by {', '.join(m.tests)}")
            if m.julia_needs:
                print(f"     where Julia has {m.julia_needs}")
        return 0
    with tempfile.TemporaryDirectory(prefix="jk-mutants-") as tmp:
        base = Path(tmp) / "base"
        base.mkdir()
        copy_tree(base, args.tree)
        inapplicable = {}
        for m in chosen:  # every pattern must be found before anything runs
            probe = Path(tmp) / "probe"
            shutil.copytree(base, probe)
            try:
                apply(m, probe)
            except PatternError as exc:
                if args.tree is None:
                    raise SystemExit(str(exc)) from None
                inapplicable[m.id] = str(exc)  # another commit's code: report, go on
            shutil.rmtree(probe)
        chosen = [m for m in chosen if m.id not in inapplicable]
        for mid in inapplicable:
            print(f"{mid:4} {'n/a (code not in this tree)':28}")
        if args.check:
            print(f"{len(chosen)} mutants apply")
            return 0
        needs = {m.julia_needs for m in chosen if m.julia_needs}
        lacking = {expression for expression in needs if not julia_has(expression)}
        not_run = [m for m in chosen if m.julia_needs in lacking]
        chosen = [m for m in chosen if m not in not_run]
        for m in not_run:
            print(f"{m.id:4} {'not run (this Julia lacks it)':28}         {m.julia_needs}")
        if not args.no_baseline:
            tests = tuple(sorted({t for m in chosen for t in m.tests}))
            env = {k: v for m in chosen for k, v in m.env.items()}
            code, out = run_tests(base, tests, env, BASELINE_TIMEOUT)
            if code not in (0, 5):
                print(out[-3000:])
                print(f"baseline: the guarding tests fail without any mutant ({summary(out)})")
                return 2
            print(f"baseline: guarding tests pass unbroken ({summary(out)})", flush=True)
        survived = errors = 0
        for m in chosen:
            tree = Path(tmp) / m.id
            shutil.copytree(base, tree)
            apply(m, tree)
            t0 = time.monotonic()
            code, out = run_tests(tree, m.tests, m.env)
            took = time.monotonic() - t0
            if code == 1:
                verdict = "killed"
            elif code in (0, 5):  # 5: no guarding test exists in this tree
                verdict = "survived" if code == 0 else "survived (no guarding test)"
                survived += 1
            else:
                verdict = f"error (pytest exit {code})"
                errors += 1
            print(f"{m.id:4} {verdict:28} {took:6.0f} s  {m.promise}", flush=True)
            if code not in (0, 1, 5):
                print("     " + "\n     ".join(out.strip().splitlines()[-15:]))
            shutil.rmtree(tree)
    print(f"{len(chosen) - survived - errors} killed, {survived} survived, {errors} errors", end="")
    print(f", {len(not_run)} not run on this Julia" if not_run else "")
    return 1 if survived or errors else 0


if __name__ == "__main__":
    sys.exit(main())
