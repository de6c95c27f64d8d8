"""The Julia side as a compiled package: which way it loads, and that the user never sees it.

``server.jl`` loads the JKernel package from its compile cache when Julia's own staleness check
passes, and otherwise includes the source, says why in one line of Julia's log, and compiles
for the next start when it can write the cache. The depot stays tidy (julia/depot.jl): one
compile at a time, no leftovers of a killed one, no depots of installs that are gone. Each
test works on its own copy of ``julia/`` and its own cache depot (JUTUL_JKERNEL_DEPOT, or
XDG_CACHE_HOME for the default depot), so the checkout's cache and sources are never touched.
Every wait is bounded, and a compile started in the background is waited for or killed before
its kernel ends.
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import pytest

from jutul_jkernel import _resources
from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor

from .conftest import STARTUP_TIMEOUT, private_depot
from .supervisors import wait_until_warm

CELL_BOUND = 30.0
# `server.jl --precompile` takes ~4 s here with Julia 1.5; a loaded machine, several times that.
COMPILE_BOUND = 300.0

# The suite's 120 s per test (pyproject.toml) is shorter than the compile these tests wait
# for, bounded above: at load 9-10 on 2 cores the compile fixture took over 120 s (CI).
pytestmark = [pytest.mark.integration, pytest.mark.timeout(COMPILE_BOUND + 120)]
SOURCE_LINE = "loading JKernel from source: "


def precompile(
    server: Path, depot: Path | None, *flags: str, preload: Path | None = None, **env: str
) -> str:
    """Compile the package beside ``server`` into ``depot`` (None: the default depot, as
    ``env`` places it), as the installer does, with ``flags`` after ``--precompile`` and
    ``preload`` (a contract) run first; return what it printed. It must succeed."""
    base = {k: v for k, v in os.environ.items() if k != "JUTUL_JKERNEL_DEPOT"}
    if depot is not None:
        base["JUTUL_JKERNEL_DEPOT"] = str(depot)
    first = ["-L", str(preload)] if preload is not None else []
    done = subprocess.run(
        ["julia", "--startup-file=no", *first, str(server), "--precompile", *flags],
        env={**base, **env},
        capture_output=True,
        text=True,
        timeout=COMPILE_BOUND,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout


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


def plain_julia(code: str) -> str:
    """What plain `julia -e code` (the Julia on PATH, no kernel) prints."""
    return subprocess.run(
        ["julia", "--startup-file=no", "-e", code],
        capture_output=True,
        text=True,
        timeout=CELL_BOUND,
        check=True,
    ).stdout


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
    through LOAD_PATH and loaded, not rejected by a MethodError on every start, and
    `server.jl --precompile` (the installer's, make setup's) finds it up to date."""
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
    assert "is up to date" in precompile(server, depot, preload=contract)


async def test_the_package_is_invisible_to_the_user(cached: JuliaSupervisor) -> None:
    """After loading, LOAD_PATH and DEPOT_PATH are what plain julia has: `using JKernel` finds
    no package, `Pkg.status()` does not list it, and the cache depot is in no user path."""
    shown = "print(repr(LOAD_PATH), ' ', repr(DEPOT_PATH))"
    assert await printed(cached, shown) == plain_julia(shown)
    assert await value(cached, 'Base.identify_package("JKernel") === nothing') == "true"
    error = await asyncio.wait_for(cached.execute("using JKernel", None), CELL_BOUND)
    assert error.status == "error" and "not found" in error.text, error.text
    status = await printed(cached, "import Pkg; Pkg.status()")
    assert "Status" in status and "JKernel" not in status, status


# Base functions whose names notebooks also use as variables. Code that runs in Main and calls
# one of them binds Main's name to Base's, and the user's `last = 0` then fails ("cannot assign
# a value to variable Base.last from module Main"): the launcher once did, the course notebook
# caught it.
USER_NAMES = [
    "last",
    "first",
    "count",
    "sum",
    "max",
    "min",
    "length",
    "size",
    "filter",
    "split",
    "run",
    "get",
    "keys",
    "values",
    "step",
    "range",
    "time",
    "names",
    "string",
    "strip",
    "println",
    "mkpath",
]


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


def uses_pkgimages() -> bool:
    """Whether the Julia on PATH writes native code into package caches (1.9+, on unless
    --pkgimages=no): asked of its options, not its version."""
    code = "print(hasfield(Base.JLOptions, :use_pkgimages) && Base.JLOptions().use_pkgimages == 1)"
    return plain_julia(code) == "true"


async def test_the_first_inspect_compiles_nothing_of_the_help_system(
    compiled: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Where the cache holds native code, it also holds what the workload reached through
    runtime dispatch: the REPL's help and Markdown's rendering under an inspect (precompile.jl,
    keeping_dispatched). Julia traces every method it compiles (--trace-compile): a fresh
    kernel's session, its warm-up and a Shift+Tab on `sum` included, compiles none of
    Markdown's, where the first inspect once compiled two dozen (0.65 s on 1.10.0, 1 s on
    1.12.5)."""
    if not uses_pkgimages():
        pytest.skip("this Julia's package cache holds no native code (1.5-1.8, or --pkgimages=no)")
    server, depot = compiled
    monkeypatch.setattr(_resources, "server_script", lambda: server)
    trace = tmp_path / "compiled.jl"
    sup = JuliaSupervisor(
        julia_args=[f"--trace-compile={trace}"],
        startup_timeout=STARTUP_TIMEOUT,
        env={"JUTUL_JKERNEL_DEPOT": str(depot)},
    )
    await sup.start()
    try:
        assert loaded_from(sup) == "cache", log_of(sup)
        reply = await asyncio.wait_for(sup.inspect("sum", 3), CELL_BOUND)
        assert reply["found"] is True, reply
        assert "sum(itr" in reply["data"]["text/plain"], reply
    finally:
        await sup.shutdown()
    compiled_lines = trace.read_text().splitlines()
    rendering = [line for line in compiled_lines if "Markdown." in line]
    assert not rendering, "\n".join(rendering)


async def test_the_exit_at_a_shutdown_compiles_nothing_of_the_kernels(
    compiled: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A shutdown or restart closes the socket and the listener exits: where the cache holds
    native code, that exit compiles none of JKernel's methods (--trace-compile shows it). It
    compiled release_workers there, which held the exit, and so every restart, by 0.1-0.6 s
    on a loaded machine (precompile.jl)."""
    if not uses_pkgimages():
        pytest.skip("this Julia's package cache holds no native code (1.5-1.8, or --pkgimages=no)")
    server, depot = compiled
    monkeypatch.setattr(_resources, "server_script", lambda: server)
    trace = tmp_path / "compiled.jl"
    sup = JuliaSupervisor(
        julia_args=[f"--trace-compile={trace}"],
        startup_timeout=STARTUP_TIMEOUT,
        env={"JUTUL_JKERNEL_DEPOT": str(depot)},
    )
    await sup.start()
    try:
        assert loaded_from(sup) == "cache", log_of(sup)
        await wait_until_warm(sup)  # what the warm-up compiles is not the exit's
        before = len(trace.read_text().splitlines())
    finally:
        await sup.shutdown()
    at_exit = trace.read_text().splitlines()[before:]
    ours = [line for line in at_exit if "JKernel." in line]
    assert not ours, "\n".join(ours)


def with_another_copys_cache(compiled: tuple[Path, Path]) -> dict[str, str]:
    """The environment of a user whose own depot holds a JKernel cache of another copy of
    julia/ (as `using JKernel` from some checkout leaves in ~/.julia): the ``compiled``
    fixture's depot first in JULIA_DEPOT_PATH. The kernel's cache decisions are its own
    depot's: that cache is neither loaded nor named as the reason (its "Rejecting cache file
    ... not file ..." was the log line on CI, 2026-11-29)."""
    return {"JULIA_DEPOT_PATH": private_depot(compiled[1])}


async def test_a_changed_source_loads_from_source_and_recompiles(
    copy: Path, tmp_path: Path, compiled: tuple[Path, Path]
) -> None:
    """A source file newer than the cache: the source is loaded (the log names the changed
    file, not the other copy's cache in the user's depot), cells work, and the compile
    started in the background makes the next start load from the cache."""
    depot = tmp_path / "depot"
    precompile(copy, depot)
    changed = copy.parent / "JKernel" / "src" / "queries.jl"
    changed.write_text(changed.read_text() + "\n# changed by test_precompile\n")
    sup = await start(depot, **with_another_copys_cache(compiled))
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
    copy: Path, tmp_path: Path, compiled: tuple[Path, Path]
) -> None:
    """No cache and a depot that cannot be created (its parent is a file, which stops root
    too): the source is loaded, the log line says there is no cache there (whatever the
    user's depot holds) and that the directory is not writable, nothing is compiled, and
    cells work."""
    blocker = tmp_path / "not-a-directory"
    blocker.write_text("")
    sup = await start(blocker / "depot", **with_another_copys_cache(compiled))
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


# ---- the depot's upkeep (julia/depot.jl) ----

DAY = 86400.0
COMPILED_LINE = "JKernel compiled into"
COMPILING_LINE = "compiling JKernel into"


def jkernel_caches(depot: Path) -> list[Path]:
    """The directories Base.compilecache writes JKernel's cache into: compiled/vX.Y/JKernel."""
    return sorted((depot / "compiled").glob("v*/JKernel"))


def hold_lock(depot: Path) -> Path:
    """A live compile lock, as a compile of this host holds it (Pidfile's "<pid> <host>"):
    this test process is the holder."""
    lock = depot / "compile.lock"
    lock.parent.mkdir(parents=True, exist_ok=True)
    lock.write_text(f"{os.getpid()} {socket.gethostname()}")
    return lock


def change_source(server: Path) -> None:
    changed = server.parent / "JKernel" / "src" / "queries.jl"
    changed.write_text(changed.read_text() + "\n# changed by test_precompile\n")


async def until_logged(sups: list[JuliaSupervisor], text: str) -> None:
    """Wait (bounded) until one of the kernels' logs holds ``text``."""
    deadline = time.monotonic() + COMPILE_BOUND
    while not any(text in log_of(sup) for sup in sups):
        logs = "\n".join(log_of(sup) for sup in sups)
        assert time.monotonic() < deadline, f"never logged {text!r}:\n{logs}"
        await asyncio.sleep(0.2)


async def test_a_killed_compile_leaves_no_temporary_file_and_no_lock_in_the_way(
    copy: Path, tmp_path: Path
) -> None:
    """A kernel killed while its compile for the next start runs kills that compile. Julia
    1.10+ then leaves the package image's temporary file (compilecache's `tmppath_so`, a
    mktemp `jl_XXXXXX` that exists for the whole compile; 1.5.3 makes its only one at the end,
    so one is planted to stand for it) and the compile lock, whose pid is gone. The next start
    takes the lock over at once, removes the file, compiles, and the start after loads the
    cache."""
    depot = tmp_path / "depot"
    precompile(copy, depot)
    change_source(copy)
    lock = depot / "compile.lock"
    sup = await start(depot)
    try:
        assert "compiling it for the next start" in log_of(sup)
        deadline = time.monotonic() + COMPILE_BOUND
        while not lock.exists():
            assert COMPILED_LINE not in log_of(sup), "the compile ended before it was killed"
            assert time.monotonic() < deadline, f"the compile never took the lock:\n{log_of(sup)}"
            await asyncio.sleep(0.05)
        [cache] = jkernel_caches(depot)
        (cache / "jl_Kd9fQz").write_bytes(b"")
        # SIGKILL the kernel's process group, the compile in it, at once: a shutdown's
        # SIGTERM may let the compile end its own way first, on a loaded machine.
        sup.kill_now()
    finally:
        await sup.shutdown()
    assert lock.exists(), "the killed compile's lock is the point of this test"
    again = await start(depot)
    try:
        assert loaded_from(again) == "source"
        assert "compiling it for the next start" in log_of(again), log_of(again)
        await until_logged([again], COMPILED_LINE)
        # the planted one, and on 1.10+ the killed compile's own (1.5.3 had made none yet)
        removed = re.search(
            r"removed (\d+) temporary file\(s\) of an interrupted compile", log_of(again)
        )
        assert removed is not None and int(removed.group(1)) >= 1, log_of(again)
        assert not [f.name for f in cache.iterdir() if f.name.startswith("jl_")]
        assert not lock.exists()
    finally:
        await again.shutdown()
    third = await start(depot)
    try:
        assert loaded_from(third) == "cache", log_of(third)
    finally:
        await third.shutdown()


async def test_a_kernel_leaves_the_compile_to_the_one_under_way(copy: Path, tmp_path: Path) -> None:
    """With the depot's compile lock held by a live process, a kernel on a stale cache loads
    the source, names the holder, and starts no compile of its own."""
    depot = tmp_path / "depot"
    precompile(copy, depot)
    change_source(copy)
    lock = hold_lock(depot)
    sup = await start(depot)
    try:
        assert loaded_from(sup) == "source"
        assert await value(sup, "1 + 1") == "2"
        line = next(line for line in log_of(sup).splitlines() if SOURCE_LINE in line)
        assert "a compile for the next start is already under way" in line, line
        assert f"({os.getpid()} {socket.gethostname()})" in line, line
        assert "compiling" not in log_of(sup)
    finally:
        await sup.shutdown()
    assert lock.read_text() == f"{os.getpid()} {socket.gethostname()}", "the lock is not ours"


def test_a_compile_for_the_next_start_gives_way_to_one_under_way(
    copy: Path, tmp_path: Path
) -> None:
    """Two kernels that start together may both start a compile for the next start
    (`--precompile --no-wait`); the one that finds the lock held compiles nothing."""
    depot = tmp_path / "depot"
    hold_lock(depot)
    printed = precompile(copy, depot, "--no-wait")
    assert "is already under way" in printed, printed
    assert COMPILING_LINE not in printed
    assert not jkernel_caches(depot)


# Only Linux tells a zombie from a live process without a child's own wait (/proc/<pid>/stat);
# elsewhere a dead holder's zombie holds the lock until it turns stale (depot.jl, LOCK_STALE).
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="zombies are told on Linux only")
def test_a_lock_whose_holder_died_is_taken_over_at_once(copy: Path, tmp_path: Path) -> None:
    """A lock whose holder is dead but not yet reaped (a zombie: a compile killed with its
    kernel is orphaned, and init reaps it when it gets round to it) blocks nothing: a compile
    takes the lock over and runs, and removes the lock when done."""
    depot = tmp_path / "depot"
    holder = subprocess.Popen(["true"])  # reaped only at the end: a zombie meanwhile
    try:
        deadline = time.monotonic() + CELL_BOUND
        # WNOWAIT: see that it exited, and leave it unreaped
        while os.waitid(os.P_PID, holder.pid, os.WEXITED | os.WNOWAIT | os.WNOHANG) is None:
            assert time.monotonic() < deadline, "the holder never ended"
            time.sleep(0.05)
        lock = depot / "compile.lock"
        depot.mkdir()
        lock.write_text(f"{holder.pid} {socket.gethostname()}")
        printed = precompile(copy, depot, "--no-wait")
        assert COMPILED_LINE in printed, printed
        assert not lock.exists()
    finally:
        holder.wait(timeout=CELL_BOUND)


async def test_kernels_that_start_together_compile_once(copy: Path, tmp_path: Path) -> None:
    """Two kernels started at once on a stale cache: both serve from source, and one compile
    runs for the next start, not two."""
    depot = tmp_path / "depot"
    precompile(copy, depot)
    change_source(copy)
    sups = [
        JuliaSupervisor(startup_timeout=STARTUP_TIMEOUT, env={"JUTUL_JKERNEL_DEPOT": str(depot)})
        for _ in range(2)
    ]
    try:
        await asyncio.gather(*(sup.start() for sup in sups))
        assert [loaded_from(sup) for sup in sups] == ["source", "source"]
        await until_logged(sups, COMPILED_LINE)
        logs = "\n".join(log_of(sup) for sup in sups)
        assert logs.count(COMPILING_LINE) == 1, logs
    finally:
        await asyncio.gather(*(sup.shutdown() for sup in sups))


async def test_precompile_waits_for_the_compile_under_way(copy: Path, tmp_path: Path) -> None:
    """`server.jl --precompile` (the installer's) waits while a live process holds the lock,
    then does its work: it never compiles beside another compile, nor gives up."""
    depot = tmp_path / "depot"
    lock = hold_lock(depot)
    proc = await asyncio.create_subprocess_exec(
        "julia",
        "--startup-file=no",
        str(copy),
        "--precompile",
        env={**os.environ, "JUTUL_JKERNEL_DEPOT": str(depot)},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    assert proc.stdout is not None
    try:
        first = await asyncio.wait_for(proc.stdout.readline(), COMPILE_BOUND)
        assert first.decode().startswith("waiting for the compile under way"), first
        assert str(os.getpid()) in first.decode()
        lock.unlink()
        rest = await asyncio.wait_for(proc.stdout.read(), COMPILE_BOUND)
        assert await asyncio.wait_for(proc.wait(), COMPILE_BOUND) == 0, rest
        assert COMPILED_LINE in rest.decode(), rest
    finally:
        if proc.returncode is None:
            proc.kill()
            await proc.wait()
    assert not lock.exists()


def make_depot(root: Path, name: str, package: Path | None, age_days: float) -> Path:
    """A depot as an earlier install left it: a cache file, the record of its package
    directory (none for a depot made before records), last used ``age_days`` ago."""
    depot = root / name
    cache = depot / "compiled" / "v1.5" / "JKernel"
    cache.mkdir(parents=True)
    (cache / "LQPp1_mKw5T.ji").write_bytes(b"cache")
    when = time.time() - age_days * DAY
    if package is not None:
        record = depot / "package-dir"
        record.write_text(str(package))
        os.utime(record, (when, when))
    os.utime(depot, (when, when))
    return depot


def test_a_compile_removes_the_depots_of_installs_that_are_gone(copy: Path, tmp_path: Path) -> None:
    """A compile into a default depot (~/.cache/jutul-jkernel/julia-<crc>) removes the sibling
    depots whose package directory is gone (unused for an hour) or that no kernel used for 30
    days; it keeps those used lately, those whose compile lock is held, anything reached
    through a symlink, and anything not named like a depot. With $JUTUL_JKERNEL_DEPOT the
    directory around it is not ours: nothing there is touched."""
    cache_home = tmp_path / "cache"
    root = cache_home / "jutul-jkernel"
    alive, gone = tmp_path / "alive" / "JKernel", tmp_path / "gone" / "JKernel"
    alive.mkdir(parents=True)
    removed = {
        "julia-a1": make_depot(root, "julia-a1", gone, 2 / 24),
        "julia-a3": make_depot(root, "julia-a3", alive, 31),
        "julia-a7": make_depot(root, "julia-a7", None, 31),
    }
    kept = {
        "julia-a2": make_depot(root, "julia-a2", gone, 0),
        "julia-a4": make_depot(root, "julia-a4", alive, 29),
        "julia-a5": make_depot(root, "julia-a5", gone, 2 / 24),
        "other": make_depot(root, "other", gone, 40),
    }
    hold_lock(kept["julia-a5"])
    os.utime(kept["julia-a5"] / "package-dir", (time.time() - DAY, time.time() - DAY))
    outside = make_depot(tmp_path / "elsewhere", "julia-a6", gone, 40)
    (root / "julia-a6").symlink_to(outside, target_is_directory=True)
    xdg = str(cache_home)

    custom = precompile(copy, root / "julia-c0", XDG_CACHE_HOME=xdg)
    assert "removed" not in custom, custom
    assert all(d.is_dir() for d in [*removed.values(), *kept.values()])

    out = precompile(copy, None, XDG_CACHE_HOME=xdg)
    own = [d for d in root.iterdir() if d.name not in {*kept, "julia-a6", "julia-c0"}]
    assert len(own) == 1 and own[0].name.startswith("julia-"), own
    assert (own[0] / "package-dir").read_text() == str(copy.parent / "JKernel")
    for name, depot in removed.items():
        assert not depot.exists(), f"{name} was kept:\n{out}"
        assert f"removed the compile cache {depot}" in out
    for name, depot in kept.items():
        assert (depot / "compiled").is_dir(), f"{name} was removed:\n{out}"
    assert (root / "julia-a6").is_symlink() and (outside / "compiled").is_dir(), out
    assert (root / "julia-c0" / "compiled").is_dir()


async def test_a_kernel_start_records_its_depot_as_used(
    compiled: tuple[Path, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A kernel that starts from the cache rewrites the depot's record: its package
    directory, and by its mtime the last use that keeps the depot from being removed."""
    server, depot = compiled
    monkeypatch.setattr(_resources, "server_script", lambda: server)
    record = depot / "package-dir"
    old = time.time() - 40 * DAY
    record.write_text("stale")
    os.utime(record, (old, old))
    sup = await start(depot)
    try:
        assert loaded_from(sup) == "cache"
        assert record.read_text() == str(server.parent / "JKernel")
        assert record.stat().st_mtime > old + 39 * DAY
    finally:
        await sup.shutdown()
