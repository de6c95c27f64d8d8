"""The session a notebook written for IJulia or the REPL expects, seen through the supervisor.

Colour follows Julia's own ``--color`` flag (the kernelspec passes ``--color=yes``), the user's
startup file runs at the start of the first cell, ``ARGS`` is empty, and the query fixes from
the Julia-version audit (empty completion ranges, help in a hard scope, LaTeX completion text
on 1.12+) hold. The kernelspec side of the same points is in test_kernel_environment.py.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from pathlib import Path

import psutil
import pytest
import pytest_asyncio

from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor
from jutul_jkernel.supervisor.launch_settings import split_startup_file_flag

from .conftest import ANSI, STARTUP_TIMEOUT, Output, private_depot
from .supervisors import CELL_BOUND, INTERRUPT_BOUND, run, shared_supervisor

pytestmark = pytest.mark.integration


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def coloured() -> AsyncIterator[JuliaSupervisor]:
    """One Julia started with --color=yes, as the default kernelspec starts it."""
    async with shared_supervisor("--color=yes") as sup:
        yield sup


# ---- colour (issue 9, point 6) ----

COLOUR_CELL = 'printstyled("red"; color=:red); println(); @warn "careful"'


@pytest.mark.asyncio(loop_scope="module")
async def test_color_reaches_printstyled_logging_and_tracebacks(
    coloured: JuliaSupervisor,
) -> None:
    """With --color=yes output and tracebacks carry ANSI colour; evalue stays plain. (Values are
    rendered with :color too, as IJulia's: see test_output_context; a string has none.)"""
    out = Output()
    r = await run(coloured, COLOUR_CELL, out)
    assert r.status == "ok"
    assert "\x1b[31mred\x1b[39m" in out.text("stdout")
    assert ANSI.search(out.text("stderr")), out.text("stderr")
    assert "Warning: " in ANSI.sub("", out.text("stderr"))

    r = await run(coloured, 'f_fails() = error("plain message"); f_fails()')
    assert r.status == "error" and r.error is not None
    assert r.error.evalue == "plain message"
    trace = "\n".join(r.error.traceback)
    assert ANSI.search(trace), trace
    assert "f_fails" in ANSI.sub("", trace)

    r = await run(coloured, '"a string value"')
    assert r.text == '"a string value"'


@pytest.mark.asyncio(loop_scope="module")
async def test_restoring_stdout_after_a_users_redirect(coloured: JuliaSupervisor) -> None:
    """``old = stdout; redirect_stdout(pipe); ...; redirect_stdout(old)`` (Suppressor.jl) restores
    the kernel's stdout, colour and all; on Julia 1.5/1.6 only the server's own method does."""
    out = Output()
    r = await run(
        coloured,
        'old = stdout; rd, wr = redirect_stdout(); println("swallowed"); '
        "redirect_stdout(old); close(wr); captured = read(rd, String); "
        'printstyled("visible"; color=:green); println()',
        out,
    )
    assert r.status == "ok", r.text
    assert out.text() == "\x1b[32mvisible\x1b[39m\n"
    assert (await run(coloured, "captured")).text == '"swallowed\\n"'
    out = Output()
    await run(coloured, 'run(`echo from a child`); println("and Julia")', out)
    assert out.text() == "from a child\nand Julia\n"


async def test_without_color_flag_output_is_plain(julia: JuliaSupervisor) -> None:
    """Julia's default (no --color, output to a pipe) stays plain: the installer's --no-color."""
    out = Output()
    await run(julia, COLOUR_CELL, out)
    assert out.text("stdout") == "red\n"
    assert not ANSI.search(out.text("stderr"))
    r = await run(julia, 'error("plain")')
    assert r.error is not None and not ANSI.search("\n".join(r.error.traceback))


# ---- startup file and ARGS (point 8) ----


@contextlib.asynccontextmanager
async def with_startup_file(
    depot: Path, body: str, *julia_args: str
) -> AsyncIterator[JuliaSupervisor]:
    """A supervisor whose Julia uses ``depot``, where config/startup.jl is ``body``."""
    (depot / "config").mkdir(parents=True)
    (depot / "config" / "startup.jl").write_text(body)
    sup = JuliaSupervisor(
        julia_args=list(julia_args),
        env={"JULIA_DEPOT_PATH": private_depot(depot)},
        startup_timeout=STARTUP_TIMEOUT,
    )
    try:
        yield sup
    finally:
        await sup.shutdown()


FAILING_STARTUP = 'println("hello from startup")\nstartup_value = 41\nerror("startup broke")\n'


async def test_startup_file_runs_in_the_first_cell_and_its_error_shows_there(
    tmp_path: Path,
) -> None:
    """A startup file that throws: its output and error are in the first cell, which still
    runs; what it defined before the error stays; it never runs again."""
    async with with_startup_file(tmp_path, FAILING_STARTUP) as sup:
        out = Output()
        r = await run(sup, "1 + 1", out)
        assert (r.status, r.text) == ("ok", "2")
        assert out.text("stdout") == "hello from startup\n"
        err = out.text("stderr")
        assert "the startup file failed" in err
        assert "startup broke" in err
        assert str(tmp_path / "config" / "startup.jl") + ":3" in err
        assert "server.jl" not in err and "load_julia_startup" not in err
        out = Output()
        assert (await run(sup, "startup_value", out)).text == "41"
        assert out.chunks == []
        # The kernel's own arguments (the port) are not the user's.
        assert (await run(sup, "ARGS")).text == "String[]"
        assert (await run(sup, 'get(ENV, "JUTUL_JKERNEL_STARTUP_FILE", "unset")')).text == (
            '"unset"'
        )


async def test_startup_file_flag_no_skips_it(tmp_path: Path) -> None:
    """--startup-file=no among the Julia arguments (the installer's --no-startup-file)."""
    async with with_startup_file(tmp_path, FAILING_STARTUP, "--startup-file=no") as sup:
        out = Output()
        assert (await run(sup, "isdefined(Main, :startup_value)", out)).text == "false"
        assert out.chunks == []


async def test_interrupting_a_hanging_startup_file(tmp_path: Path) -> None:
    """A startup file that never finishes is interrupted with the first cell; the session goes
    on and the file does not run again."""
    hanging = 'println("startup waits"); flush(stdout); sleep(1000)\n'
    started = asyncio.Event()

    def on_output(stream: str, data: bytes) -> None:
        if b"startup waits" in data:
            started.set()

    async with with_startup_file(tmp_path, hanging) as sup:
        task = asyncio.create_task(sup.execute("first_cell_ran = true", on_output))
        await asyncio.wait_for(started.wait(), CELL_BOUND)
        await sup.interrupt()
        r = await asyncio.wait_for(task, INTERRUPT_BOUND)
        assert r.status == "interrupted"
        out = Output()
        assert (await run(sup, "isdefined(Main, :first_cell_ran)", out)).text == "false"
        assert out.chunks == []


@pytest.mark.parametrize(
    ("args", "rest", "wanted"),
    [
        ([], [], True),
        (["-O1"], ["-O1"], True),
        (["--startup-file=no", "-O1"], ["-O1"], False),
        (["--startup-file", "no"], [], False),
        (["--startup-file=no", "--startup-file=yes"], [], True),
        (["--startup-file=maybe"], ["--startup-file=maybe"], True),  # Julia rejects it
    ],
)
def test_startup_file_flag_is_taken_from_julias_arguments(
    args: list[str], rest: list[str], wanted: bool
) -> None:
    assert split_startup_file_flag(args) == (rest, wanted)


async def test_julia_itself_never_runs_the_startup_file(tmp_path: Path) -> None:
    """Even asked for with --startup-file=yes, Julia gets exactly one flag: no."""
    async with with_startup_file(tmp_path, FAILING_STARTUP, "--startup-file=yes") as sup:
        await sup.start()
        assert sup.pid is not None
        flags = [a for a in psutil.Process(sup.pid).cmdline() if a.startswith("--startup-file")]
        assert flags == ["--startup-file=no"]
        out = Output()
        assert (await run(sup, "startup_value", out)).text == "41"
        assert "startup broke" in out.text("stderr")


# ---- queries: the audit's B2, B3, B4 (point 10) ----


@pytest.mark.asyncio(loop_scope="module")
@pytest.mark.parametrize(
    "code",
    ['"/nonexistent_dir_jkernel/x', 'x = "/nonexistent_dir_jkernel/', 'open("/no_such_dir_jk/ab'],
)
async def test_completion_with_no_match_in_a_string(coloured: JuliaSupervisor, code: str) -> None:
    """B4: Julia answers an empty range (0:-1 on 1.5); the reply is "no matches", not an error."""
    c = await coloured.complete(code, len(code))
    assert c == {"matches": [], "cursor_start": len(code), "cursor_end": len(code)}


@pytest.mark.asyncio(loop_scope="module")
async def test_latex_completion(coloured: JuliaSupervisor) -> None:
    r"""\alph completes to \alpha (B2 breaks exactly this on 1.12+)."""
    c = await coloured.complete("x = \\alph", 9)
    assert c["matches"] == ["\\alpha"]
    assert c["cursor_start"] == 4


@pytest.mark.asyncio(loop_scope="module")
async def test_completion_text_prefers_named_completion(coloured: JuliaSupervisor) -> None:
    """B2's gate: where REPLCompletions has named_completion (1.12+), its text is used and
    completion_text (which has no method for LaTeX there) is never called."""
    r = await run(
        coloured,
        """
        module FakeCompletions112
            struct Bslash end
            struct Named; completion::String; end
            named_completion(::Bslash) = Named("\\\\alpha")
            completion_text(::Bslash) = error("no method on 1.12")
        end
        JKernel.completion_string(FakeCompletions112.Bslash(), FakeCompletions112)
        """,
    )
    assert (r.status, r.text) == ("ok", '"\\\\alpha"')


@pytest.mark.parametrize("definition", ["docs = 5", "const docs = 5", "docs() = 5"])
async def test_inspect_leaves_a_users_docs_alone(julia: JuliaSupervisor, definition: str) -> None:
    """B3: help runs in a hard scope. On 1.11+ its expression assigns `docs`; at top level that
    would overwrite a user's global, or fail (found=false) on a const or a function. On 1.5.3
    this checks that help still works inside the `let`; test_help_expression_cannot_assign_globals
    checks the scope itself."""
    assert (await run(julia, definition)).status == "ok"
    for name in ("sum", "@time", "for"):  # a function, a macro, a keyword
        doc = await julia.inspect(name, len(name))
        assert doc["found"] is True, (name, doc)
    assert (await run(julia, "docs isa Function ? docs() : docs")).text == "5"


@pytest.mark.asyncio(loop_scope="module")
async def test_inspect_of_an_undocumented_name_finds_nothing(coloured: JuliaSupervisor) -> None:
    """N4: an undocumented name answers found=false (the frontend then shows nothing), for a
    function of the user's and for an internal name of Base's."""
    assert (await run(coloured, "undocumented_fn_for_inspect(x) = x")).status == "ok"
    for name in ("undocumented_fn_for_inspect", "Base.uv_write"):
        doc = await coloured.inspect(name, len(name))
        assert doc["found"] is False, (name, doc)


@pytest.mark.asyncio(loop_scope="module")
async def test_inspect_looks_past_the_internal_binding_warning(coloured: JuliaSupervisor) -> None:
    """N4's gate: 1.11+ puts a "may be internal" admonition before "No documentation found"
    (docview.jl, insert_internal_warning). The help text of that shape, built here, is still
    no documentation; a docstring, with or without the warning before it, is documentation."""
    r = await run(
        coloured,
        """
        import Markdown
        internal_warning() = Markdown.Admonition("warning", "Warning", Any[Markdown.Paragraph(
            Any["The following bindings may be internal; they may change or be removed."])])
        undocumented = Markdown.parse("No documentation found for private binding `Base.x`.")
        documented = Markdown.parse("Add the numbers.")
        pushfirst!(undocumented.content, internal_warning())
        pushfirst!(documented.content, internal_warning())
        (JKernel.documentation_found(undocumented), JKernel.documentation_found(documented))
        """,
    )
    assert (r.status, r.text) == ("ok", "(false, true)")


@pytest.mark.asyncio(loop_scope="module")
async def test_help_expression_cannot_assign_globals(coloured: JuliaSupervisor) -> None:
    """The 1.11+ help expression shape (a block assigning `docs`) leaves Main untouched."""
    r = await run(
        coloured,
        "docs_guard = 1; JKernel.eval_help(:(begin docs_guard = 2; docs_guard + 40 end))",
    )
    assert r.text == "42"
    assert (await run(coloured, "docs_guard")).text == "1"
