"""The doctor, run as users run it (``python -m jutul_jkernel.doctor``), on the local Julia.

Every row must pass here, since 1.5.3 is what the suite proves the kernel on; a row that fails
must say why, the other rows must still run, and the exit status must say that one failed.
Every Julia the doctor starts carries this session's mark (conftest), so the leftover guard
fails a test whose doctor left one behind.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

REPO_ROOT = Path(__file__).resolve().parent.parent
# The doctor bounds each check (120 s) itself; a whole run takes ~10 s here. Past this the
# doctor is stuck, which the test reports rather than waits on.
DOCTOR_TIMEOUT = 300.0

# One label per check, in the order the doctor runs them (the promise of issues 20 and 27).
ROWS = [
    "start",
    "stdout",
    "stderr",
    "logging",
    "colour",
    "display HTML",
    "display PNG",
    "update_display",
    "clear_output",
    "error",
    "help",
    "pkg",
    "shell",
    "soft scope",
    "ans",
    "complete",
    "inspect",
    "is_complete",
    "readline",
    "using",
    "interrupt",
    "exit",
]

ROW = re.compile(r"^(ok|FAIL) +(\d+) ms  ([^:]+): ")


def doctor(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """Run ``python -m jutul_jkernel.doctor`` with ``args``; its output as text."""
    return subprocess.run(
        [sys.executable, "-m", "jutul_jkernel.doctor", *args],
        capture_output=True,
        text=True,
        timeout=DOCTOR_TIMEOUT,
        env={**os.environ, **(env or {})},
        cwd=REPO_ROOT,
        check=False,
    )


def rows(output: str) -> dict[str, str]:
    """Each row's label (the text before its colon) and outcome, in the order printed."""
    found = {}
    for line in output.splitlines():
        m = ROW.match(line)
        if m:
            found[m.group(3)] = m.group(1)
    return found


def julia_binary() -> str:
    """The julia binary that runs, as Julia itself names it (it may differ from PATH's)."""
    done = subprocess.run(
        ["julia", "--startup-file=no", "-e", "print(joinpath(Sys.BINDIR, Base.julia_exename()))"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    return done.stdout


def test_every_check_passes_on_this_julia() -> None:
    """All rows ok and exit 0, then the Julia that ran and the start time beside bare julia."""
    done = doctor()
    out = done.stdout
    assert done.returncode == 0, out + done.stderr
    assert rows(out) == dict.fromkeys(ROWS, "ok"), out
    assert list(rows(out)) == ROWS
    assert f"{len(ROWS)}/{len(ROWS)} checks passed" in out.splitlines()
    version = subprocess.run(
        ["julia", "--startup-file=no", "-e", "print(VERSION)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    # The binary Julia names itself, and the command given where that is another file (a
    # launcher: juliaup's, or make setup's for Debian's 1.5.3).
    binary, given = julia_binary(), shutil.which("julia") or "julia"
    seen = f"Julia {version} at {binary}"
    if given != binary:
        seen += f" (given {given})"
    assert seen in out.splitlines(), out
    timing = re.search(
        r"^start to first result: (\d+) ms; bare `.*julia -e nothing`: (\d+) ms \((\d+\.\d)x\)$",
        out,
        re.MULTILINE,
    )
    assert timing is not None, out
    assert "Julia alone: an error thrown in a function and caught: ok" in out.splitlines(), out


def test_a_failing_check_is_reported_and_the_others_still_run() -> None:
    """With soft scope turned off (a kernel setting), the soft-scope row fails with Julia's
    error, every other row passes, and the exit status is 1."""
    done = doctor(env={"JUTUL_JKERNEL_SOFTSCOPE": "no"})
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert rows(out) == {row: "FAIL" if row == "soft scope" else "ok" for row in ROWS}, out
    failing = out.split("soft scope: ", 1)[1].splitlines()
    assert "UndefVarError" in failing[1], out
    assert f"{len(ROWS) - 1}/{len(ROWS)} checks passed" in out.splitlines()
    assert "Please report this at" in out


def test_a_julia_that_cannot_start_fails_every_check(tmp_path: Path) -> None:
    """No Julia at the given path: the start row names it, every other row is not run and
    fails, and the exit status is 1."""
    missing = tmp_path / "no-julia-here" / "julia"
    done = doctor("--julia", str(missing))
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert rows(out) == dict.fromkeys(ROWS, "FAIL"), out
    start = out.split("start: ", 1)[1].splitlines()
    assert str(missing) in start[1], out
    assert out.count("not run: Julia did not start") == len(ROWS) - 1
    assert f"0/{len(ROWS)} checks passed" in out.splitlines()


def test_a_julia_that_crashes_on_its_own_is_named_as_the_cause(tmp_path: Path) -> None:
    """A "julia" that is killed by SIGSEGV whatever it runs (as Debian's 1.5.3 is beside a newer
    libunwind, at every error thrown): every row fails, the line on Julia alone says how it died
    outside the kernel, and the doctor says to repair that Julia instead of asking for a report."""
    crashing = tmp_path / "julia"
    crashing.write_text("#!/bin/sh\nkill -SEGV $$\n")
    crashing.chmod(0o755)
    done = doctor("--julia", str(crashing))
    out = done.stdout
    assert done.returncode == 1, out + done.stderr
    assert rows(out) == dict.fromkeys(ROWS, "FAIL"), out
    alone = [line for line in out.splitlines() if line.startswith("Julia alone: ")]
    assert len(alone) == 1, out
    assert str(crashing) in alone[0], out
    assert alone[0].endswith(
        "it was killed by SIGSEGV (a crash inside Julia or a library it called)"
    )
    assert "This Julia fails on its own, outside the kernel" in out, out
    assert "Please report this at" not in out, out
