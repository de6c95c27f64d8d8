"""Packages that know IJulia: their calls to ``Main.IJulia``, as they write them, work here.

There is no package registry on the test machines, so each package is a stand-in: a small
module written in the test whose IJulia calls are copied as the named package version writes
them (its source was read for this: the version and file are named beside each). The rest of
the package is replaced by the least that makes the call meaningful (a list for matplotlib's
figures, files for R's plots). docs/ijulia-packages.md says what works and
what does not; this file holds the kernel to it, through the real supervisor and real Julia
(one test through the installed kernel and jupyter_client, for what Jupyter receives).

``pkgversion(Main.IJulia)`` (ProgressMeter 1.11) is Julia 1.9's: on 1.5.3 the Base contract of
tests/contracts/pkgversion.jl is preloaded, and the kernel is started both ways JKernel loads,
from its compile cache and from source.
"""

from __future__ import annotations

import asyncio
import base64
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import pytest
import pytest_asyncio
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from jutul_jkernel import _resources
from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor
from jutul_jkernel.supervisor.output_sink import Display, OutputSink
from jutul_jkernel.supervisor.results import ExecutionResult

from .clients import execute
from .conftest import STARTUP_TIMEOUT, Output
from .supervisors import shared_supervisor

pytestmark = pytest.mark.integration

CELL_BOUND = 60.0
# `server.jl --precompile` takes ~5 s here with Julia 1.5; a loaded machine, several times that.
COMPILE_BOUND = 300.0
CONTRACT = Path(__file__).parent / "contracts" / "pkgversion.jl"
PNG = bytes([0x89, 0x50, 0x4E, 0x47, 0x0D, 0x0A, 0x1A, 0x0A, 0x00, 0xFF])
PNG_JULIA = "UInt8[" + ", ".join(f"0x{b:02x}" for b in PNG) + "]"
B64_PNG = base64.b64encode(PNG).decode()


async def run(
    julia: JuliaSupervisor,
    code: str,
    cell: int,
    out: Output | None = None,
    shown: list[Display] | None = None,
) -> ExecutionResult:
    """Run ``code`` as notebook cell ``In[cell]`` (hooks run, ``In``/``Out`` are kept)."""
    sink = OutputSink(out, shown.append if shown is not None else None)
    return await asyncio.wait_for(julia.execute(code, sink, name=f"In[{cell}]"), CELL_BOUND)


async def ok(julia: JuliaSupervisor, code: str, cell: int, **kw: Any) -> str:
    r = await run(julia, code, cell, **kw)
    assert r.status == "ok", r
    return r.text


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def julia() -> AsyncIterator[JuliaSupervisor]:
    """One kernel's Julia for the stand-ins, started as the kernel starts it."""
    async with shared_supervisor() as sup:
        yield sup


module_loop = pytest.mark.asyncio(loop_scope="module")


# ---- ProgressMeter ----

# ProgressMeter v1.9.0, src/ProgressMeter.jl, `printover`: its last version for Julia 1.5 (and
# v1.10.0-1.10.4, Julia 1.6-1.9, have the same function). The IJulia branch, as written there.
PROGRESSMETER_1_9 = """
module ProgressMeterStandIn19
function printover(io::IO, s::AbstractString, color::Symbol = :color_normal)
    print(io, "\\r")
    printstyled(io, s; color=color)
    if isdefined(Main, :IJulia)
        Main.IJulia.stdio_bytes[] = 0 # issue #76: circumvent IJulia I/O throttling
    elseif isdefined(Main, :ESS) || isdefined(Main, :Atom)
    else
        print(io, "\\u1b[K")     # clear the rest of the line
    end
end
end
"""

# ProgressMeter v1.11.0 (Julia 1.10+), src/ProgressMeter.jl, `printover`, as written there
# (since commit 4de1255, "Set `IJulia.stdio_bytes` in a forward-compatible way (#353)").
PRINTOVER_1_11 = """
function printover(io::IO, s::AbstractString, color::Symbol = :color_normal)
    print(io, "\\r")
    printstyled(io, s; color=color)
    if isdefined(Main, :IJulia)
        # issue #76: circumvent IJulia I/O throttling
        if pkgversion(Main.IJulia) < v"1.30"
            Main.IJulia.stdio_bytes[] = 0
        else
            Main.IJulia.reset_stdio_count()
        end
    elseif isdefined(Main, :ESS) || isdefined(Main, :Atom)
    else
        print(io, "\\u1b[K")     # clear the rest of the line
    end
end
"""
PROGRESSMETER_1_11 = f"module ProgressMeterStandIn111\n{PRINTOVER_1_11}\nend\n"
# The same function where `pkgversion(Main.IJulia)` answers what the IJulia package 1.34.4
# answers (its Project.toml): the branch for IJulia 1.30 and newer.
PROGRESSMETER_1_11_ON_IJULIA_1_34 = (
    "module ProgressMeterStandIn111OnIJulia134\n"
    'pkgversion(::Module) = v"1.34.4"\n'
    f"{PRINTOVER_1_11}\nend\n"
)


@module_loop
async def test_progressmeter_1_9_resets_stdio_bytes(julia: JuliaSupervisor) -> None:
    """Every `@showprogress` redraw of the ProgressMeter that Julia < 1.10 gets sets
    `Main.IJulia.stdio_bytes[] = 0` (an UndefVarError on each redraw); the bar is
    redrawn with `\\r`, without the terminal's erase-line code."""
    await ok(julia, PROGRESSMETER_1_9, 1)
    out = Output()
    code = (
        "IJulia.stdio_bytes[] = 7\n"
        'ProgressMeterStandIn19.printover(stdout, "50%")\n'
        "IJulia.stdio_bytes[]"
    )
    assert await ok(julia, code, 2, out=out) == "0"
    assert "\r" in out.text() and "50%" in out.text(), out.chunks
    assert "\x1b[K" not in out.text(), out.chunks


@module_loop
async def test_progressmeter_1_11_on_ijulia_1_30_resets_the_count(julia: JuliaSupervisor) -> None:
    """ProgressMeter 1.11's branch for IJulia 1.30 and newer calls `reset_stdio_count()`."""
    await ok(julia, PROGRESSMETER_1_11_ON_IJULIA_1_34, 3)
    code = (
        "IJulia.stdio_bytes[] = 7\n"
        'ProgressMeterStandIn111OnIJulia134.printover(stdout, "50%")\n'
        "IJulia.stdio_bytes[], IJulia.reset_stdio_count()"
    )
    assert await ok(julia, code, 4) == "(0, 0)"


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A copy of julia/ with a fresh compile cache in a depot of its own."""
    root = tmp_path_factory.mktemp("compiled")
    shutil.copytree(_resources.server_script().parent, root / "julia")
    server, depot = root / "julia" / "server.jl", root / "depot"
    done = subprocess.run(
        ["julia", "--startup-file=no", str(server), "--precompile"],
        env={**os.environ, "JUTUL_JKERNEL_DEPOT": str(depot)},
        capture_output=True,
        text=True,
        timeout=COMPILE_BOUND,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return server, depot


@pytest.mark.timeout(COMPILE_BOUND + 120)
@pytest.mark.parametrize("loaded", ["cache", "source"])
async def test_pkgversion_of_ijulia_is_a_version_however_jkernel_loads(
    compiled: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, loaded: str
) -> None:
    """`pkgversion(Main.IJulia)` is a VersionNumber (JKernel's, whose module it is) from the
    compile cache and from source alike, so ProgressMeter 1.11's `pkgversion(Main.IJulia) <
    v"1.30"` takes its branch for IJulia before 1.30, and the redraw resets the count. From
    source it was `nothing`, and `nothing < v"1.30"` threw on every redraw."""
    server, depot = compiled
    monkeypatch.setattr(_resources, "server_script", lambda: server)
    env = {"JUTUL_JKERNEL_DEPOT": str(depot)}
    if loaded == "source":
        env["JUTUL_JKERNEL_PRECOMPILED"] = "no"
    sup = JuliaSupervisor(
        julia_args=["-L", str(CONTRACT)], env=env, startup_timeout=STARTUP_TIMEOUT
    )
    await sup.start()
    try:
        assert sup._julia is not None and sup._julia.info.get("loaded_from") == loaded
        project = (server.parent / "JKernel" / "Project.toml").read_text()
        version = next(
            line.split('"')[1] for line in project.splitlines() if line.startswith("version")
        )
        assert await ok(sup, "pkgversion(Main.IJulia)", 1) == f'v"{version}"'
        await ok(sup, PROGRESSMETER_1_11, 2)
        out = Output()
        code = (
            'IJulia.stdio_bytes[] = 7\nProgressMeterStandIn111.printover(stdout, "50%")\n'
            "IJulia.stdio_bytes[]"
        )
        assert await ok(sup, code, 3, out=out) == "0"
        assert "50%" in out.text(), out.chunks
    finally:
        await sup.shutdown()


# A Julia whose loading internals changed under include_as_package: here the origin record
# throws (what a changed signature of set_pkgorigin_version_path would do). Where Base has the
# function (1.9+), this replaces its method: `path::Union{String,Nothing}` on release-1.10,
# `path::String` on release-1.12 (base/loading.jl), so both are defined; Base's own require_lock
# stays. 1.5.3 has neither, and gets both.
_BROKEN_ORIGINS = """
isdefined(Base, :require_lock) || Core.eval(Base, :(require_lock = ReentrantLock()))
for T in (Union{String,Nothing}, String)
    Core.eval(Base, :(function set_pkgorigin_version_path(pkg::PkgId, path::$T)
        error("emulated: origins changed")
    end))
end
"""


async def test_a_source_start_survives_loading_internals_that_changed(tmp_path: Path) -> None:
    """Loading JKernel's source as a package leans on loading internals (launcher.jl
    `include_as_package`). Should a Julia change them so that the load throws, the kernel still
    starts, from a plain module, and its log says why (mutant M99)."""
    breaker = tmp_path / "broken_origins.jl"
    breaker.write_text(_BROKEN_ORIGINS)
    sup = JuliaSupervisor(
        julia_args=["-L", str(breaker)],
        env={"JUTUL_JKERNEL_PRECOMPILED": "no"},
        startup_timeout=STARTUP_TIMEOUT,
    )
    await sup.start()
    try:
        assert sup._julia is not None and sup._julia.info.get("loaded_from") == "source"
        assert await ok(sup, "1 + 1", 1) == "2"
        assert await ok(sup, "IJulia.inited", 2) == "true"
        assert sup.log_path is not None
        log = Path(sup.log_path).read_text()
        assert "loading JKernel as a package failed" in log and "origins changed" in log, log
    finally:
        await sup.shutdown()


# ---- Plots, and packages that look for the IJulia package itself ----

# Plots v1.38.5, src/output.jl, `inline` (the last Plots with it outside its IJulia extension).
# Its first line, `isijulia() || error("inline() is IJulia-only")`, is left out: Plots'
# `isijulia()` looks for a loaded package named IJulia, which is not here (see the next test).
PLOTS_1_38 = f"""
module PlotsStandIn
struct Plot end
Base.showable(::MIME"image/png", ::Plot) = true
Base.show(io::IO, ::MIME"image/png", ::Plot) = write(io, {PNG_JULIA})
function inline(plt::Plot = Plot())
    Main.IJulia.clear_output(true)
    display(Main.IJulia.InlineDisplay(), plt)
end
end
"""


@module_loop
async def test_plots_inline_displays_through_inline_display(julia: JuliaSupervisor) -> None:
    """`display(Main.IJulia.InlineDisplay(), plt)` shows the plot in the cell, after a
    `clear_output(wait=true)`, as the kernel's own display would."""
    await ok(julia, PLOTS_1_38, 5)
    shown: list[Display] = []
    await ok(julia, "PlotsStandIn.inline(); nothing", 6, shown=shown)
    assert [m.kind for m in shown] == ["clear_output", "display_data"], shown
    assert shown[0].wait
    assert shown[1].data["image/png"] == B64_PNG, shown[1]
    assert shown[1].data["text/plain"].endswith("Plot()"), shown[1]
    # The MIME form of IJulia's display, and its displayable, go the same way.
    shown.clear()
    code = (
        'd = IJulia.InlineDisplay(); display(d, MIME("text/html"), HTML("<b>hi</b>"))\n'
        'displayable(d, MIME("image/png"))'
    )
    assert await ok(julia, code, 7, shown=shown) == "true"
    assert [m.data.get("text/html") for m in shown] == ["<b>hi</b>"], shown


@module_loop
async def test_the_stand_in_is_not_the_ijulia_package(julia: JuliaSupervisor) -> None:
    """Code that looks for the IJulia package finds none, as without `Main.IJulia`: Plots'
    `isijulia()` (v1.38.5 src/utils.jl) is false, so its `inline()` says it is IJulia-only,
    and Bonito's `IJulia()` (v5.0.0 src/connection/ijulia.jl, by IJulia's UUID) errors, which
    is why the README tells Bonito users to force a connection. Nothing here may pose as the
    package: its comms and sockets do not exist."""
    code = (
        "isijulia() = :IJulia in nameof.(collect(values(Base.loaded_modules)))\n"
        'IJULIA_PKG_ID = Base.PkgId(Base.UUID("7073ff75-c697-5162-941a-fcdaad2a7d2a"), "IJulia")\n'
        "isdefined(Main, :IJulia), isijulia(), haskey(Base.loaded_modules, IJULIA_PKG_ID)"
    )
    assert await ok(julia, code, 8) == "(true, false, false)"


# ---- PyPlot and RCall: the cell hooks ----

# PyPlot v2.11.5: src/init.jl's `__init__` pushes the three hooks below when
# `isdefined(Main, :IJulia) && Main.IJulia.inited` (copied as written); src/PyPlot.jl defines
# them: before a cell the next figure is a new one, after it each open figure is shown and
# closed, after an error they are closed unshown; `withfig` ends with `Main.IJulia.undisplay(f)`.
# Matplotlib's figure manager is a vector here.
PYPLOT_2_11 = f"""
module PyPlotStandIn
struct Figure
    number::Int
end
Base.showable(::MIME"image/png", ::Figure) = true
Base.show(io::IO, ::MIME"image/png", ::Figure) = write(io, {PNG_JULIA})
const figures = Figure[]
const gcf_isnew = [false]
force_new_fig() = gcf_isnew[1] = true
figure() = (gcf_isnew[1] = false; push!(figures, Figure(length(figures) + 1)); figures[end])
function display_figs()
    foreach(display, figures)
    empty!(figures)
end
close_figs() = empty!(figures)
function withfig(actions::Function, f::Figure)
    try
        actions()
    finally
        Main.IJulia.undisplay(f)
    end
    return f
end
function __init__()
    if isdefined(Main, :IJulia) && Main.IJulia.inited
        Main.IJulia.push_preexecute_hook(force_new_fig)
        Main.IJulia.push_postexecute_hook(display_figs)
        Main.IJulia.push_posterror_hook(close_figs)
    end
end
end
"""
PYPLOT_UNHOOK = (
    "IJulia.pop_preexecute_hook(PyPlotStandIn.force_new_fig); "
    "IJulia.pop_postexecute_hook(PyPlotStandIn.display_figs); "
    "IJulia.pop_posterror_hook(PyPlotStandIn.close_figs); nothing"
)


@module_loop
async def test_pyplot_hooks_show_figures_after_each_cell(julia: JuliaSupervisor) -> None:
    """A figure drawn in a cell is shown in that cell, before its result; one drawn in a cell
    that fails is closed unshown; each cell starts a new figure; `withfig` keeps its figure."""
    await ok(julia, PYPLOT_2_11, 10)
    try:
        shown: list[Display] = []
        assert await ok(julia, "PyPlotStandIn.figure(); 1", 11, shown=shown) == "1"
        assert [m.data["image/png"] for m in shown] == [B64_PNG], shown
        shown.clear()
        r = await run(julia, 'PyPlotStandIn.figure(); error("boom")', 12, shown=shown)
        assert r.status == "error" and shown == [], (r, shown)
        code = "isempty(PyPlotStandIn.figures), PyPlotStandIn.gcf_isnew[1]"
        assert await ok(julia, code, 13) == "(true, true)"
        code = "f = PyPlotStandIn.Figure(99); PyPlotStandIn.withfig(() -> nothing, f) === f"
        assert await ok(julia, code, 14) == "true"
    finally:
        await ok(julia, PYPLOT_UNHOOK, 15)


# RCall v0.14.13, src/ijulia.jl: `ijulia_init` pushes the two hooks (copied as written; called
# from src/setup.jl when `isdefined(Main, :IJulia) && Main.IJulia.inited`), and after each cell
# `ijulia_displayplots` shows every plot file R wrote with `ijulia_displayfile`, as written: the
# PNG's bytes, or the SVG's text (whose glyph ids RCall renames first). R is replaced by
# files the test writes.
RCALL_0_14 = """
module RCallStandIn
const IJULIA_MIME = Ref{Union{Nothing,MIME}}(nothing)
const IJULIA_FILE_DIR = Ref{String}("")
function ijulia_displayfile(m::MIME"image/png", f)
    open(f) do f
        d = read(f)
        return display(m, d)
    end
end
function ijulia_displayfile(m::MIME"image/svg+xml", f)
    open(f) do f
        d = read(f, String)
        return display(m, d)
    end
end
function ijulia_displayplots()
    for fn in sort(readdir(IJULIA_FILE_DIR[]))
        ffn = joinpath(IJULIA_FILE_DIR[], fn)
        ijulia_displayfile(IJULIA_MIME[], ffn)
        rm(ffn)
    end
end
ijulia_cleanup() = foreach(fn -> rm(joinpath(IJULIA_FILE_DIR[], fn)), readdir(IJULIA_FILE_DIR[]))
function ijulia_init()
    IJULIA_FILE_DIR[] = mktempdir()
    Main.IJulia.push_postexecute_hook(ijulia_displayplots)
    Main.IJulia.push_posterror_hook(ijulia_cleanup)
    IJULIA_MIME[] = MIME"image/png"()
end
end
isdefined(Main, :IJulia) && Main.IJulia.inited && RCallStandIn.ijulia_init()
nothing
"""
RCALL_UNHOOK = (
    "IJulia.pop_postexecute_hook(RCallStandIn.ijulia_displayplots); "
    "IJulia.pop_posterror_hook(RCallStandIn.ijulia_cleanup); nothing"
)
SVG = '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4"/>'


@module_loop
async def test_rcall_hooks_show_r_plots_after_each_cell(julia: JuliaSupervisor) -> None:
    """The plot files R wrote during a cell are shown in it: PNG bytes as image/png, SVG text
    as image/svg+xml; after an error they are removed unshown."""
    await ok(julia, RCALL_0_14, 20)
    try:
        plot = 'write(joinpath(RCallStandIn.IJULIA_FILE_DIR[], "rij_001"), {}); nothing'
        shown: list[Display] = []
        await ok(julia, plot.format(PNG_JULIA), 21, shown=shown)
        assert [m.data.get("image/png") for m in shown] == [B64_PNG], shown
        shown.clear()
        await ok(julia, 'RCallStandIn.IJULIA_MIME[] = MIME"image/svg+xml"(); nothing', 22)
        await ok(julia, plot.format(json.dumps(SVG)), 23, shown=shown)
        assert [m.data.get("image/svg+xml") for m in shown] == [SVG], shown
        shown.clear()
        r = await run(julia, plot.format(json.dumps(SVG)) + '; error("boom")', 24, shown=shown)
        assert r.status == "error" and shown == [], (r, shown)
        assert await ok(julia, "isempty(readdir(RCallStandIn.IJULIA_FILE_DIR[]))", 25) == "true"
    finally:
        await ok(julia, RCALL_UNHOOK, 26)


# ---- MIME types: register_mime, display_dict, limitstringmime ----

# quarto-cli src/resources/jupyter/lang/julia/setup.jl (commit 6ae2d28), which Quarto runs as
# a notebook's first cell when it renders with the Jupyter engine: these lines as written there
# (`fig_format == :pdf` taken).
QUARTO_SETUP = """
import IJulia
IJulia.clear_history()
IJulia.register_mime(MIME("application/pdf"))
"""
# Quarto's `ojs_define` (same file) ends with this call:
QUARTO_OJS = """IJulia.display(MIME("text/html"), "<script type='ojs-define'>{}</script>")"""


@module_loop
async def test_quarto_registers_pdf_figures(julia: JuliaSupervisor) -> None:
    """After `IJulia.register_mime(MIME("application/pdf"))`, a value that can show itself as
    PDF carries it in its bundle, base64 as Jupyter wants binary data; ojs_define's display
    works through `IJulia.display`."""
    await ok(julia, QUARTO_SETUP, 30)
    try:
        code = (
            "struct PDFFigure end\n"
            'Base.show(io::IO, ::MIME"application/pdf", ::PDFFigure) = write(io, "%PDF-1.4\\n", '
            f"{PNG_JULIA})\n"
            "PDFFigure()"
        )
        r = await run(julia, code, 31)
        assert r.status == "ok" and r.data is not None, r
        assert base64.b64decode(r.data["application/pdf"]) == b"%PDF-1.4\n" + PNG, r.data
        shown: list[Display] = []
        await ok(julia, QUARTO_OJS, 32, shown=shown)
        html = "<script type='ojs-define'>{}</script>"
        assert [m.data.get("text/html") for m in shown] == [html], shown
    finally:
        await ok(julia, "empty!(JKernel.REGISTERED_MIMES); nothing", 33)


# IJulia's semantics (src/display.jl, `_display_dict`; its own test of custom MIME types in
# test/execute_request.jl): a registered text type as text, a binary one in base64, a JSON
# type's text, and of a registered group only the first type the value can show.
FRIENDLY = """
struct Friendly end
Base.istextmime(::MIME"application/vnd.test.friendly-text") = true
Base.show(io::IO, ::MIME"application/vnd.test.friendly-text", ::Friendly) = print(io, "Hello")
Base.show(io::IO, ::MIME"application/vnd.test.friendly-binary", ::Friendly) = print(io, "Hello")
Base.show(io::IO, ::MIME"application/vnd.test.friendly+json", ::Friendly) = print(io, "{\\"name\\": 1}")
Base.istextmime(::Union{MIME"application/vnd.test.one", MIME"application/vnd.test.two"}) = true
Base.show(io::IO, ::Union{MIME"application/vnd.test.one", MIME"application/vnd.test.two"}, ::Friendly) =
    print(io, "first")
IJulia.register_mime(MIME("application/vnd.test.friendly-text"))
IJulia.register_mime(MIME("application/vnd.test.friendly-binary"))
IJulia.register_jsonmime(MIME("application/vnd.test.friendly+json"))
IJulia.register_mime([MIME("application/vnd.test.one"), MIME("application/vnd.test.two")])
nothing
"""
UNREGISTER = "empty!(JKernel.REGISTERED_MIMES); empty!(JKernel.REGISTERED_JSON_MIMES); nothing"


@module_loop
async def test_display_dict_and_limitstringmime_as_in_ijulia(julia: JuliaSupervisor) -> None:
    """`IJulia.display_dict(x)` is the bundle the kernel shows, a `Dict{String,String}`, with the
    registered types; `limitstringmime` gives one type's string, binary in base64."""
    await ok(julia, FRIENDLY, 40)
    try:
        # (the type is asked, not printed: 1.6+ prints `Dict{String, String}`, with a space)
        code = "d = IJulia.display_dict(Friendly()); typeof(d) === Dict{String,String}, "
        code += "sort!(collect(keys(d)))"
        keys = [
            "application/vnd.test.friendly+json",
            "application/vnd.test.friendly-binary",
            "application/vnd.test.friendly-text",
            "application/vnd.test.one",
            "text/plain",
        ]
        assert await ok(julia, code, 41) == f"(true, {json.dumps(keys)})"
        b64 = base64.b64encode(b"Hello").decode()
        code = (
            'print(String(JKernel.json([d["application/vnd.test.friendly-text"], '
            'd["application/vnd.test.friendly-binary"], d["application/vnd.test.friendly+json"], '
            'IJulia.limitstringmime(MIME("application/vnd.test.friendly-binary"), Friendly()), '
            'IJulia.limitstringmime(MIME("text/plain"), 1:2)])))'
        )
        out = Output()
        await ok(julia, code, 42, out=out)
        got = json.loads(out.text())
        assert got[:4] == ["Hello", b64, '{"name": 1}', b64], got
        assert got[4] == "1:2", got  # text/plain, as the REPL shows a range
    finally:
        await ok(julia, UNREGISTER, 44)


@module_loop
async def test_jkernel_registers_mime_types_as_ijulia_does(julia: JuliaSupervisor) -> None:
    """`JKernel.register_mime` and `register_jsonmime` are IJulia's: the types reach the
    bundle of every later value that can show them, a JSON one as its text."""
    code = (
        "struct Noted end\n"
        'Base.istextmime(::MIME"application/vnd.test.noted") = true\n'
        'Base.show(io::IO, ::MIME"application/vnd.test.noted", ::Noted) = print(io, "noted")\n'
        'Base.show(io::IO, ::MIME"application/vnd.test.noted+json", ::Noted) = print(io, "[1]")\n'
        'JKernel.register_mime(MIME("application/vnd.test.noted"))\n'
        'JKernel.register_jsonmime(MIME("application/vnd.test.noted+json"))\n'
        "Noted()"
    )
    try:
        r = await run(julia, code, 45)
        assert r.status == "ok" and r.data is not None, r
        assert r.data["application/vnd.test.noted"] == "noted", r.data
        assert r.data["application/vnd.test.noted+json"] == "[1]", r.data
    finally:
        await ok(julia, UNREGISTER, 46)


# ---- history, the original streams, IJulia's internals ----


@module_loop
async def test_n_ans_in_and_out_follow_the_cells(julia: JuliaSupervisor) -> None:
    """`IJulia.n` is the running cell's number, `IJulia.ans` the last cell's value, as
    `In`/`Out` and `Main.ans` are; `clear_history()` forgets them."""
    assert await ok(julia, "21 * 2", 50) == "42"
    assert await ok(julia, "IJulia.n, IJulia.ans, IJulia.In[50], IJulia.Out[50]", 51) == (
        '(51, 42, "21 * 2", 42)'
    )
    await ok(julia, "IJulia.clear_history()", 52)
    assert await ok(julia, "IJulia.ans, isempty(IJulia.Out)", 53) == "(nothing, true)"


@module_loop
async def test_orig_stdout_is_the_log_not_the_notebook(julia: JuliaSupervisor) -> None:
    """IJulia's `orig_stdout[]` and `orig_stderr[]` (`Ref{IO}`s) reach the kernel's log, where
    IJulia's own log goes, never the cell."""
    out = Output()
    code = (
        'println(IJulia.orig_stdout[], "to the log 1"); flush(IJulia.orig_stdout[])\n'
        'println(IJulia.orig_stderr[], "to the log 2"); flush(IJulia.orig_stderr[])\n'
        "typeof(IJulia.orig_stdout), typeof(IJulia.orig_stderr)"
    )
    assert await ok(julia, code, 60, out=out) == "(Base.RefValue{IO}, Base.RefValue{IO})"
    assert "to the log" not in out.text("stdout") + out.text("stderr"), out.chunks
    assert julia.log_path is not None
    log = julia.log_path.read_text(errors="replace")
    assert "to the log 1" in log and "to the log 2" in log, log[-2000:]


# PlotlyLight v0.8.2 (Julia 1.7+), src/PlotlyLight.jl, `show(io, ::MIME"text/html", ::Plot)`:
# this check, as written there, picks an iframe for IJulia's stdout.
PLOTLYLIGHT_0_8 = """
use_iframe = (isdefined(Main, :VSCodeServer) && stdout isa Main.VSCodeServer.IJuliaCore.IJuliaStdio) ||
    (isdefined(Main, :IJulia) && stdout isa Main.IJulia.IJuliaStdio)
"""


@module_loop
async def test_ijulia_internals_are_harmless(julia: JuliaSupervisor) -> None:
    """Names of IJulia's internals that cannot mean here what they mean there: PlotlyLight's
    `stdout isa Main.IJulia.IJuliaStdio` answers false (not an UndefVarError), and IJulia's
    messaging (`send_ipython`, `msg_pub`, `execute_msg`) fails with an error that says why."""
    assert await ok(julia, PLOTLYLIGHT_0_8 + "use_iframe", 70) == "false"
    r = await run(
        julia, 'IJulia.send_ipython(nothing, IJulia.msg_pub(IJulia.execute_msg, "x", Dict()))', 71
    )
    assert r.status == "error" and r.error is not None, r
    assert r.error.ename == "NoJupyterMessaging", r.error
    assert "jutul-jkernel does not have" in r.error.evalue, r.error


# ---- what Jupyter receives ----


def test_registered_json_types_reach_jupyter_as_json(
    kernel: tuple[KernelManager, BlockingKernelClient],
) -> None:
    """A type registered with `IJulia.register_jsonmime` whose name nbformat stores as JSON
    (`application/…+json`) reaches Jupyter as the JSON object, not as its text, as IJulia
    sends it (Vega-Lite's and Plotly's renderers read the object)."""
    _, kc = kernel
    code = (
        "struct Spec end\n"
        'Base.show(io::IO, ::MIME"application/vnd.test.spec.v1+json", ::Spec) = '
        'print(io, "{\\"mark\\": \\"bar\\", \\"n\\": [1, 2]}")\n'
        'IJulia.register_jsonmime(MIME("application/vnd.test.spec.v1+json"))\n'
        "Spec()"
    )
    reply, outputs = execute(kc, code)
    assert reply["content"]["status"] == "ok", reply["content"]
    results = [m["content"]["data"] for m in outputs if m["msg_type"] == "execute_result"]
    assert len(results) == 1, outputs
    assert results[0]["application/vnd.test.spec.v1+json"] == {"mark": "bar", "n": [1, 2]}
