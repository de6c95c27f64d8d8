"""The Julia side takes from outside JKernel only what julia/JKernel/surface.toml lists.

Every Base/Core/REPL/Pkg/Distributed/... name, every ccall symbol and every Base type we
subtype is in that reviewed list, with the Julia branches it was checked against; every entry
is still used; and no IO subtype of ours has a field Base reserves (KernelStdio's
`err::Bool` made every print fail on Julia >= 1.7). Pure Python, no Julia: the checker is
tests/julia_surface.py.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import julia_surface as js

# capture.jl at commit 4329abd (git show 4329abd:julia/JKernel/src/capture.jl, lines 200-210):
# the struct that broke printing on every Julia >= 1.7.
KERNELSTDIO_4329ABD = '''
"""
    KernelStdio(pipe, color, err=false)

What user code sees as `stdout` / `stderr`: the pipe fd 1 or fd 2 is, plus the IOContext
property a terminal would give it (`:color`).
"""
struct KernelStdio{T<:IO} <: Base.AbstractPipe
    ctx::IOContext{T}
    err::Bool
end
KernelStdio(pipe::IO, color::Bool, err::Bool = false) =
    KernelStdio(IOContext(pipe, :color => color), err)
'''


@pytest.fixture(scope="module")
def surface() -> js.Surface:
    return js.load_surface()


@pytest.fixture(scope="module")
def scanned(surface: js.Surface) -> tuple[list[js.Source], list[js.Use]]:
    return js.scan(surface=surface)


def fixture_source(text: str, name: str = "julia/JKernel/src/fixture.jl") -> js.Source:
    return js.load_source(Path(name), text=text)


def report(problems: list[js.Problem]) -> str:
    return "\n".join(str(p) for p in problems)


# ---- the code against the list ----


def test_every_outside_name_the_julia_side_uses_is_listed(surface, scanned):
    """An outside name not in surface.toml fails here with file:line; list it once its
    definition was read on release-1.10, release-1.12 and master."""
    _, uses = scanned
    problems = js.unlisted(uses, surface)
    assert not problems, report(problems)


def test_every_listed_entry_is_still_used(surface, scanned):
    """The list stays true: an entry (or binding) the code stopped using must go, and a
    `planned` entry the code now uses must drop its `planned` line."""
    sources, uses = scanned
    problems = js.stale(uses, sources, surface)
    assert not problems, report(problems)


def test_every_entry_says_where_it_was_checked(surface, scanned):
    """Each entry names its file, what we rely on and the evidence, and puts each branch in
    exactly one of checked / missing / unverified; a name missing somewhere is gated, and the
    guard it names is in the code."""
    sources, _ = scanned
    problems = js.entry_problems(surface, sources)
    assert not problems, report(problems)


def test_no_io_subtype_of_ours_has_a_field_base_reserves(scanned):
    """Base >= 1.7's getproperty(::AbstractPipe, name) (base/io.jl) returns
    getfield(pipe, name)::IO for in/out/err and *_stream: such a field of another type
    makes every read of it throw."""
    sources, _ = scanned
    problems = js.reserved_field_problems(sources)
    assert not problems, report(problems)


def test_the_scan_covers_the_files_and_types_it_should(scanned):
    """The checks above cannot pass by scanning nothing."""
    sources, uses = scanned
    rels = {s.rel for s in sources}
    assert {"julia/server.jl", "julia/launcher.jl", "julia/JKernel/src/JKernel.jl"} <= rels
    assert len(rels) >= 15
    io = js.io_subtypes(sources)
    assert "KernelStdin" in io
    names = {u.name for u in uses}
    assert {"Base.isprecompiled", "ccall :prctl", "<: IO", "Distributed.PGRP.refs"} <= names


# ---- the checker against known breaks ----


def test_the_reserved_field_check_reports_the_original_kernelstdio():
    """N1's code as it was at 4329abd is reported, naming the field and the line."""
    src = fixture_source(KERNELSTDIO_4329ABD)
    problems = js.reserved_field_problems([src])
    assert len(problems) == 1, report(problems)
    assert problems[0].where == f"{src.rel}:10"
    assert "field `err` of KernelStdio <: Base.AbstractPipe" in problems[0].message


def test_the_reserved_field_check_follows_our_own_io_types_and_getproperty():
    """A pipe of ours that subtypes another of ours is an IO type too, and a getproperty
    method of ours on one is reported."""
    text = (
        "abstract type OurPipe <: Base.AbstractPipe end\n"
        "struct Tee <: OurPipe\n    out_stream::Vector{UInt8}\n    n::Int\nend\n"
        "Base.getproperty(t::Tee, name::Symbol) = getfield(t, name)\n"
        "struct Plain\n    err::Bool\nend\n"
    )
    problems = js.reserved_field_problems([fixture_source(text)])
    messages = report(problems)
    assert "field `out_stream` of Tee" in messages
    assert "a method of Base.getproperty for Tee" in messages
    assert "Plain" not in messages  # not an IO type: its fields are its own
    assert len(problems) == 2, messages


def test_an_unlisted_internal_name_is_reported_with_its_line(surface):
    text = "x = 1\nf() = Base.some_internal_name(stdout)\ng() = getfield(Base, :other_internal)\n"
    uses = js.find_uses(fixture_source(text), surface.bindings)
    problems = report(js.unlisted(uses, surface))
    assert "fixture.jl:2: Base.some_internal_name is not in" in problems
    assert "fixture.jl:3: Base.other_internal is not in" in problems


def test_a_listed_entry_the_code_no_longer_uses_is_reported(surface, scanned):
    sources, uses = scanned
    kept = [u for u in uses if u.name != "Base.buffer_writes"]
    problems = report(js.stale(kept, sources, surface))
    assert "Base.buffer_writes is listed but no longer used" in problems


def test_comments_strings_and_docstrings_are_not_code_but_interpolation_is():
    text = (
        '"""\n    f()\n\nCalls `Base.doc_only()`.\n"""\n'
        "f() = 1  # Base.comment_only\n"
        "#= Base.block_comment #= nested =# Base.still_comment =#\n"
        'g() = "Base.string_only $(Base.interpolated()) $x"\n'
        "h() = `$(Base.julia_cmd()) -e 1`\n"
        'c = \'"\'; d = r"Base.regex_only"\n'
        "e = x' * Base.after_adjoint\n"
        'k = isdefined(Base.Experimental, Symbol("@optlevel"))\n'
    )
    src = fixture_source(text)
    assert src.stripped.count("\n") == text.count("\n")
    names = {u.name: u.line for u in js.find_uses(src)}
    assert names == {
        "Base.interpolated": 8,
        "Base.julia_cmd": 9,
        "Base.after_adjoint": 11,
        "Base.Experimental": 12,
        "Base.Experimental.@optlevel": 12,
    }, names


def test_outside_names_reached_through_reflection_and_bindings_are_found():
    text = (
        "Core.eval(Base, :(stdout = $s))\n"
        "ccall(:setvbuf, Cint, ()); cglobal((:stdout, libc), Ptr{Cvoid})\n"
        "w = D.map_pid_wrkr[pid]; isdefined(w, :manager) && w.config.ospid\n"
        "using Logging: ConsoleLogger, global_logger\n"
    )
    bindings = [
        js.Binding("julia/JKernel/src/fixture.jl", "D", "Distributed"),
        js.Binding("julia/JKernel/src/fixture.jl", "w", "Distributed.Worker"),
    ]
    names = {u.name for u in js.find_uses(fixture_source(text), bindings)}
    assert names == {
        "Core.eval", "Base.stdout", "ccall :setvbuf", "cglobal :stdout",
        "Distributed.map_pid_wrkr", "Distributed.Worker.manager",
        "Distributed.Worker.config.ospid", "Logging.ConsoleLogger", "Logging.global_logger",
    }, names  # fmt: skip
