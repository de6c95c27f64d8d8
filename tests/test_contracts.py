"""The Julia our users run, emulated on 1.5.3: newer Base contracts preloaded (tests/contracts/).

Users run Julia 1.10 and newer; only 1.5.3 runs here. Two contracts of the newer Base can be
loaded into 1.5.3 with ``julia -L``, and with them today's notebook paths fail here exactly as
they failed for users before the fix:

- 1.7+ ``getproperty(::AbstractPipe, ::Symbol)``: a field ``err::Bool`` on our stdout type made
  every ``println`` throw a TypeError;
- 1.10+ loading in the world Base recorded at start-up: ``using`` a package that needs
  compiling called ``pipe_writer`` on a stdout type of ours, whose methods that world cannot see
  ("method too new").

Two more are preloaded where they matter: 1.12+'s second default REPL AST transform, the
warning for a name reached through a module that does not own it (preloaded with the
others), and master's ^C episodes, whose foreground task the last ^C rung freezes (in
its own kernel, loading JKernel from source, see ``contracts/sigint_episodes.jl``).

The cells here are what a notebook does first: print, log, ask for help, ``]`` and ``;`` modes,
and ``using`` a package that compiles. The invariant behind N10 is checked directly too:
``stdout``, ``stderr`` and the logger's stream are Base types, through any ``IOContext``, after
a user's ``redirect_stdout`` round trip and after a restart.
"""

from __future__ import annotations

import asyncio
import functools
import json
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import pytest_asyncio

from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor

from . import supervisors
from .conftest import STARTUP_TIMEOUT, Output, StartSignal, strip_ansi

pytestmark = pytest.mark.integration

CONTRACTS = Path(__file__).parent / "contracts"
PRELOADS = (
    "abstractpipe_getproperty.jl",
    "require_world.jl",
    "repl_ast_transforms.jl",
    "stdio_iocontext.jl",
)
# Compiling a fresh package starts a second Julia: seconds on a loaded 2-core machine.
CELL_BOUND = 120.0
run = functools.partial(supervisors.run, bound=CELL_BOUND)

# Every top-level module the type of `stdout`, `stderr` and the global logger's stream is made
# of, with the `IOContext` unwrapped. A type of ours anywhere there is what Base's loading world
# cannot call. Top-level: 1.12 moved `ConsoleLogger` into Base, as `Base.CoreLogging`'s (it was
# Logging's). Prints one JSON line, so the test reads it whatever else the cell printed.
STDIO_MODULES = r"""
let top(x) = string(Base.moduleroot(parentmodule(typeof(x))))
    mods(io) = io isa IOContext ? [top(io); mods(io.io)] : [top(io)]
    logger = Base.CoreLogging.global_logger()
    stream = isdefined(logger, :stream) ? getfield(logger, :stream) : nothing
    found = Dict("stdout" => mods(stdout), "stderr" => mods(stderr),
                 "logger" => [top(logger)],
                 "logger stream" => stream === nothing ? String[] : mods(stream))
    JKernel.json(found) |> String
end
"""
BASE_MODULES = {"Base", "Core", "Logging"}


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
    """A package that has never been compiled, whose __init__ prints; (name, cell). The cell
    puts a depot under ``root`` first while it loads the package, so the compile cache goes
    there and not into the user's depot (~/.julia/compiled, where each run left two)."""
    name = "Fresh" + uuid.uuid4().hex[:8]
    (root / name / "src").mkdir(parents=True)
    (root / name / "Project.toml").write_text(f'name = "{name}"\nuuid = "{uuid.uuid4()}"\n')
    (root / name / "src" / f"{name}.jl").write_text(
        f'module {name}\nfunction __init__()\n    println("init of {name}")\nend\n'
        f"answer() = 42\nend\n"
    )
    depot = root / "depot"
    cell = (
        f'push!(LOAD_PATH, "{root}"); pushfirst!(DEPOT_PATH, "{depot}")\n'
        f"using {name}\n"
        f"popfirst!(DEPOT_PATH); pop!(LOAD_PATH)\n"
        f"{name}.answer()"
    )
    return name, cell


@pytest_asyncio.fixture(scope="module", loop_scope="module")
async def newer_julia() -> AsyncIterator[JuliaSupervisor]:
    """Julia 1.5.3 with every contract in tests/contracts/ preloaded."""
    # --color=yes as the kernelspec passes it: with a colour flag, 1.6+ wraps stderr (above).
    args = ["--color=yes", *(a for name in PRELOADS for a in ("-L", str(CONTRACTS / name)))]
    async with supervisors.shared_supervisor(*args) as sup:
        yield sup


@pytest.mark.asyncio(loop_scope="module")
async def test_the_contracts_took_hold(newer_julia: JuliaSupervisor) -> None:
    """The preloads are in force in the kernel's Julia (each file also checks itself)."""
    code = (
        "struct ProbeWithErr <: Base.AbstractPipe; err::Bool; end\n"
        "try; ProbeWithErr(false).err; false; catch e; e isa TypeError; end"
    )
    assert (await run(newer_julia, code)).text == "true"
    # Emulated on 1.5.3; on 1.10 and newer, Base's own.
    code = "isdefined(Base, :CONTRACT_REQUIRE_WORLD) || isdefined(Base, :_require_world_age)"
    assert (await run(newer_julia, code)).text == "true"
    code = "Tuple(nameof.(JKernel.REPL.repl_ast_transforms))"
    assert (await run(newer_julia, code)).text == "(:softscope, :warn_on_non_owning_accesses)"
    # What start-up saw as stderr: the IOContext that 1.6+ hands over, which it unwrapped.
    assert (await run(newer_julia, "JKernel.DIAG[] isa IOContext")).text == "true"


@pytest.mark.asyncio(loop_scope="module")
async def test_printing_and_logging_work(newer_julia: JuliaSupervisor) -> None:
    out = Output()
    code = 'println("to out"); println(stderr, "to err"); @info "an info"; @warn "a warning"; 7'
    r = await run(newer_julia, code, out)
    assert r.status == "ok" and r.text == "7", r
    assert out.text() == "to out\n"
    err = strip_ansi(out.text("stderr"))
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
    assert got == [
        (n, str(k * i)) for i in range(1, 51) for n, k in (("stdout", 1), ("stderr", -1))
    ]


@pytest.mark.asyncio(loop_scope="module")
async def test_help_pkg_and_shell_modes_work(newer_julia: JuliaSupervisor, tmp_path: Path) -> None:
    r = await run(newer_julia, "?sin")
    assert r.status == "ok" and "sin(x" in r.text, r  # 1.12: sin(x::T) where {T <: Number}
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
async def test_cells_get_the_repls_default_ast_transforms(newer_julia: JuliaSupervisor) -> None:
    """As at the 1.12+ prompt, a name reached through a module that does not own it (and does
    not make it public) is warned about once, and the cell still runs."""
    defined = "module OwnsF; f() = 1; end; module ReachesF; import ..OwnsF: f; end"
    assert (await run(newer_julia, defined)).status == "ok"
    out = Output()
    r = await run(newer_julia, "ReachesF.f() + OwnsF.f()", out)
    assert (r.status, r.text) == ("ok", "2"), r
    warning = "f is defined in Main.OwnsF and is not public in Main.ReachesF"
    assert warning in out.text("stderr"), out.chunks
    assert "not public in Main.OwnsF" not in out.text("stderr"), out.chunks  # its owner's: none
    out = Output()
    assert (await run(newer_julia, "ReachesF.f()", out)).text == "1"
    assert warning not in out.text("stderr"), out.chunks  # once, as the REPL's maxlog = 1


async def test_each_cell_opens_its_c_episode_from_a_task_of_its_own(tmp_path: Path) -> None:
    """Master's last ^C rung freezes the task that opened the episode for good; with master's
    names (contracts/sigint_episodes.jl) that task is the cell's own, never the evaluation loop
    the next cells need, and an interrupt still ends the cell where it runs."""
    env = {"JUTUL_JKERNEL_PRECOMPILED": "no"}  # the names are read when JKernel loads
    args = ["-L", str(CONTRACTS / "sigint_episodes.jl")]
    sup = JuliaSupervisor(julia_args=args, env=env, startup_timeout=STARTUP_TIMEOUT)
    started = StartSignal(tmp_path)
    try:
        await sup.start()
        assert (await run(sup, "JKernel.HAS_CANCEL_SCOPES")).text == "true"
        code = "t = current_task(); t !== JKernel.EVAL_TASK[], Base._sigint_foreground_task[] === t"
        assert (await run(sup, code)).text == "(true, true)"
        # the next cell opened its own episode, and the last one's task is over
        code = "istaskdone(t), Base._sigint_foreground_task[] === current_task() !== t"
        assert (await run(sup, code)).text == "(true, true)"
        cell = f"{started.julia_once_waiting}; try; sleep(60); finally; global stopped = true; end"
        task = asyncio.create_task(sup.execute(cell, None))
        await started.wait_async(CELL_BOUND)
        await sup.interrupt()
        r = await asyncio.wait_for(task, CELL_BOUND)
        assert r.status == "interrupted" and r.interrupt_path == "frame", r
        assert (await run(sup, "stopped")).text == "true"  # the cell's task itself was stopped
        assert (await run(sup, "1 + 1")).text == "2"
    finally:
        started.close()
        await sup.shutdown()


@pytest.mark.asyncio(loop_scope="module")
async def test_using_a_package_that_compiles(newer_julia: JuliaSupervisor, tmp_path: Path) -> None:
    """The cell users run first after an install: Base compiles the package in its loading
    world, where only Base's methods exist; the package's __init__ print shows in the cell."""
    name, cell = fresh_package(tmp_path)
    out = Output()
    r = await run(newer_julia, cell, out)
    assert r.status == "ok" and r.text == "42", (r, out.chunks)
    assert f"init of {name}\n" in out.text(), out.chunks
    assert list((tmp_path / "depot" / "compiled").glob(f"*/{name}/*.ji")), "not compiled there"


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
            'old = stdout; rd, wr = redirect_stdout(); println("hidden"); '
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
