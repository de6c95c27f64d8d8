"""The idle warm-up and the first queries of a session (eval.jl, queries.jl, compat.jl).

After its start Julia runs the warm-up one step per idle interval on the thread that answers
queries: a query that comes while a step holds the thread is answered before the next step
starts. is_complete reads JuliaSyntax's parse stream where Base's parser is JuliaSyntax's hook
(compat.jl, ``syntax_status``), so a fresh session's first is_complete of unfinished code
compiles none of the parser, and it answers as the parse of the cell would. Every wait is
bounded; order is checked by events recorded in Julia, never by time.
"""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

import pytest

from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor

from .conftest import STARTUP_TIMEOUT
from .supervisors import run, wait_until_warm

pytestmark = pytest.mark.integration

QUERY_BOUND = 60.0
# A step (a function and its arguments) that holds Julia's thread without yielding (as
# compiling or reading debug information does), after creating the file HELD; then one that
# records that it ran. A completion of `warm_up_probe.` records when the query is answered
# (propertynames runs in the latest world).
SETUP = """
struct WarmUpProbe end
const warm_up_events = Symbol[]
Base.propertynames(::WarmUpProbe, private::Bool=false) =
    (push!(warm_up_events, :query); (:answered,))
warm_up_probe = WarmUpProbe()
empty!(JKernel.WARM_UP)
push!(JKernel.WARM_UP,
      "hold" => (() -> (touch(HELD); Libc.systemsleep(3.0)),),
      "record" => (() -> push!(warm_up_events, :step),))
JKernel.WARMING[] = true
nothing
"""


async def test_a_query_during_a_warm_up_step_is_answered_before_the_next_step(
    tmp_path: Path,
) -> None:
    """A completion sent while a warm-up step holds Julia's thread is answered once that step
    ends, before the warm-up's next step runs: the events Julia recorded put the query first."""
    held = tmp_path / "held"
    sup = JuliaSupervisor(startup_timeout=STARTUP_TIMEOUT)
    await sup.start()
    try:
        await wait_until_warm(sup)
        done = await run(sup, f"const HELD = {str(held)!r}\n".replace("'", '"') + SETUP)
        assert done.status == "ok", done.text
        deadline = time.monotonic() + QUERY_BOUND
        while not held.exists():
            assert time.monotonic() < deadline, "the warm-up step never ran"
            await asyncio.sleep(0.01)
        answer = await asyncio.wait_for(sup.complete("warm_up_probe.", 14), QUERY_BOUND)
        assert answer["matches"] == ["answered"], answer
        await wait_until_warm(sup)
        events = await run(sup, 'join(warm_up_events, ",")')
        assert events.text == '"query,step"', events.text
    finally:
        await sup.shutdown()


# Inputs whose is_complete status the parse stream gives (compat.jl, syntax_status) and the
# parse of the cell gives too: unfinished blocks, strings, comments and brackets, trailing
# comments after them, errors, and complete code.
CORPUS = [
    "function f(x)",
    "function f(x) # a comment",
    "begin # a comment\n",
    "for i in 1:3\n    x",
    "x = [1,\n",
    "x = (1 +\n# a comment\n",
    "f(x) = x)",
    "x = )",
    "1 2",
    "]",
    "end",
    '"abc',
    'a = """\nabc',
    "#= an open comment",
    "`ls",
    "'a",
    '"\\q"',
    "struct S\n    x::Int",
    "@time begin",
    "1 +",
    "x =",
    "x = 1",
    "f(x) = x # done",
    "",
    "   ",
    "# only a comment",
    "function f(x)\n    x\nend",
]


def _julia_strings(items: list[str]) -> str:
    return "[" + ", ".join(_julia_string(s) for s in items) + "]"


def _julia_string(s: str) -> str:
    escaped = s.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$")
    return '"' + escaped.replace("\n", "\\n") + '"'


async def test_is_complete_answers_as_the_parse_of_the_cell() -> None:
    """Where the parse stream answers is_complete (Julia with JuliaSyntax as its parser), it
    gives what the parse of the same code as a cell gives, for every input of the corpus."""
    sup = JuliaSupervisor(startup_timeout=STARTUP_TIMEOUT)
    await sup.start()
    try:
        code = (
            f"corpus = {_julia_strings(CORPUS)}\n"
            "used = isdefined(Base, :JuliaSyntax) ? "
            'JKernel.syntax_status("function f(x)") !== nothing : true\n'
            "differ = [(c, JKernel.syntax_status(c), JKernel.parsed_status(c)) for c in corpus\n"
            "          if JKernel.syntax_status(c) !== nothing &&\n"
            "             JKernel.syntax_status(c) != JKernel.parsed_status(c)]\n"
            "(used, differ)"
        )
        result = await run(sup, code)
        assert result.status == "ok", result.text
        assert result.text.startswith("(true, "), result.text
        assert result.text.endswith("[])"), result.text
    finally:
        await sup.shutdown()


def _uses_pkgimages() -> bool:
    from .test_precompile import uses_pkgimages

    return uses_pkgimages()


async def test_the_first_is_complete_compiles_nothing_of_the_parser(tmp_path: Path) -> None:
    """A fresh session's first request, an is_complete of unfinished code, compiles no method
    of JuliaSyntax or its callees (Julia traces what it compiles: --trace-compile), where the
    parser's error path once compiled at run time (0.1-0.3 s on 1.10.0). The warm-up's own
    parse of a syntax error comes late in its steps, and the test checks it had not run."""
    if not _uses_pkgimages():
        pytest.skip("this Julia's package cache holds no native code (1.5-1.8, or --pkgimages=no)")
    trace = tmp_path / "compiled.jl"
    sup = JuliaSupervisor(julia_args=[f"--trace-compile={trace}"], startup_timeout=STARTUP_TIMEOUT)
    await sup.start()
    try:
        answer = await asyncio.wait_for(sup.is_complete("function f(x)"), QUERY_BOUND)
        assert answer == {"status": "incomplete", "indent": "    "}, answer
        left = await run(sup, 'any(p -> first(p) == "syntax error", JKernel.WARM_UP)')
        assert left.text == "true", "the warm-up had parsed its syntax error already"
    finally:
        await sup.shutdown()
    parser = [line for line in trace.read_text().splitlines() if "JuliaSyntax" in line]
    assert not parser, "\n".join(parser)


async def test_the_start_and_the_warm_up_compile_nothing_of_the_kernels_own(
    tmp_path: Path,
) -> None:
    """From its start to the end of its warm-up, a session compiles no method of JKernel's
    (--trace-compile): the steps' code, the tasks the start schedules and what they call are in
    the compile cache, so a warm-up step holds the thread only for what Base compiles or
    loads, and a query waits less behind it. (Julia 1.12 marks "# recompile" what it compiles
    again because a load invalidated the cached code: not counted here.)"""
    if not _uses_pkgimages():
        pytest.skip("this Julia's package cache holds no native code (1.5-1.8, or --pkgimages=no)")
    trace = tmp_path / "compiled.jl"
    sup = JuliaSupervisor(julia_args=[f"--trace-compile={trace}"], startup_timeout=STARTUP_TIMEOUT)
    await sup.start()
    try:
        await wait_until_warm(sup)
    finally:
        await sup.shutdown()
    own = [
        line
        for line in trace.read_text().splitlines()
        if "JKernel." in line and not line.endswith("# recompile")
    ]
    assert not own, "\n".join(own)


async def test_the_warm_up_reads_no_debug_information_and_the_first_error_does() -> None:
    """The warm-up's errors are shown without looking a frame of compiled code up, so Julia
    has read none of its debug information when the warm-up ends (~70 MiB kept for the session
    on 1.10.0, as the user's first error then reads it, as in the REPL and IJulia); the user's
    first error still shows Base's frames, with their files and lines."""
    async with JuliaSupervisor(startup_timeout=STARTUP_TIMEOUT) as sup:
        await wait_until_warm(sup)
        looked_up = await run(sup, "length(JKernel.FRAMES_AT)")
        assert looked_up.text == "0", f"the warm-up looked {looked_up.text} addresses up"
        failed = await run(sup, 'sum(["a", "b"])')
        assert failed.status == "error", failed
        traceback = "\n".join(failed.error_info().traceback)
        assert "reduce.jl" in traceback, traceback
        assert (await run(sup, "length(JKernel.FRAMES_AT) > 0")).text == "true"


# Cells of new types after the warm-up: functions, structs, literals of several kinds.
NEW_TYPES_CELLS = (
    "shown_f1(x) = x + 1",
    "struct Shown1; x::Int; end; Shown1(1)",
    "shown_f2(x) = 2.5x",
    "struct Shown2 end; true && Shown2()",
    "'s'",
    "Dict(:shown => 1)",
)
# Cells with no code of their own to compile: an assignment, an Int shown, a line printed, a
# `using` of a loaded module.
NOTHING_TO_COMPILE = ("x_shown = 1", "x_shown", 'println("shown")', "using Base64")
# The bundle table's entry type (display.jl, BundleMimes): a Base method compiled with it is
# compiled for the kernel's own data.
BUNDLE_ENTRY = "Tuple{Base.Multimedia.MIME{mime} where mime, Bool}"


async def test_cells_of_new_types_compile_only_their_own_code(tmp_path: Path) -> None:
    """After the warm-up, notebook cells (named In[n], so `ans` and `Out` are set) that define
    a function, show a struct's value, a literal of a new kind or a Dict compile only what is
    theirs (--trace-compile: the type's constructor and `show`), nothing of JKernel's and
    nothing for the kernel's own tables; and an assignment, an Int, a `println` and a `using`
    compile nothing at all. Each new type used to compile the display path, the AST rewrite of
    the cell and a dictionary's setindex! again, and the first function definition of a session
    took 131-147 ms against IJulia's 24-26 (1.10.0); `ans` compiled per value type, a first
    `println` 5 ms and a first `using` 26-28 ms."""
    if not _uses_pkgimages():
        pytest.skip("this Julia's package cache holds no native code (1.5-1.8, or --pkgimages=no)")
    trace = tmp_path / "compiled.jl"
    sup = JuliaSupervisor(julia_args=[f"--trace-compile={trace}"], startup_timeout=STARTUP_TIMEOUT)
    await sup.start()

    async def cell(n: int, code: str) -> None:
        done = await asyncio.wait_for(sup.execute(code, name=f"In[{n}]"), QUERY_BOUND)
        assert done.status == "ok", (code, done.text)

    try:
        await wait_until_warm(sup)
        before = len(trace.read_text().splitlines())
        for n, code in enumerate(NEW_TYPES_CELLS, 1):
            await cell(n, code)
        before_plain = len(trace.read_text().splitlines())
        for n, code in enumerate(NOTHING_TO_COMPILE, len(NEW_TYPES_CELLS) + 1):
            await cell(n, code)
        # the trace is written as Julia compiles: a last cell orders it after the others
        await run(sup, "nothing")
        lines = trace.read_text().splitlines()  # read before Julia's exit compiles its own
    finally:
        await sup.shutdown()
    own = [line for line in lines[before:] if "JKernel." in line or BUNDLE_ENTRY in line]
    assert not own, "\n".join(own)
    plain = lines[before_plain:]
    assert not plain, "\n".join(plain)
