"""The Julia side as a compiled package: which way it loads, and that the user never sees it.

``server.jl`` loads the JKernel package from its compile cache when Julia's own staleness check
passes, and otherwise includes the source, says why in one line of Julia's log, and compiles
for the next start when it can write the cache. Each test works on its own copy of ``julia/``
and its own cache depot (JUTUL_JKERNEL_DEPOT), so the checkout's cache and sources are never
touched. Every wait is bounded, and a compile started in the background is waited for before
its kernel ends.
"""

from __future__ import annotations

import asyncio
import os
import shutil
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from jutul_jkernel import _resources
from jutul_jkernel.supervisor import JuliaSupervisor

from .conftest import STARTUP_TIMEOUT

pytestmark = pytest.mark.integration

CELL_BOUND = 30.0
# `server.jl --precompile` takes ~4 s here with Julia 1.5; a loaded machine, several times that.
COMPILE_BOUND = 300.0
SOURCE_LINE = "loading JKernel from source: "


def precompile(server: Path, depot: Path) -> None:
    """Compile the package beside ``server`` into ``depot``, as the installer does."""
    done = subprocess.run(
        ["julia", "--startup-file=no", str(server), "--precompile"],
        env={**os.environ, "JUTUL_JKERNEL_DEPOT": str(depot)},
        capture_output=True,
        text=True,
        timeout=COMPILE_BOUND,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr


@pytest.fixture
def copy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A private copy of julia/ that the supervisor starts instead of the checkout's."""
    julia_dir = tmp_path / "julia"
    shutil.copytree(_resources.server_script().parent, julia_dir)
    server = julia_dir / "server.jl"
    monkeypatch.setattr(_resources, "server_script", lambda: server)
    return server


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Path, Path]]:
    """A copy of julia/ with a fresh cache in its own depot, shared by the read-only tests."""
    root = tmp_path_factory.mktemp("compiled")
    shutil.copytree(_resources.server_script().parent, root / "julia")
    server, depot = root / "julia" / "server.jl", root / "depot"
    precompile(server, depot)
    yield server, depot


async def start(depot: Path | str, **env: str) -> JuliaSupervisor:
    sup = JuliaSupervisor(
        startup_timeout=STARTUP_TIMEOUT, env={"JUTUL_JKERNEL_DEPOT": str(depot), **env}
    )
    await sup.start()
    return sup


@pytest.fixture
async def cached(
    compiled: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> AsyncIterator[JuliaSupervisor]:
    """A kernel started from the fresh cache of ``compiled``."""
    server, depot = compiled
    monkeypatch.setattr(_resources, "server_script", lambda: server)
    sup = await start(depot)
    try:
        yield sup
    finally:
        await sup.shutdown()


async def value(sup: JuliaSupervisor, code: str) -> str:
    result = await asyncio.wait_for(sup.execute(code, None), CELL_BOUND)
    assert result.status == "ok", result.text
    return result.text


async def printed(sup: JuliaSupervisor, code: str) -> str:
    """What the cell ``code`` writes to stdout."""
    chunks: list[bytes] = []
    result = await asyncio.wait_for(
        sup.execute(code, lambda stream, data: chunks.append(data) if stream == "stdout" else None),
        CELL_BOUND,
    )
    assert result.status == "ok", result.text
    return b"".join(chunks).decode()


def log_of(sup: JuliaSupervisor) -> str:
    assert sup.log_path is not None
    return sup.log_path.read_text(errors="replace")


def loaded_from(sup: JuliaSupervisor) -> str | None:
    return sup._julia.info.get("loaded_from") if sup._julia else None


async def test_a_fresh_cache_is_loaded(cached: JuliaSupervisor) -> None:
    """With a cache that Julia's staleness check accepts, the package loads from it: the
    handshake says so, the log has no fallback line, and cells run."""
    assert loaded_from(cached) == "cache"
    assert SOURCE_LINE not in log_of(cached)
    assert await value(cached, "1 + 1") == "2"
    assert await value(cached, "JKernel.LOADED_FROM[]") == '"cache"'


async def test_a_fresh_cache_is_loaded_by_masters_isprecompiled(
    compiled: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Master's Base.isprecompiled(pkg; ignore_loaded) has no `sourcepath` keyword
    (tests/contracts/isprecompiled_master.jl emulates it): the fresh cache is still found
    through LOAD_PATH and loaded, not rejected by a MethodError on every start (audit N8)."""
    server, depot = compiled
    monkeypatch.setattr(_resources, "server_script", lambda: server)
    contract = Path(__file__).parent / "contracts" / "isprecompiled_master.jl"
    sup = JuliaSupervisor(
        julia_args=["-L", str(contract)],
        startup_timeout=STARTUP_TIMEOUT,
        env={"JUTUL_JKERNEL_DEPOT": str(depot)},
    )
    await sup.start()
    try:
        assert await value(sup, "isdefined(Base, :CONTRACT_ISPRECOMPILED)") == "true"
        assert loaded_from(sup) == "cache", log_of(sup)
        assert SOURCE_LINE not in log_of(sup)
    finally:
        await sup.shutdown()


async def test_the_package_is_invisible_to_the_user(cached: JuliaSupervisor) -> None:
    """After loading, LOAD_PATH and DEPOT_PATH are what plain julia has: `using JKernel` finds
    no package, `Pkg.status()` does not list it, and the cache depot is in no user path."""
    shown = "print(repr(LOAD_PATH), ' ', repr(DEPOT_PATH))"
    plain = subprocess.run(
        ["julia", "--startup-file=no", "-e", shown],
        capture_output=True,
        text=True,
        timeout=CELL_BOUND,
        check=True,
    ).stdout
    assert await printed(cached, shown) == plain
    assert await value(cached, 'Base.identify_package("JKernel") === nothing') == "true"
    error = await asyncio.wait_for(cached.execute("using JKernel", None), CELL_BOUND)
    assert error.status == "error" and "not found" in error.text, error.text
    status = await printed(cached, "import Pkg; Pkg.status()")
    assert "Status" in status and "JKernel" not in status, status


# Base functions whose names notebooks also use as variables. Code that runs in Main and calls
# one of them binds Main's name to Base's, and the user's `last = 0` then fails ("cannot assign
# a value to variable Base.last from module Main"): the launcher once did, the course notebook
# caught it.
USER_NAMES = (
    "last first count sum max min length size filter split run get keys values step range "
    "time names string strip println mkpath"
).split()


@pytest.mark.parametrize("loaded", ["cache", "source"])
async def test_the_launcher_leaves_mains_names_to_the_user(
    compiled: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, loaded: str
) -> None:
    """Whichever way JKernel loads, a fresh session lets a cell assign the names of Base
    functions as variables, as plain julia does."""
    server, depot = compiled
    monkeypatch.setattr(_resources, "server_script", lambda: server)
    sup = await start(depot, **({"JUTUL_JKERNEL_PRECOMPILED": "no"} if loaded == "source" else {}))
    try:
        assert loaded_from(sup) == loaded
        code = "; ".join(f"{name} = {i}" for i, name in enumerate(USER_NAMES)) + "; last"
        assert await value(sup, code) == str(USER_NAMES.index("last"))
    finally:
        await sup.shutdown()


async def test_a_changed_source_loads_from_source_and_recompiles(
    copy: Path, tmp_path: Path
) -> None:
    """A source file newer than the cache: the source is loaded (the log names the changed
    file), cells work, and the compile started in the background makes the next start load
    from the cache."""
    depot = tmp_path / "depot"
    precompile(copy, depot)
    changed = copy.parent / "JKernel" / "src" / "queries.jl"
    changed.write_text(changed.read_text() + "\n# changed by test_precompile\n")
    sup = await start(depot)
    try:
        assert loaded_from(sup) == "source"
        assert await value(sup, "1 + 1") == "2"
        log = log_of(sup)
        line = next(line for line in log.splitlines() if SOURCE_LINE in line)
        assert "queries.jl" in line and "compiling it for the next start" in line, line
        deadline = time.monotonic() + COMPILE_BOUND
        while "JKernel compiled into" not in log_of(sup):
            assert time.monotonic() < deadline, f"no background compile finished:\n{log_of(sup)}"
            await asyncio.sleep(0.2)
    finally:
        await sup.shutdown()
    again = await start(depot)
    try:
        assert loaded_from(again) == "cache"
        assert await value(again, "1 + 1") == "2"
    finally:
        await again.shutdown()


async def test_an_unwritable_cache_directory_loads_from_source(
    copy: Path, tmp_path: Path
) -> None:
    """No cache and a depot that cannot be created (its parent is a file, which stops root
    too): the source is loaded, the log line says the directory is not writable, nothing is
    compiled, and cells work."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    sup = await start(blocker / "depot")
    try:
        assert loaded_from(sup) == "source"
        result = await asyncio.wait_for(sup.execute('error("boom")', None), CELL_BOUND)
        assert result.status == "error" and "boom" in result.text
        assert await value(sup, "1 + 1") == "2"
        lines = [line for line in log_of(sup).splitlines() if SOURCE_LINE in line]
        assert len(lines) == 1, lines
        assert "no compiled cache for Julia" in lines[0] and "is not writable" in lines[0]
        assert "compiling" not in log_of(sup)
    finally:
        await sup.shutdown()
