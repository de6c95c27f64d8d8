"""Check, on the user's own Julia, every path a notebook takes: ``python -m jutul_jkernel.doctor``.

The doctor starts Julia through the real :class:`~jutul_jkernel.supervisor.JuliaSupervisor`, with
the settings a kernel would use (the installer's Julia options, ``--color=yes --project=@.`` by
default), and runs a fixed list of checks, each a cell or a query with one clear expected
outcome: output on stdout and stderr, logging, colour, displays, errors, the ``?``, ``]`` and
``;`` modes, soft scope and ``ans``, the three queries, ``readline``, compiling a package from a
cell, an interrupt that keeps state, and a death that is explained. It prints one line per
check (``ok`` or ``FAIL``, milliseconds, and on a FAIL what went wrong), then the Julia that
actually ran (version from the server's INF frame, path from its ``Sys.BINDIR``) and the time
from start to first result beside bare ``julia -e nothing``, and whether that Julia, alone,
survives an error thrown in a function and caught (a Julia that does not fails every check, and
the doctor says so rather than ask for a report). Exit status 1 on any FAIL.
The checks themselves, and the Julia code they run, are :mod:`jutul_jkernel.tools.doctor_checks`;
this module runs and times them and reports.

Invariants: every check is bounded by its own timeout, a check that fails never stops the ones
after it, and the supervisor is shut down (Julia and its process group gone) however the run
ends. The doctor imports the supervisor, never the kernel: what it checks is Julia and the
server, not Jupyter.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shlex
import shutil
import signal
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata

from jutul_jkernel import settings
from jutul_jkernel.supervisor.errors import JuliaDiedError, JuliaStartupError, describe_exit
from jutul_jkernel.supervisor.julia_options import add_julia_options, julia_flags
from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor
from jutul_jkernel.supervisor.juliaup import julia_argv, split_channel
from jutul_jkernel.supervisor.launch_settings import (
    split_startup_file_flag,  # the supervisor's rule: bare julia matches it
)
from jutul_jkernel.tools.doctor_checks import CheckFailed, Checks, colour_wanted, expect, plain

# Each check waits this long at most. The slowest are `] st` (loading Pkg) and compiling a
# package from a cell (a second Julia process), about a second each here on 1.5.3 and several
# on 1.10+ or a cold disk; a cell past this is interrupted by the supervisor (which restarts
# Julia if it must), the row fails, and the next check goes on.
_CHECK_TIMEOUT = 120.0
# After a check timed out, how long to wait for Julia to answer again: the supervisor's whole
# interrupt escalation (about a minute at worst, ending in a restart) and a fresh start.
_SETTLE_WAIT = 150.0
# Bare `julia -e nothing` is timed this many times; the fastest counts (the first run may
# read Julia from a cold disk, which the supervisor's start then does not).
_BARE_RUNS = 2
_BARE_TIMEOUT = 60.0
# Julia alone, outside the kernel: an error thrown in a function and caught, as every cell's
# error and the server's own start do. A Julia killed by this fails every check, and the
# kernel can only say how it died ("killed by SIGSEGV"): Debian's julia 1.5.3 beside a
# libunwind newer than the 1.3.2 it was built with dies so as any error unwinds (in libunwind's
# dwarf_search_unwind_table, gdb), seen with bookworm's 1.6.2.
_PROBE_CODE = 'f() = error("probe"); try f() catch end'
_PROBE_LABEL = "an error thrown in a function and caught"
# How many lines of a FAIL's message its row shows.
_DETAIL_LINES = 8

_PROJECT_NAME = "jutul-jkernel"
# The error of every row after a start that failed.
_NOT_RUN = "not run: Julia did not start"


@dataclass
class CheckResult:
    """One row of the doctor's report."""

    label: str
    ok: bool
    millis: float
    error: str = ""
    timed_out: bool = False


@dataclass
class Report:
    """Everything the doctor found: the rows, the Julia that ran, and the start-up times."""

    julia_given: str
    results: list[CheckResult] = field(default_factory=list)
    julia_version: str | None = None
    julia_path: str | None = None
    first_result_ms: float | None = None
    bare_command: list[str] = field(default_factory=list)
    bare_ms: float | None = None
    bare_error: str | None = None
    probe_command: list[str] = field(default_factory=list)
    probe_error: str | None = None  # how Julia alone failed _PROBE_CODE, None when it did not
    julia_broken: bool = False  # a signal killed it: Julia's fault, not the kernel's

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if not r.ok]

    @property
    def ok(self) -> bool:
        return bool(self.results) and not self.failed


# ---- running ----


async def _timed(label: str, check: Callable[[], Awaitable[None]], timeout: float) -> CheckResult:
    t0 = time.perf_counter()
    try:
        await asyncio.wait_for(check(), timeout)
    except CheckFailed as exc:
        return CheckResult(label, False, _ms(t0), str(exc))
    except (TimeoutError, asyncio.TimeoutError):
        return CheckResult(label, False, _ms(t0), f"no answer within {timeout:g} s", True)
    except Exception as exc:  # Julia died, would not start, or broke the protocol: a FAIL too
        return CheckResult(label, False, _ms(t0), f"{type(exc).__name__}: {exc}")
    return CheckResult(label, True, _ms(t0))


async def _settle(sup: JuliaSupervisor) -> None:
    """After a check timed out: wait, outside any check's clock, until Julia answers again.

    The supervisor interrupts the abandoned cell (restarting Julia if it must) and holds the
    next execution until then; without this wait the next check would spend its own time
    on that.
    """
    # Named failures only: the next checks fail too then, and say how.
    with contextlib.suppress(JuliaDiedError, JuliaStartupError, TimeoutError, asyncio.TimeoutError):
        await asyncio.wait_for(sup.execute("nothing"), _SETTLE_WAIT)


def _ms(t0: float) -> float:
    return (time.perf_counter() - t0) * 1000


async def _run_once(command: list[str]) -> tuple[float | None, str | None, int | None]:
    """Run ``command`` (no input, output dropped): milliseconds if it exited 0, else None and
    why not; and its exit code (negative: the signal that killed it), or None when it could not
    be started or did not finish."""
    t0 = time.perf_counter()
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
    except OSError as exc:
        return None, f"could not run it: {exc}", None
    try:
        code = await asyncio.wait_for(proc.wait(), _BARE_TIMEOUT)
    except (TimeoutError, asyncio.TimeoutError):
        proc.kill()
        await proc.wait()
        return None, f"it did not finish within {_BARE_TIMEOUT:g} s", None
    if code != 0:
        return None, f"it {describe_exit(code)}", code
    return _ms(t0), None, code


async def _bare_start(command: list[str]) -> tuple[float | None, str | None]:
    """The fastest of _BARE_RUNS runs of ``command`` in milliseconds, or why there is none."""
    best: float | None = None
    for _ in range(_BARE_RUNS):
        elapsed, why, _ = await _run_once(command)
        if elapsed is None:
            return None, why
        best = elapsed if best is None else min(best, elapsed)
    return best, None


async def diagnose(
    sup: JuliaSupervisor,
    *,
    timeout: float = _CHECK_TIMEOUT,
    on_row: Callable[[CheckResult], None] | None = None,
) -> Report:
    """Run every check on ``sup`` (not yet started), in order; shut it down at the end."""
    # As the supervisor runs it: PATH's entry as it is (juliaup's launcher stays the
    # launcher), and a `+channel` first.
    julia = shutil.which(sup.julia) or sup.julia
    channel, _ = split_channel(sup.julia_args)
    report = Report(julia_given=shlex.join(julia_argv(julia, [channel] if channel else [])))

    def add(row: CheckResult) -> None:
        report.results.append(row)
        if on_row is not None:
            on_row(row)

    # Julia's own start, measured like bench's baseline: the same startup-file choice as the
    # supervisor's Julia (which runs the startup file in its first cell).
    _, wants_startup = split_startup_file_flag(sup.julia_args)
    flags = [*([channel] if channel else []), *([] if wants_startup else ["--startup-file=no"])]
    report.bare_command = julia_argv(julia, flags, "-e", "nothing")
    report.bare_ms, report.bare_error = await _bare_start(report.bare_command)
    report.probe_command = julia_argv(julia, flags, "-e", _PROBE_CODE)
    _, report.probe_error, code = await _run_once(report.probe_command)
    # Killed by a signal: a crash of Julia's own. An exit status may be the user's startup
    # file failing (the supervisor runs it in the first cell instead), and a timeout a slow
    # machine: said on the line, not blamed on Julia.
    report.julia_broken = code is not None and code < 0

    checks = Checks(sup, colour_wanted(sup.julia_args))
    try:
        start_label = "start: Julia starts and answers 1 + 1"
        t0 = time.perf_counter()
        started = False

        async def start() -> None:
            nonlocal started
            await sup.start()
            started = True
            got = await checks.value("1 + 1")
            report.first_result_ms = _ms(t0)
            expect(got == "2", f"1 + 1 gave {got!r}")

        # A start may load JKernel from source (no compile cache yet): give it the
        # supervisor's own start-up bound on top of a check's.
        first = await _timed(start_label, start, timeout + sup.startup_timeout)
        add(first)
        # The Julia that ran, as its server reported it (INF): the binary behind its
        # Sys.BINDIR, never a launcher.
        report.julia_version, report.julia_path = sup.julia_version, sup.julia_path
        if not started:
            for label, _ in checks.rows():
                add(CheckResult(label, False, 0.0, _NOT_RUN))
            return report
        if first.timed_out:
            await _settle(sup)
        for label, check in checks.rows():
            row = await _timed(label, check, timeout)
            add(row)
            if row.timed_out:
                await _settle(sup)
        return report
    finally:
        await sup.shutdown()
        shutil.rmtree(checks.tmp, ignore_errors=True)


def supervisor_for(
    julia: str | None,
    julia_args: Sequence[str] = (),
    *,
    threads: str | None = None,
    env: dict[str, str] | None = None,
) -> JuliaSupervisor:
    """A supervisor configured as a kernel would be, with Pkg offline: `] st` needs no network
    (JULIA_PKG_OFFLINE, read by Pkg's __init__ in JuliaLang/Pkg.jl release-1.10, release-1.12
    and master, and by the Pkg of 1.5)."""
    return JuliaSupervisor(
        julia,
        list(julia_args),
        threads=threads,
        env={**(env or {}), "JULIA_PKG_OFFLINE": "true"},
    )


def run(
    julia: str | None,
    julia_args: Sequence[str] = (),
    *,
    threads: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = _CHECK_TIMEOUT,
    on_row: Callable[[CheckResult], None] | None = None,
) -> Report:
    """Run the doctor synchronously (a fresh event loop); Julia is gone when it returns."""
    sup = supervisor_for(julia, julia_args, threads=threads, env=env)
    try:
        return asyncio.run(diagnose(sup, timeout=timeout, on_row=on_row))
    finally:
        sup.kill_now()  # if the loop was torn down before shutdown finished


# ---- reporting ----


def row_line(row: CheckResult) -> str:
    """``ok`` or ``FAIL``, milliseconds, the label; a FAIL's error follows, indented."""
    head = f"{'ok' if row.ok else 'FAIL':<4} {row.millis:>7.0f} ms  {row.label}"
    if row.ok:
        return head
    lines = plain(row.error).strip().splitlines() or ["(no reason given)"]
    shown = lines[:_DETAIL_LINES] + (["..."] if len(lines) > _DETAIL_LINES else [])
    return "\n".join([head, *(f"{'':17}{line}" for line in shown)])


def julia_line(report: Report) -> str:
    version = report.julia_version or "(unknown version: it did not start)"
    path = report.julia_path or report.julia_given
    if report.julia_path in (None, report.julia_given):
        return f"Julia {version} at {path}"
    return f"Julia {version} at {path} (given {report.julia_given})"


def timing_line(report: Report) -> str:
    first = f"{report.first_result_ms:.0f} ms" if report.first_result_ms is not None else "none"
    bare = shlex.join(report.bare_command)
    if report.bare_ms is None:
        return f"start to first result: {first}; bare `{bare}`: not measured ({report.bare_error})"
    ratio = ""
    if report.first_result_ms is not None and report.bare_ms > 0:
        ratio = f" ({report.first_result_ms / report.bare_ms:.1f}x)"
    return f"start to first result: {first}; bare `{bare}`: {report.bare_ms:.0f} ms{ratio}"


def probe_line(report: Report) -> str:
    """Whether Julia alone survived an error thrown in a function and caught."""
    if report.probe_error is None:
        return f"Julia alone: {_PROBE_LABEL}: ok"
    command = shlex.join(report.probe_command)
    return f"Julia alone: {_PROBE_LABEL}: `{command}`: {report.probe_error}"


def julia_broken_advice() -> str:
    return (
        "This Julia fails on its own, outside the kernel, so every check fails with it: repair "
        "or replace it, then run the doctor again. A crash as an error unwinds often means a "
        "system library (such as libunwind) other than the one that Julia was built with."
    )


def issues_url() -> str | None:
    """The project's issue tracker, from the installed package's metadata (Project-URL)."""
    try:
        urls = metadata.metadata(_PROJECT_NAME).get_all("Project-URL") or []
    except metadata.PackageNotFoundError:
        return None
    for entry in urls:
        name, _, url = str(entry).partition(",")
        if name.strip().lower() in ("issues", "bug tracker", "tracker", "bugs"):
            return url.strip()
    return None


def where_to_report() -> str:
    url = issues_url()
    place = url or f"the {_PROJECT_NAME} issue tracker"
    return f"Please report this at {place}, with the whole output of the doctor."


def summary(report: Report) -> list[str]:
    """The installer's few lines: one when every check passed, else the failing rows too."""
    n, bad = len(report.results), report.failed
    on = f"Julia {report.julia_version or '?'} ({report.julia_path or report.julia_given})"
    if not bad:
        return [f"doctor: {n}/{n} checks passed on {on}"]
    shown = [row for row in bad if row.error != _NOT_RUN]
    not_run = len(bad) - len(shown)
    return [
        f"doctor: {len(bad)} of {n} checks FAILED on {on}:",
        *(f"  {line}" for row in shown for line in row_line(row).splitlines()),
        *([f"  ({not_run} more checks not run: Julia did not start)"] if not_run else []),
        *([f"  {probe_line(report)}"] if report.probe_error is not None else []),
        "  " + (julia_broken_advice() if report.julia_broken else where_to_report()),
    ]


# ---- command line ----


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jutul-jkernel-doctor",
        description=(
            "Check that the kernel works on a Julia: start it as the kernel would and run every "
            "path a notebook takes (output, displays, errors, ?/]/; modes, queries, input, "
            "compiling a package, interrupts, deaths), one line per check. Exit status 1 if "
            "any check fails."
        ),
        epilog=(
            "Settings not given here come from the same environment variables as the kernel's:\n"
            f"{settings.JULIA}, {settings.JULIA_ARGS}, {settings.THREADS},\n"
            f"{settings.STARTUP_TIMEOUT}.\n\n"
            "Examples:\n"
            "  python -m jutul_jkernel.doctor\n"
            "  python -m jutul_jkernel.doctor --julia ~/.juliaup/bin/julia --project ~/myproj"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_julia_options(parser, "the doctor")
    parser.add_argument(
        "--no-color",
        action="store_true",
        help="run Julia with --color=no, as a kernel installed with --no-color does",
    )
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=settings.seconds_argument,
        default=_CHECK_TIMEOUT,
        help=f"how long each check may take (default: {_CHECK_TIMEOUT:g})",
    )
    return parser


def _interrupt_on_term(signum: int, frame: object) -> None:
    # SIGTERM ends the doctor as Ctrl-C does: asyncio.run cancels the checks and the
    # supervisor is shut down on the way out.
    raise KeyboardInterrupt


def main(argv: list[str] | None = None) -> int:
    """Run the doctor as the command line says; print its report; return the exit status."""
    args = _parser().parse_args(argv)
    julia_args = julia_flags(args)
    print(f"jutul-jkernel doctor: Julia flags {shlex.join(julia_args)}", flush=True)
    with contextlib.suppress(ValueError):  # not the main thread: leave SIGTERM alone
        signal.signal(signal.SIGTERM, _interrupt_on_term)
    try:
        report = run(
            args.julia,
            julia_args,
            threads=args.threads,
            env=dict(args.env) or None,
            timeout=args.timeout,
            on_row=lambda row: print(row_line(row), flush=True),
        )
    except KeyboardInterrupt:
        print("interrupted; Julia was shut down", file=sys.stderr)
        return 128 + signal.SIGINT
    n, bad = len(report.results), len(report.failed)
    print(f"{n - bad}/{n} checks passed")
    print(julia_line(report))
    print(timing_line(report))
    print(probe_line(report))
    if bad:
        print(julia_broken_advice() if report.julia_broken else where_to_report())
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
