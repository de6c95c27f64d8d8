"""Output is rendered in IJulia's context, which packages read.

IJulia shows every MIME in ``IOContext(io, :limit => true, :color => true, :jupyter => true)``
(src/inline.jl, ``InlineIOContext``), and its ``stdout``/``stderr`` carry ``:jupyter_stream``
(src/stdio.jl). Packages branch on those properties, so the stand-ins below copy a package's
``show`` as the package writes it, named with the version read. Through jupyter_client on the
installed kernel (``--color=yes``, the kernelspec's default), for each way a cell shows a value:
its result, ``display(x)``, ``display(mime, x)``, and ``JKernel.display`` / ``update_display``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from .clients import execute, text_of
from .conftest import Kernel, shared_kernel, strip_ansi

pytestmark = pytest.mark.e2e


# DataFrames 1.8.2, src/abstractdataframe/io.jl, `_show(io, ::MIME"text/html", df)`: with
# `get(io, :limit, false)` it prints DATAFRAMES_ROWS rows (default 25), otherwise every row.
# The table itself is reduced to one cell per row.
DATAFRAMES_STAND_IN = r"""
module DataFramesStandIn
struct DataFrame
    nrow::Int
end
Base.show(io::IO, df::DataFrame) = print(io, df.nrow, "×1 DataFrame")
function Base.show(io::IO, ::MIME"text/html", df::DataFrame)
    if get(io, :limit, false)
        mxrow = something(tryparse(Int, get(ENV, "DATAFRAMES_ROWS", "25")), 25)
    else
        mxrow = -1
    end
    shown = mxrow < 0 ? df.nrow : min(mxrow, df.nrow)
    print(io, "<table>")
    for i in 1:shown
        print(io, "<tr><td>", i, "</td></tr>")
    end
    shown < df.nrow && print(io, "<tr><td>&vellip;</td></tr>")
    print(io, "</table>")
end
end
big_frame = DataFramesStandIn.DataFrame(10_000)
nothing
"""
ROWS_WHEN_LIMITED = 25

# Luxor 4.6, src/drawings.jl: `show(io, ::MIME"text/plain", d::Drawing)` returns at once when
# `get(io, :jupyter, false)` and the drawing is an SVG or PNG ("IJulia call the `show` function
# twice: once for the image MIME and a second time for the text/plain MIME"); otherwise it
# opens the file with `run(`xdg-open $(returnvalue)`)`, which the stand-in records in OPENED
# instead. `showable` and the SVG `show` are Luxor's, the buffer reduced to a String.
LUXOR_STAND_IN = r"""
module LuxorStandIn
struct Drawing
    surfacetype::Symbol
    filename::String
    svg::String
end
const OPENED = String[]
function Base.show(io::IO, ::MIME"text/plain", d::Drawing)
    if get(io, :jupyter, false) &&
        (d.surfacetype == :svg || d.surfacetype == :png)
        return d.filename
    end
    push!(OPENED, d.filename)   # Luxor: run(`xdg-open $(returnvalue)`)
end
Base.showable(::MIME"image/svg+xml", d::Drawing) = d.surfacetype == :svg
Base.show(f::IO, ::MIME"image/svg+xml", d::Drawing) = write(f, d.svg)
end
drawing = LuxorStandIn.Drawing(:svg, "luxor-drawing.svg",
    "<svg xmlns=\"http://www.w3.org/2000/svg\" width=\"10\" height=\"10\"></svg>")
nothing
"""


@pytest.fixture(scope="module")
def kernel(kernel_env: dict[str, str]) -> Iterator[Kernel]:
    with shared_kernel() as k:
        for code in (DATAFRAMES_STAND_IN, LUXOR_STAND_IN):
            ok(k[1], code)
        yield k


def ok(kc: BlockingKernelClient, code: str) -> list[dict[str, Any]]:
    reply, outputs = execute(kc, code)
    assert reply["content"]["status"] == "ok", (code, reply["content"], outputs)
    return outputs


def bundles(outputs: list[dict[str, Any]], kind: str) -> list[dict[str, Any]]:
    return [m["content"]["data"] for m in outputs if m["msg_type"] == kind]


def rows(html: str) -> int:
    return html.count("<tr>")


# ---- :limit ----


def test_a_frame_as_the_cells_value_shows_its_short_form(kernel: Kernel) -> None:
    """DataFrames' HTML honours :limit: 25 rows and an ellipsis, not 10,000 rows."""
    _, kc = kernel
    (data,) = bundles(ok(kc, "big_frame"), "execute_result")
    assert rows(data["text/html"]) == ROWS_WHEN_LIMITED + 1, len(data["text/html"])
    assert data["text/plain"] == "10000×1 DataFrame"


def test_displays_have_ijulias_size(kernel: Kernel) -> None:
    """A value is rendered 30 lines by 80 columns, as IJulia sets them (LINES and COLUMNS where
    the environment names none): a long vector is cut and a help text wraps where IJulia's do,
    and displaysize() says the same."""
    _, kc = kernel
    (data,) = bundles(ok(kc, "collect(1:1000)"), "execute_result")
    assert len(data["text/plain"].splitlines()) == 30 - 3, data["text/plain"]  # as in IJulia
    (size,) = bundles(ok(kc, 'displaysize(), ENV["COLUMNS"]'), "execute_result")
    assert size["text/plain"] == '((30, 80), "80")'


def test_every_display_path_shows_the_short_form(kernel: Kernel) -> None:
    """display(x), display(mime, x), and JKernel.display / update_display with a display id."""
    _, kc = kernel
    outputs = ok(
        kc,
        'display(big_frame); display("text/html", big_frame); '
        "id = JKernel.display(big_frame; display_id = true); "
        "JKernel.update_display(DataFramesStandIn.DataFrame(30); display_id = id)",
    )
    shown = bundles(outputs, "display_data")
    updated = bundles(outputs, "update_display_data")
    assert len(shown) == 3 and len(updated) == 1, outputs
    assert [rows(d["text/html"]) for d in shown + updated] == [ROWS_WHEN_LIMITED + 1] * 4


# ---- :jupyter ----


def test_a_drawing_knows_it_is_in_a_notebook(kernel: Kernel) -> None:
    """Luxor's text/plain reads :jupyter: it shows the SVG and opens no viewer on the kernel's
    machine, whether the drawing is the cell's value or displayed."""
    _, kc = kernel
    (data,) = bundles(ok(kc, "drawing"), "execute_result")
    assert data["image/svg+xml"].startswith("<svg"), data
    assert data["text/plain"] == ""
    (shown,) = bundles(ok(kc, "display(drawing)"), "display_data")
    assert set(shown) == {"image/svg+xml", "text/plain"}, shown
    (opened,) = bundles(ok(kc, "LuxorStandIn.OPENED"), "execute_result")
    assert opened["text/plain"] == "String[]"


def test_each_drawing_is_asked_what_it_shows_as(kernel: Kernel) -> None:
    """Luxor's `showable` answers by the drawing's surface: after an SVG drawing, a PNG one of
    the same type carries no SVG (the kernel keeps what a type shows as only where Base's
    `showable`, which asks the type alone, decides)."""
    _, kc = kernel
    (svg,) = bundles(ok(kc, "drawing"), "execute_result")
    assert "image/svg+xml" in svg, svg
    # Its text/plain is empty, and a cell's empty value shows nothing: the same bundle, as
    # IJulia's display_dict (which packages call) returns it.
    png = 'LuxorStandIn.Drawing(:png, "luxor-drawing.png", "<svg></svg>")'
    keys = f'import IJulia; join(sort!(collect(keys(IJulia.display_dict({png})))), " ")'
    (data,) = bundles(ok(kc, keys), "execute_result")
    assert data["text/plain"] == '"text/plain"', data


# ---- :color ----

COLOURED = r"""
struct Coloured end
Base.show(io::IO, ::Coloured) = printstyled(io, "red"; color = :red)
Base.show(io::IO, ::MIME"text/html", ::Coloured) =
    print(io, "<b>colour: ", get(io, :color, false), "</b>")
"""


def test_values_are_rendered_with_the_kernels_colour(kernel: Kernel) -> None:
    """:color as stdout has it (--color=yes here): text/plain carries ANSI colour, as IJulia's."""
    _, kc = kernel
    ok(kc, COLOURED)
    (data,) = bundles(ok(kc, "Coloured()"), "execute_result")
    assert data["text/plain"] == "\x1b[31mred\x1b[39m"
    assert data["text/html"] == "<b>colour: true</b>"


# ---- :jupyter_stream on stdout and stderr ----

STREAM_PROBE = r"""
struct StreamProbe end
Base.show(io::IO, ::StreamProbe) = print(io, "probe on ", get(io, :jupyter_stream, "none"))
"""


def test_stdout_and_stderr_name_their_stream(kernel: Kernel) -> None:
    """As IJulia's: `get(stdout, :jupyter_stream, ...)` is "stdout", and "stderr" for stderr."""
    _, kc = kernel
    ok(kc, STREAM_PROBE)
    outputs = ok(kc, "println(StreamProbe()); println(stderr, StreamProbe())")
    assert text_of(outputs, "stdout") == "probe on stdout\n"
    assert text_of(outputs, "stderr") == "probe on stderr\n"


def test_derived_contexts_and_the_logger_keep_the_stream(kernel: Kernel) -> None:
    """`IOContext(stdout, ...)`, a value logged with @info, and stdout after a user's
    redirect_stdout round trip still name their stream."""
    _, kc = kernel
    ok(kc, STREAM_PROBE)
    outputs = ok(
        kc,
        "show(IOContext(stdout, :compact => true), StreamProbe()); println(); "
        '@info "logged" value = StreamProbe(); '
        "old = stdout; rd, wr = redirect_stdout(); redirect_stdout(old); close(wr); "
        "println(StreamProbe())",
    )
    assert text_of(outputs, "stdout") == "probe on stdout\nprobe on stdout\n"
    logged = strip_ansi(text_of(outputs, "stderr"))
    assert "value = probe on stderr" in logged, logged
