"""The doctor's checks: one async method per row, and the Julia code those rows run.

:class:`Checks` holds the rows in the order the doctor runs them (:meth:`Checks.rows`), each a
label and a method that runs cells and queries on one
:class:`~jutul_jkernel.supervisor.JuliaSupervisor` and raises :class:`CheckFailed`, saying what
it saw instead, when its one expected outcome does not hold. :mod:`jutul_jkernel.tools.doctor` times
the rows, reports them and owns the command line; this module knows nothing of reports.

Invariant: what a row writes goes to temporary folders, never the user's: the doctor's own
(:attr:`Checks.tmp`, which the doctor removes) or Julia's ``mktempdir`` (removed when that
Julia exits), the probe package's compiled cache included.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import re
import secrets
import struct
import tempfile
import zlib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path

from jutul_jkernel.supervisor.errors import JuliaDiedError
from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor
from jutul_jkernel.supervisor.output_sink import Display, OutputSink
from jutul_jkernel.supervisor.results import ExecutionResult

# While waiting for a cell to reach its `sleep`: how often to look for the file it writes.
_POLL = 0.02
# How much of a cell's output a FAIL message quotes.
_QUOTE_CHARS = 400

_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")

# The package the `using` row writes, compiles and loads; a name no user package has.
_PROBE = "JKernelDoctorProbe"
# A fixed uuid: the probe package is the same package on every run (its compiled cache goes
# to a temporary depot, never the user's).
_PROBE_UUID = "6a1e9f3c-2b7d-4c58-9e0a-d4f1b8c27e65"

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
# is its own), and returns that depot ("" otherwise). Pkg is called in the latest world: on 1.11+
# `load_pkg` loads it with Base.require_stdlib, newer than the cell's world.
_EMPTY_REGISTRY = """
let Pkg = JKernel.load_pkg(), depot = ""
    registry = isdefined(Pkg, :Registry) ? Pkg.Registry : nothing
    if registry !== nothing && isdefined(registry, :reachable_registries) &&
            isempty(Base.invokelatest(registry.reachable_registries))
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
        err = plain(self.text("stderr")).strip()
        if err:
            what += f"\nits stderr: {_quote(err)}"
        raise CheckFailed(what)


def plain(text: str) -> str:
    """``text`` without its ANSI escape codes."""
    return _ANSI.sub("", text)


def _quote(text: str) -> str:
    text = text if len(text) <= _QUOTE_CHARS else text[:_QUOTE_CHARS] + "..."
    return repr(text)


def expect(condition: bool, message: str) -> None:
    """Raise CheckFailed with ``message`` unless ``condition`` holds."""
    if not condition:
        raise CheckFailed(message)


def _julia_string(text: str) -> str:
    """A Julia string literal holding ``text`` (``$`` and ``\\`` escaped too)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return f'"{escaped}"'


def colour_wanted(julia_args: Sequence[str]) -> bool:
    """Whether Julia runs with colour: its last ``--color=`` flag says yes (the kernelspec's
    default); without one, Julia's own default is off when stdout is no terminal."""
    values = [a.partition("=")[2] for a in julia_args if a.startswith("--color=")]
    return bool(values) and values[-1] == "yes"


class Checks:
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
        """Each row's label and check, in the order the doctor runs them."""
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
        expect(got == "doctor stdout\n", f"stdout was {_quote(got)}, not 'doctor stdout\\n'")

    async def stderr(self) -> None:
        cell = await self.cell('println(stderr, "doctor stderr")')
        cell.ok()
        got = cell.text("stderr")
        expect("doctor stderr\n" in got, f"stderr was {_quote(got)}, without 'doctor stderr'")

    async def logging(self) -> None:
        cell = await self.cell('@info "doctor info"\n@warn "doctor warn"')
        cell.ok()
        got = plain(cell.text("stderr"))
        for text in ("Info: doctor info", "Warning: doctor warn"):
            expect(text in got, f"stderr was {_quote(got)}, without {text!r}")

    async def colour_codes(self) -> None:
        cell = await self.cell('printstyled("doctor colour\\n"; color = :red)')
        cell.ok()
        got = cell.text()
        expect("doctor colour" in got, f"stdout was {_quote(got)}, without 'doctor colour'")
        red = "\x1b[31m" in got
        if self.colour:
            expect(red, f"no ANSI red (ESC[31m) in {_quote(got)} although colour is on")
        else:
            expect(not red, f"ANSI codes in {_quote(got)} although colour is off")

    # ---- displays ----

    async def display_html(self) -> None:
        cell = await self.cell('display(HTML("<b>doctor</b>"))')
        cell.ok()
        html = [d.data.get("text/html") for d in cell.displays]
        expect(html == ["<b>doctor</b>"], f"displays were {cell.displays!r:.300}")

    async def display_png(self) -> None:
        code = (
            "struct DoctorPNG end\n"
            'Base.show(io::IO, ::MIME"image/png", ::DoctorPNG) = '
            f'write(io, hex2bytes("{_PNG.hex()}"))\n'
            "display(DoctorPNG())"
        )
        cell = await self.cell(code)
        cell.ok()
        expect(len(cell.displays) == 1, f"{len(cell.displays)} displays instead of one")
        data = cell.displays[0].data
        expect("image/png" in data, f"no image/png in the display's {sorted(data)}")
        expect(base64.b64decode(data["image/png"]) == _PNG, "the PNG arrived changed")

    async def update(self) -> None:
        cell = await self.cell(
            'doctor_id = JKernel.display(HTML("<i>1</i>"); display_id = true)\n'
            'JKernel.update_display(HTML("<i>2</i>"); display_id = doctor_id)'
        )
        cell.ok()
        kinds = [d.kind for d in cell.displays]
        expect(kinds == ["display_data", "update_display_data"], f"displays were {kinds}")
        ids = [d.display_id for d in cell.displays]
        expect(ids[0] is not None and ids[0] == ids[1], f"display ids were {ids}")
        got = cell.displays[1].data.get("text/html")
        expect(got == "<i>2</i>", f"the update showed {got!r}")

    async def clear_output(self) -> None:
        cell = await self.cell("JKernel.clear_output(true)")
        cell.ok()
        want = [Display.clear(wait=True)]
        expect(cell.displays == want, f"display messages were {cell.displays!r:.300}")

    # ---- results and errors ----

    async def error(self) -> None:
        cell = await self.cell('doctor_fails() = error("doctor boom")\ndoctor_fails()')
        r = cell.result
        assert r is not None
        expect(r.status == "error" and r.error is not None, f"the cell ended {r.status}")
        assert r.error is not None
        got = (r.error.ename, r.error.evalue)
        expect(got == ("ErrorException", "doctor boom"), f"ename, evalue were {got}")
        trace = plain("\n".join(r.error.traceback))
        expect("doctor_fails" in trace, f"the traceback has no doctor_fails: {_quote(trace)}")

    async def help(self) -> None:
        r = (await self.cell("?sin")).ok()
        # `sin(x)` up to 1.11; 1.12 documents `sin(x::T) where {T <: Number} -> float(T)`
        expect("sin(x" in r.text, f"the value was {_quote(r.text)}, without 'sin(x'")

    async def a_registry(self) -> None:
        """Where Pkg would install General first (no registry reachable), an empty one."""
        toml = _julia_string(_EMPTY_REGISTRY_TOML)
        await self.value(_EMPTY_REGISTRY.replace("REGISTRY_TOML", toml))

    async def pkg(self) -> None:
        await self.a_registry()
        cell = await self.cell("] st")
        cell.ok()
        said = plain(cell.text() + cell.text("stderr"))
        expect("Status" in said, f"] st printed {_quote(said)}, without 'Status'")

    async def shell(self) -> None:
        cell = await self.cell(";echo hi")
        cell.ok()
        expect(cell.text() == "hi\n", f"stdout was {_quote(cell.text())}, not 'hi\\n'")

    async def soft_scope(self) -> None:
        code = "doctor_total = 0\nfor i in 1:10\n    doctor_total += i\nend\ndoctor_total"
        cell = await self.cell(code)
        got = cell.ok().text
        expect(got == "55", f"the value was {got!r}, not 55")
        err = plain(cell.text("stderr"))
        expect("ambiguous" not in err, f"a scope warning: {_quote(err)}")

    async def ans(self) -> None:
        await self.value("21 * 2")
        got = await self.value("ans + 1")
        expect(got == "43", f"ans + 1 after 21 * 2 was {got!r}")

    # ---- queries ----

    async def complete(self) -> None:
        found = await self.sup.complete("printl", 6)
        expect("println" in found.get("matches", []), f"the matches were {found!r:.300}")

    async def inspect(self) -> None:
        found = await self.sup.inspect("sin", 3)
        text = found.get("data", {}).get("text/plain", "")
        expect(found.get("found") is True and "sin" in text, f"the answer was {found!r:.300}")

    async def is_complete(self) -> None:
        open_for = await self.sup.is_complete("for i in 1:3")
        closed = await self.sup.is_complete("x = 1")
        got = (open_for.get("status"), closed.get("status"))
        expect(got == ("incomplete", "complete"), f"the answers were {open_for}, {closed}")

    async def readline(self) -> None:
        asked: list[tuple[str, bool]] = []

        async def answer(prompt: str, password: bool) -> str:
            asked.append((prompt, password))
            return "doctor line"

        r = (await self.cell("readline()", on_input=answer)).ok()
        expect(len(asked) == 1, f"the frontend was asked {len(asked)} times")
        expect(r.text == '"doctor line"', f"readline() returned {r.text!r}")

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
        expect(
            f"{_PROBE} __init__ ran" in out,
            f"its __init__ print is not in the cell's stdout: {_quote(plain(out))}",
        )
        expect(compiled == "true", "no compiled cache file (.ji) was written for it")

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
        expect(r.status == "interrupted", f"the cell ended {r.status}: {r.text:.200}")
        expect(r.state_kept, f"state was lost: {r.notice}")
        expect((await self.value("doctor_kept")) == "42", "doctor_kept is gone")
        expect(self.sup.pid == pid, f"Julia was restarted (pid {pid} -> {self.sup.pid})")

    async def exit(self) -> None:
        await self.value("doctor_kept = 42")
        pid = self.sup.pid
        try:
            await self.cell("exit(3)")
        except JuliaDiedError as exc:
            expect("exited with status 3" in str(exc), f"the death was explained as: {exc}")
        else:
            raise CheckFailed("the cell ran exit(3) and Julia did not die")
        cell = await self.cell("isdefined(Main, :doctor_kept)")
        r = cell.ok()
        expect(r.text == "false", "doctor_kept survived: Julia was not fresh")
        expect(
            r.notice is not None and "fresh" in r.notice,
            f"the next cell did not say it ran in a fresh Julia: notice {r.notice!r}",
        )
        expect(self.sup.pid not in (None, pid), "the next cell ran in the same process")
