"""The Julia our users run, emulated on 1.5.3: newer Base contracts preloaded (tests/contracts/).

Users run Julia 1.10 and newer; only 1.5.3 runs here. Two contracts of the newer Base can be
loaded into 1.5.3 with ``julia -L``, and with them today's notebook paths fail here exactly as
they failed for users before the fix:

- 1.7+ ``getproperty(::AbstractPipe, ::Symbol)``: a field ``err::Bool`` on our stdout type made
  every ``println`` throw a TypeError (audit N1);
- 1.10+ loading in the world Base recorded at start-up: ``using`` a package that needs
  compiling called ``pipe_writer`` on a stdout type of ours, whose methods that world cannot see
  ("method too new", audit N10).

The cells here are what a notebook does first: print, log, ask for help, ``]`` and ``;`` modes,
and ``using`` a package that compiles. The invariant behind N10 is checked directly too:
``stdout``, ``stderr`` and the logger's stream are Base types, through any ``IOContext``, after
a user's ``redirect_stdout`` round trip and after a restart.
"""

from __future__ import annotations

import asyncio
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from jutul_jkernel.supervisor import ExecutionResult, JuliaSupervisor

from .conftest import SHARED, STARTUP_TIMEOUT, Output

pytestmark = pytest.mark.integration

CONTRACTS = Path(__file__).parent / "contracts"
PRELOADS = ("abstractpipe_getproperty.jl", "require_world.jl")
# Compiling a fresh package starts a second Julia: seconds on a loaded 2-core machine.
CELL_BOUND = 120.0

# Every module the type of `stdout`, `stderr` and the global logger's stream is made of, with
# the `IOContext` unwrapped. A type of ours anywhere there is what Base's loading world cannot
# call. Prints one JSON line, so the test reads it whatever else the cell printed.
STDIO_MODULES = r"""
let mods(io) = io isa IOContext ? [string(parentmodule(typeof(io))); mods(io.io)] :
                                  [string(parentmodule(typeof(io)))]
    logger = Base.CoreLogging.global_logger()
    stream = isdefined(logger, :stream) ? getfield(logger, :stream) : nothing
    found = Dict("stdout" => mods(stdout), "stderr" => mods(stderr),
                 "logger" => [string(parentmodule(typeof(logger)))],
                 "logger stream" => stream === nothing ? String[] : mods(stream))
    JKernel.json(found) |> String
end
"""
BASE_MODULES = {"Base", "Core", "Logging"}


async def run(julia: JuliaSupervisor, code: str, out: Output | None = None) -> ExecutionResult:
    return await asyncio.wait_for(julia.execute(code, out), CELL_BOUND)


async def stdio_modules(julia: JuliaSupervisor) -> dict[str, list[str]]:
    r = await run(julia, STDIO_MODULES)
    assert r.status == "ok", r
    found: dict[str, list[str]] = json.loads(json.loads(r.text))
    return found


def assert_base_only(found: dict[str, list[str]]) -> None:
    ours = {k: v for k, v in found.items() if not set(v) <= BASE_MODULES}
    assert not ours, f"types from outside Base where Base's loading code calls them: {ours}"
    assert found["logger stream"], found  # ConsoleLogger has a stream: it was looked at


def fresh_package(root: Path) -> tuple[str, str]:
    """A package that has never been compiled, whose __init__ prints; (name, cell)."""
    name = "Fresh" + uuid.uuid4().hex[:8]
    (root / name / "src").mkdir(parents=True)
    (root / name / "Project.toml").write_text(f'name = "{name}"\nuuid = "{uuid.uuid4()}"\n')
    (root / name / "src" / f"{name}.jl").write_text(
        f'module {name}\nfunction __init__()\n    println("init of {name}")\nend\n'
        f"answer() = 42\nend\n"
    )
    cell = f'push!(LOAD_PATH, "{root}")\nusing {name}\n{name}.answer()'
    return name, cell


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def newer_julia() -> AsyncIterator[JuliaSupervisor]:
    """Julia 1.5.3 with every contract in tests/contracts/ preloaded."""
    args = [a for name in PRELOADS for a in ("-L", str(CONTRACTS / name))]
    sup = JuliaSupervisor(julia_args=args, startup_timeout=STARTUP_TIMEOUT)
    await sup.start()
    SHARED.append(sup)
    try:
        yield sup
    finally:
        await sup.shutdown()
        SHARED.remove(sup)


@pytest.mark.asyncio(loop_scope="module")
async def test_the_contracts_took_hold(newer_julia: JuliaSupervisor) -> None:
    """The preloads are in force in the kernel's Julia (each file also checks itself)."""
    code = (
        "struct ProbeWithErr <: Base.AbstractPipe; err::Bool; end\n"
        "try; ProbeWithErr(false).err; false; catch e; e isa TypeError; end"
    )
    assert (await run(newer_julia, code)).text == "true"
    assert (await run(newer_julia, "isdefined(Base, :CONTRACT_REQUIRE_WORLD)")).text == "true"


@pytest.mark.asyncio(loop_scope="module")
async def test_printing_and_logging_work(newer_julia: JuliaSupervisor) -> None:
    out = Output()
    code = 'println("to out"); println(stderr, "to err"); @info "an info"; @warn "a warning"; 7'
    r = await run(newer_julia, code, out)
    assert r.status == "ok" and r.text == "7", r
    assert out.text() == "to out\n"
    err = out.text("stderr")
    assert err.startswith("to err\n"), err
    assert "Info: an info" in err and "Warning: a warning" in err, err


@pytest.mark.asyncio(loop_scope="module")
async def test_stdout_and_stderr_keep_their_order(newer_julia: JuliaSupervisor) -> None:
    out = Output()
    r = await run(newer_julia, "for i in 1:50; println(i); println(stderr, -i); end", out)
    assert r.status == "ok", r
    runs: list[tuple[str, str]] = []
    for name, data in out.chunks:
        if runs and runs[-1][0] == name:
            runs[-1] = (name, runs[-1][1] + data.decode())
        else:
            runs.append((name, data.decode()))
    got = [(name, line) for name, text in runs for line in text.splitlines()]
    assert got == [(n, str(k * i)) for i in range(1, 51) for n, k in (("stdout", 1), ("stderr", -1))]


@pytest.mark.asyncio(loop_scope="module")
async def test_help_pkg_and_shell_modes_work(newer_julia: JuliaSupervisor, tmp_path: Path) -> None:
    r = await run(newer_julia, "?sin")
    assert r.status == "ok" and "sin(x)" in r.text, r
    out = Output()
    r = await run(newer_julia, f"] activate {tmp_path / 'env'}", out)
    assert r.status == "ok", r
    out = Output()
    r = await run(newer_julia, "] st", out)
    assert r.status == "ok", r
    assert "Status" in out.text() + out.text("stderr"), out.chunks
    out = Output()
    r = await run(newer_julia, ";echo from the shell", out)
    assert r.status == "ok" and out.text() == "from the shell\n", (r, out.chunks)


@pytest.mark.asyncio(loop_scope="module")
async def test_using_a_package_that_compiles(newer_julia: JuliaSupervisor, tmp_path: Path) -> None:
    """The cell users run first after an install: Base compiles the package in its loading
    world, where only Base's methods exist; the package's __init__ print shows in the cell."""
    name, cell = fresh_package(tmp_path)
    out = Output()
    r = await run(newer_julia, cell, out)
    assert r.status == "ok" and r.text == "42", (r, out.chunks)
    assert f"init of {name}\n" in out.text(), out.chunks


@pytest.mark.asyncio(loop_scope="module")
async def test_stdio_types_are_base_types(newer_julia: JuliaSupervisor) -> None:
    assert_base_only(await stdio_modules(newer_julia))


async def test_stdio_types_stay_base_types_after_redirect_and_restart(tmp_path: Path) -> None:
    """A user's redirect_stdout round trip (Suppressor.jl's pattern) restores our stdout, and a
    restarted Julia sets the same Base types up again; output still reaches the cell."""
    sup = JuliaSupervisor(startup_timeout=STARTUP_TIMEOUT)
    await sup.start()
    try:
        assert_base_only(await stdio_modules(sup))
        code = (
            "old = stdout; rd, wr = redirect_stdout(); println(\"hidden\"); "
            "redirect_stdout(old); close(wr); String(read(rd))"
        )
        r = await run(sup, code)
        assert r.status == "ok" and r.text == '"hidden\\n"', r
        assert_base_only(await stdio_modules(sup))
        out = Output()
        assert (await run(sup, 'println("visible")', out)).status == "ok"
        assert out.text() == "visible\n"
        await sup.restart()
        assert_base_only(await stdio_modules(sup))
        name, cell = fresh_package(tmp_path)
        out = Output()
        r = await run(sup, cell, out)
        assert r.status == "ok" and r.text == "42", (r, out.chunks)
        assert f"init of {name}\n" in out.text(), out.chunks
    finally:
        await sup.shutdown()
