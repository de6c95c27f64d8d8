"""Check, on the user's own Julia, every path a notebook takes: ``python -m jutul_jkernel.doctor``.

The doctor starts Julia through the real :class:`~jutul_jkernel.supervisor.JuliaSupervisor`, with
the settings a kernel would use (the installer's Julia options, ``--color=yes --project=@.`` by
default), and runs a fixed list of checks, each a cell or a query with one clear expected
outcome: output on stdout and stderr, logging, colour, displays, errors, the ``?``, ``]`` and
``;`` modes, soft scope and ``ans``, the three queries, ``readline``, compiling a package from a
cell, an interrupt that keeps state, and a death that is explained. It prints one line per
check (``ok`` or ``FAIL``, milliseconds, and on a FAIL what went wrong), then the Julia that
actually ran (version from the server's INF frame, path from its ``Sys.BINDIR``) and the time
from start to first result beside bare ``julia -e nothing``. Exit status 1 on any FAIL.

Invariants: every check is bounded by its own timeout, a check that fails never stops the ones
after it, and the supervisor is shut down (Julia and its process group gone) however the run
ends. The doctor imports the supervisor, never the kernel: what it checks is Julia and the
server, not Jupyter.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import re
import secrets
import shlex
import shutil
import signal
import struct
import sys
import tempfile
import time
import zlib
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path

from . import settings
from .errors import JuliaDiedError, JuliaStartupError
from .julia_options import add_julia_options, julia_flags
from .julia_process import split_startup_file_flag  # the supervisor's rule: bare julia matches it
from .juliaup import julia_argv, split_channel
from .results import ExecutionResult
from .sink import Display, OutputSink
from .supervisor import JuliaSupervisor

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
# While waiting for a cell to reach its `sleep`: how often to look for the file it writes.
_POLL = 0.02
# How much of a failed cell's output a FAIL line quotes.
_QUOTE_CHARS = 400
_DETAIL_LINES = 8

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# The package the `using` row writes, compiles and loads; a name no user package has.
_PROBE = "JKernelDoctorProbe"
# A fixed uuid: the probe package is the same package on every run (its compiled cache goes
# to a temporary depot, never the user's).
_PROBE_UUID = "6a1e9f3c-2b7d-4c58-9e0a-d4f1b8c27e65"

_PROJECT_NAME = "jutul-jkernel"
# The error of every row after a start that failed.
_NOT_RUN = "not run: Julia did not start"

# The `using` row's cell. Its value says whether a compiled cache file landed in the fresh depot.
_USING_FRESH_PACKAGE = """
doctor_root, doctor_depot = mktempdir(), mktempdir()
mkpath(joinpath(doctor_root, "PROBE", "src"))
write(joinpath(doctor_root, "PROBE", "Project.toml"), "name = \\"PROBE\\"\\nuuid = \\"UUID\\"\\n")
write(joinpath(doctor_root, "PROBE", "src", "PROBE.jl"),
      "module PROBE\\n__init__() = println(\\"PROBE __init__ ran\\")\\nend\\n")
push!(LOAD_PATH, doctor_root)
pushfirst!(DEPOT_PATH, doctor_depot)
try
    using PROBE
finally
    popfirst!(DEPOT_PATH)
    pop!(LOAD_PATH)
end
any(f -> endswith(f, ".ji"), (f for (_, _, files) in walkdir(doctor_depot) for f in files))
""".replace("PROBE", _PROBE).replace("UUID", _PROBE_UUID)


# The `] st` row checks the kernel's Pkg mode, not the network. Pkg 1.7 and newer install the
# General registry on first use when no registry is reachable (JuliaLang/Pkg.jl release-1.10
# src/API.jl: status, like every command but precompile, calls
# Registry.download_default_registries; JULIA_PKG_OFFLINE does not stop it), which fails on a
# machine with no network. So where none is reachable, this cell puts an empty registry in a
# temporary depot at the end of DEPOT_PATH (for the rest of the doctor's session, whose Julia
# is its own), and returns that depot ("" otherwise).
_EMPTY_REGISTRY = """
let Pkg = JKernel.load_pkg(), depot = ""
    registry = isdefined(Pkg, :Registry) ? Pkg.Registry : nothing
    if registry !== nothing && isdefined(registry, :reachable_registries) &&
            isempty(registry.reachable_registries())
        depot = mktempdir()
        dir = mkpath(joinpath(depot, "registries", "JKernelDoctorEmpty"))
        write(joinpath(dir, "Registry.toml"), REGISTRY_TOML)
        push!(DEPOT_PATH, depot)
    end
    depot
end
"""
_EMPTY_REGISTRY_TOML = (
    'name = "JKernelDoctorEmpty"\nuuid = "0f6c3b8e-5a2d-4e71-9c34-7d2a1b9e8f50"\n\n[packages]\n'
)


def _tiny_png() -> bytes:
    """A valid 1x1 PNG (one red pixel), built here so that its bytes are visibly a PNG's."""

    def chunk(kind: bytes, body: bytes) -> bytes:
        return (
            struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))
        )

    header = struct.pack(">IIBBBBB", 1, 1, 8, 2, 0, 0, 0)  # 1x1, 8-bit RGB
    pixels = zlib.compress(b"\x00\xff\x00\x00")  # filter byte, then R G B
    return (
        b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", pixels) + chunk(b"IEND", b"")
    )


_PNG = _tiny_png()


class CheckFailed(Exception):
    """A check's expectation did not hold; the message says what was seen instead."""


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

    @property
    def failed(self) -> list[CheckResult]:
        return [r for r in self.results if not r.ok]

    @property
    def ok(self) -> bool:
        return bool(self.results) and not self.failed


# ---- talking to Julia ----


class _Cell:
    """What one execution produced: output per stream, display messages, the result."""

    def __init__(self) -> None:
        self.chunks: list[tuple[str, bytes]] = []
        self.displays: list[Display] = []
        self.result: ExecutionResult | None = None

    def on_output(self, stream: str, data: bytes) -> None:
        self.chunks.append((stream, data))

    def text(self, stream: str = "stdout") -> str:
        return b"".join(d for s, d in self.chunks if s == stream).decode("utf-8", "replace")

    def ok(self) -> ExecutionResult:
        """The result, which must be ``ok``; else fail naming the error and the cell's stderr."""
        r = self.result
        assert r is not None
        if r.status == "ok":
            return r
        if r.error is not None:
            # Julia's showerror often starts with the type's name already (TypeError: ...).
            ename, evalue = r.error.ename, r.error.evalue
            what = "the cell failed: " + (
                evalue if evalue.startswith(ename) else f"{ename}: {evalue}"
            )
        else:
            what = f"the cell ended {r.status}: {r.text}"
        err = _plain(self.text("stderr")).strip()
        if err:
            what += f"\nits stderr: {_quote(err)}"
        raise CheckFailed(what)


def _plain(text: str) -> str:
    return _ANSI.sub("", text)


def _quote(text: str) -> str:
    text = text if len(text) <= _QUOTE_CHARS else text[:_QUOTE_CHARS] + "..."
    return repr(text)


def _expect(condition: bool, message: str) -> None:
    if not condition:
        raise CheckFailed(message)


def _julia_string(text: str) -> str:
    """A Julia string literal holding ``text`` (``$`` and ``\\`` escaped too)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def _colour_wanted(julia_args: Sequence[str]) -> bool:
    """Whether Julia runs with colour: its last ``--color=`` flag says yes (the kernelspec's
    default); without one, Julia's own default is off when stdout is no terminal."""
    values = [a.partition("=")[2] for a in julia_args if a.startswith("--color=")]
    return bool(values) and values[-1] == "yes"


class _Doctor:
    """The checks, run in order against one supervisor; each is a method that raises
    CheckFailed (or times out) when its expectation does not hold."""

    def __init__(self, sup: JuliaSupervisor, colour: bool) -> None:
        self.sup = sup
        self.colour = colour
        self.count = 0
        self.tmp = Path(tempfile.mkdtemp(prefix="jutul-jkernel-doctor-"))

    async def cell(
        self, code: str, on_input: Callable[[str, bool], Awaitable[str]] | None = None
    ) -> _Cell:
        """Run ``code`` as notebook cell ``In[n]`` (so that ``ans`` and history apply)."""
        self.count += 1
        cell = _Cell()
        sink = OutputSink(stream=cell.on_output, display=cell.displays.append, input=on_input)
        cell.result = await self.sup.execute(code, sink, name=f"In[{self.count}]")
        return cell

    async def value(self, code: str) -> str:
        """The text of a cell's value, the cell having to succeed."""
        return (await self.cell(code)).ok().text

    def rows(self) -> list[tuple[str, Callable[[], Awaitable[None]]]]:
        colour = (
            "colour: printstyled carries ANSI codes (--color=yes)"
            if self.colour
            else "colour: printstyled is plain (colour is off)"
        )
        return [
            ("stdout: println arrives on stdout", self.stdout),
            ("stderr: println(stderr, ...) arrives on stderr", self.stderr),
            ("logging: @info and @warn arrive on stderr with their text", self.logging),
            (colour, self.colour_codes),
            ("display HTML: display(HTML(...)) sends text/html", self.display_html),
            ("display PNG: a value shown as image/png arrives as that PNG", self.display_png),
            ("update_display: JKernel.update_display replaces by display_id", self.update),
            ("clear_output: JKernel.clear_output(true) asks to clear", self.clear_output),
            ("error: a failing cell gives ename, evalue and a traceback", self.error),
            ("help: ?sin is the cell's value", self.help),
            ("pkg: ] st runs offline", self.pkg),
            ("shell: ;echo hi prints hi", self.shell),
            ("soft scope: a top-level loop updates a global", self.soft_scope),
            ("ans: ans is the previous cell's value", self.ans),
            ("complete: printl completes to println", self.complete),
            ("inspect: sin shows its docstring", self.inspect),
            ("is_complete: an open for is incomplete, x = 1 complete", self.is_complete),
            ("readline: readline() is answered by the frontend", self.readline),
            ("using: a cell's using compiles a fresh package", self.using_fresh_package),
            ("interrupt: sleep(100) stops and variables are kept", self.interrupt),
            ("exit: exit(3) is explained and the next cell runs fresh", self.exit),
        ]

    # ---- output ----

    async def stdout(self) -> None:
        cell = await self.cell('println("doctor stdout")')
        cell.ok()
        got = cell.text()
        _expect(got == "doctor stdout\n", f"stdout was {_quote(got)}, not 'doctor stdout\\n'")

    async def stderr(self) -> None:
        cell = await self.cell('println(stderr, "doctor stderr")')
        cell.ok()
        got = cell.text("stderr")
        _expect("doctor stderr\n" in got, f"stderr was {_quote(got)}, without 'doctor stderr'")

    async def logging(self) -> None:
        cell = await self.cell('@info "doctor info"\n@warn "doctor warn"')
        cell.ok()
        got = _plain(cell.text("stderr"))
        for text in ("Info: doctor info", "Warning: doctor warn"):
            _expect(text in got, f"stderr was {_quote(got)}, without {text!r}")

    async def colour_codes(self) -> None:
        cell = await self.cell('printstyled("doctor colour\\n"; color = :red)')
        cell.ok()
        got = cell.text()
        _expect("doctor colour" in got, f"stdout was {_quote(got)}, without 'doctor colour'")
        red = "\x1b[31m" in got
        if self.colour:
            _expect(red, f"no ANSI red (ESC[31m) in {_quote(got)} although colour is on")
        else:
            _expect(not red, f"ANSI codes in {_quote(got)} although colour is off")

    # ---- displays ----

    async def display_html(self) -> None:
        cell = await self.cell('display(HTML("<b>doctor</b>"))')
        cell.ok()
        html = [d.data.get("text/html") for d in cell.displays]
        _expect(html == ["<b>doctor</b>"], f"displays were {cell.displays!r:.300}")

    async def display_png(self) -> None:
        code = (
            "struct DoctorPNG end\n"
            'Base.show(io::IO, ::MIME"image/png", ::DoctorPNG) = '
            f'write(io, hex2bytes("{_PNG.hex()}"))\n'
            "display(DoctorPNG())"
        )
        cell = await self.cell(code)
        cell.ok()
        _expect(len(cell.displays) == 1, f"{len(cell.displays)} displays instead of one")
        data = cell.displays[0].data
        _expect("image/png" in data, f"no image/png in the display's {sorted(data)}")
        _expect(base64.b64decode(data["image/png"]) == _PNG, "the PNG arrived changed")

    async def update(self) -> None:
        cell = await self.cell(
            'doctor_id = JKernel.display(HTML("<i>1</i>"); display_id = true)\n'
            'JKernel.update_display(HTML("<i>2</i>"); display_id = doctor_id)'
        )
        cell.ok()
        kinds = [d.kind for d in cell.displays]
        _expect(kinds == ["display_data", "update_display_data"], f"displays were {kinds}")
        ids = [d.display_id for d in cell.displays]
        _expect(ids[0] is not None and ids[0] == ids[1], f"display ids were {ids}")
        got = cell.displays[1].data.get("text/html")
        _expect(got == "<i>2</i>", f"the update showed {got!r}")

    async def clear_output(self) -> None:
        cell = await self.cell("JKernel.clear_output(true)")
        cell.ok()
        want = [Display.clear(wait=True)]
        _expect(cell.displays == want, f"display messages were {cell.displays!r:.300}")

    # ---- results and errors ----

    async def error(self) -> None:
        cell = await self.cell('doctor_fails() = error("doctor boom")\ndoctor_fails()')
        r = cell.result
        assert r is not None
        _expect(r.status == "error" and r.error is not None, f"the cell ended {r.status}")
        assert r.error is not None
        got = (r.error.ename, r.error.evalue)
        _expect(got == ("ErrorException", "doctor boom"), f"ename, evalue were {got}")
        trace = _plain("\n".join(r.error.traceback))
        _expect("doctor_fails" in trace, f"the traceback has no doctor_fails: {_quote(trace)}")

    async def help(self) -> None:
        r = (await self.cell("?sin")).ok()
        _expect("sin(x)" in r.text, f"the value was {_quote(r.text)}, without 'sin(x)'")

    async def a_registry(self) -> None:
        """Where Pkg would install General first (no registry reachable), an empty one."""
        toml = _julia_string(_EMPTY_REGISTRY_TOML)
        await self.value(_EMPTY_REGISTRY.replace("REGISTRY_TOML", toml))

    async def pkg(self) -> None:
        await self.a_registry()
        cell = await self.cell("] st")
        cell.ok()
        said = _plain(cell.text() + cell.text("stderr"))
        _expect("Status" in said, f"] st printed {_quote(said)}, without 'Status'")

    async def shell(self) -> None:
        cell = await self.cell(";echo hi")
        cell.ok()
        _expect(cell.text() == "hi\n", f"stdout was {_quote(cell.text())}, not 'hi\\n'")

    async def soft_scope(self) -> None:
        code = "doctor_total = 0\nfor i in 1:10\n    doctor_total += i\nend\ndoctor_total"
        cell = await self.cell(code)
        got = cell.ok().text
        _expect(got == "55", f"the value was {got!r}, not 55")
        err = _plain(cell.text("stderr"))
        _expect("ambiguous" not in err, f"a scope warning: {_quote(err)}")

    async def ans(self) -> None:
        await self.value("21 * 2")
        got = await self.value("ans + 1")
        _expect(got == "43", f"ans + 1 after 21 * 2 was {got!r}")

    # ---- queries ----

    async def complete(self) -> None:
        found = await self.sup.complete("printl", 6)
        _expect("println" in found.get("matches", []), f"the matches were {found!r:.300}")

    async def inspect(self) -> None:
        found = await self.sup.inspect("sin", 3)
        text = found.get("data", {}).get("text/plain", "")
        _expect(found.get("found") is True and "sin" in text, f"the answer was {found!r:.300}")

    async def is_complete(self) -> None:
        open_for = await self.sup.is_complete("for i in 1:3")
        closed = await self.sup.is_complete("x = 1")
        got = (open_for.get("status"), closed.get("status"))
        _expect(got == ("incomplete", "complete"), f"the answers were {open_for}, {closed}")

    async def readline(self) -> None:
        asked: list[tuple[str, bool]] = []

        async def answer(prompt: str, password: bool) -> str:
            asked.append((prompt, password))
            return "doctor line"

        r = (await self.cell("readline()", on_input=answer)).ok()
        _expect(len(asked) == 1, f"the frontend was asked {len(asked)} times")
        _expect(r.text == '"doctor line"', f"readline() returned {r.text!r}")

    # ---- loading ----

    async def using_fresh_package(self) -> None:
        # A package in a fresh folder (a package directory on LOAD_PATH), compiled into a
        # fresh depot put first in DEPOT_PATH for this cell only: `using` must compile it (it
        # has no cache anywhere) and run its __init__, whose print shows in the cell. This is
        # `using Plots` after an update: Base's loading code compiling a package while the
        # kernel owns stdout and stderr. Julia's mktempdir removes both folders at exit.
        # With Pkg loaded, Julia 1.10+ compiles it through Pkg.precompile (Base's
        # PKG_PRECOMPILE_HOOK, base/loading.jl `_require` when isinteractive()), which installs
        # General first where no registry is reachable.
        await self.a_registry()
        cell = await self.cell(_USING_FRESH_PACKAGE)
        compiled = cell.ok().text
        out = cell.text()
        _expect(
            f"{_PROBE} __init__ ran" in out,
            f"its __init__ print is not in the cell's stdout: {_quote(_plain(out))}",
        )
        _expect(compiled == "true", "no compiled cache file (.ji) was written for it")

    # ---- interrupts and deaths ----

    async def interrupt(self) -> None:
        await self.value("doctor_kept = 42")
        pid = self.sup.pid
        started = self.tmp / f"started-{secrets.token_hex(4)}"
        # The cell writes a file once it runs (a file, not stdout: that is another row's) and
        # sleeps; the interrupt is sent once the file is there.
        task = asyncio.create_task(
            self.cell(f'write({_julia_string(str(started))}, "x")\nsleep(100)')
        )
        try:
            while not started.exists():
                if task.done():
                    cell = task.result()
                    raise CheckFailed(f"the cell ended before it slept: {cell.result}")
                await asyncio.sleep(_POLL)
            await self.sup.interrupt()
            cell = await task
        finally:
            if not task.done():
                task.cancel()  # the supervisor interrupts a cancelled cell itself
                with contextlib.suppress(asyncio.CancelledError, JuliaDiedError):
                    await task
        r = cell.result
        assert r is not None
        _expect(r.status == "interrupted", f"the cell ended {r.status}: {r.text:.200}")
        _expect(r.state_kept, f"state was lost: {r.notice}")
        _expect((await self.value("doctor_kept")) == "42", "doctor_kept is gone")
        _expect(self.sup.pid == pid, f"Julia was restarted (pid {pid} -> {self.sup.pid})")

    async def exit(self) -> None:
        await self.value("doctor_kept = 42")
        pid = self.sup.pid
        try:
            await self.cell("exit(3)")
        except JuliaDiedError as exc:
            _expect("exited with status 3" in str(exc), f"the death was explained as: {exc}")
        else:
            raise CheckFailed("the cell ran exit(3) and Julia did not die")
        cell = await self.cell("isdefined(Main, :doctor_kept)")
        r = cell.ok()
        _expect(r.text == "false", "doctor_kept survived: Julia was not fresh")
        _expect(
            r.notice is not None and "fresh" in r.notice,
            f"the next cell did not say it ran in a fresh Julia: notice {r.notice!r}",
        )
        _expect(self.sup.pid not in (None, pid), "the next cell ran in the same process")


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


async def _bare_start(command: list[str]) -> tuple[float | None, str | None]:
    """The fastest of _BARE_RUNS runs of ``command`` in milliseconds, or why there is none."""
    best: float | None = None
    for _ in range(_BARE_RUNS):
        t0 = time.perf_counter()
        try:
            proc = await asyncio.create_subprocess_exec(
                *command,
                stdin=asyncio.subprocess.DEVNULL,
                stdout=asyncio.subprocess.DEVNULL,
                stderr=asyncio.subprocess.DEVNULL,
            )
        except OSError as exc:
            return None, f"could not run it: {exc}"
        try:
            code = await asyncio.wait_for(proc.wait(), _BARE_TIMEOUT)
        except (TimeoutError, asyncio.TimeoutError):
            proc.kill()
            await proc.wait()
            return None, f"it did not finish within {_BARE_TIMEOUT:g} s"
        if code != 0:
            return None, f"it exited with status {code}"
        elapsed = _ms(t0)
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

    doctor = _Doctor(sup, _colour_wanted(sup.julia_args))
    try:
        start_label = "start: Julia starts and answers 1 + 1"
        t0 = time.perf_counter()
        started = False

        async def start() -> None:
            nonlocal started
            await sup.start()
            started = True
            got = await doctor.value("1 + 1")
            report.first_result_ms = _ms(t0)
            _expect(got == "2", f"1 + 1 gave {got!r}")

        # A start may load JKernel from source (no compile cache yet): give it the
        # supervisor's own start-up bound on top of a check's.
        first = await _timed(start_label, start, timeout + sup.startup_timeout)
        add(first)
        # The Julia that ran, as its server reported it (INF): the binary behind its
        # Sys.BINDIR, never a launcher.
        report.julia_version, report.julia_path = sup.julia_version, sup.julia_path
        if not started:
            for label, _ in doctor.rows():
                add(CheckResult(label, False, 0.0, _NOT_RUN))
            return report
        if first.timed_out:
            await _settle(sup)
        for label, check in doctor.rows():
            row = await _timed(label, check, timeout)
            add(row)
            if row.timed_out:
                await _settle(sup)
        return report
    finally:
        await sup.shutdown()
        shutil.rmtree(doctor.tmp, ignore_errors=True)


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
    lines = _plain(row.error).strip().splitlines() or ["(no reason given)"]
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
        "  " + where_to_report(),
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
    if bad:
        print(where_to_report())
    return 0 if report.ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
