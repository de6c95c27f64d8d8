"""Shared fixtures: a real Julia for integration tests, and a guard that none is left behind."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import os
import re
import secrets
import select
import shutil
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator
from pathlib import Path

import psutil
import pytest
import zmq
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor

# Every fixture-made supervisor gets this much time to start; a cold Julia needs ~1 s here.
STARTUP_TIMEOUT = 60.0

# SGR colour codes, which Julia writes under --color=yes (the kernelspec's default).
ANSI = re.compile(r"\x1b\[[0-9;]*m")


def strip_ansi(text: str) -> str:
    return ANSI.sub("", text)


# How long a test waits for processes it ended to be reaped before calling them leaked.
REAP_GRACE = 5.0


# Debian's julia 1.5.3 runs through the launcher make setup writes, with its own libunwind
# (scripts/ensure-julia.sh); the Makefile puts it first on PATH, and so does a pytest run by
# hand. A julia the caller put first on PATH (a newer one) is left alone, as in the Makefile.
_LAUNCHER_DIR = Path(__file__).resolve().parent.parent / ".venv" / "julia-bin"
if (_LAUNCHER_DIR / "julia").exists() and shutil.which("julia") in (None, "/usr/bin/julia"):
    os.environ["PATH"] = f"{_LAUNCHER_DIR}{os.pathsep}{os.environ['PATH']}"

# Every process this test session starts inherits this mark (supervisors, kernels and raw
# servers pass os.environ on), so the leftover guard finds our Julias even after they were
# reparented to init, and never another session's.
SESSION_MARK = secrets.token_hex(8)
os.environ["JKERNEL_TEST_SESSION"] = SESSION_MARK


# Each phase's report of the test being run, for a fixture that explains a failure in its
# teardown (test_jupyterlab.py's `lab`): ``failed(request.node)``.
PHASE_REPORTS = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(wrapper=True, tryfirst=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Iterator[pytest.TestReport]:
    report = yield
    item.stash.setdefault(PHASE_REPORTS, {})[report.when] = report
    return report


def failed(item: pytest.Item) -> bool:
    """Whether the test's set-up or body failed (for a fixture's teardown)."""
    return any(r.failed for r in item.stash.get(PHASE_REPORTS, {}).values())


def _is_julia(p: psutil.Process) -> bool:
    return "julia" in p.name() or any("server.jl" in a for a in p.cmdline())


def session_julias() -> list[psutil.Process]:
    """Julia processes started (directly or not) by this test session, orphans included."""
    found = []
    for p in psutil.process_iter():
        try:
            if _is_julia(p) and p.environ().get("JKERNEL_TEST_SESSION") == SESSION_MARK:
                found.append(p)
        except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
            continue
    return found


def julia_descendants() -> list[psutil.Process]:
    """Julia processes started, directly or not, by this test process (not a Julia's own
    short-lived fork, see _is_fork_of_julia)."""
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            is_julia = "julia" in p.name() or any("server.jl" in a for a in p.cmdline())
            if is_julia and not _is_fork_of_julia(p):
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


def _is_fork_of_julia(p: psutil.Process) -> bool:
    """A child that a Julia forked and never exec'd: the launcher's libstdc++ probe.

    Julia's launcher (cli/loader_lib.c, libstdcxxprobe, when built with its own libstdc++:
    1.10 and 1.12 here) forks at once, the child dlopens libstdc++ and exits, and the parent
    reaps it with waitpid. For those milliseconds a new Julia has a second "julia" below it,
    with its parent's command line, or none once it is a zombie. A Julia that Julia spawns
    (a worker, a compile) has its own command line.
    """
    parent = p.parent()
    if parent is None or parent.name() != p.name():
        return False
    try:
        own = p.cmdline()
    except psutil.ZombieProcess:
        return True
    return not own or own == parent.cmdline()


# Supervisors, and kernel processes, shared by a whole test module: their Julia is expected to
# outlive one test. Module fixtures register them here and remove them when they end them.
SHARED: list[JuliaSupervisor] = []
SHARED_KERNEL_PIDS: set[int] = set()


def _leftovers(*, ignore_shared: bool) -> list[psutil.Process]:
    owners = {s.pid for s in SHARED} | SHARED_KERNEL_PIDS if ignore_shared else set()
    left = []
    for p in session_julias() + julia_descendants():
        try:
            if p in left or {p.pid, *(a.pid for a in p.parents())} & owners:
                continue
        except psutil.NoSuchProcess:
            continue
        left.append(p)
    return left


def _describe(p: psutil.Process) -> str:
    """Its pid, parent and command line, whose end says what it is (a Julia's first words are
    the same for a kernel, a compile and a worker)."""
    try:
        cmd = p.cmdline()
        shown = cmd if len(cmd) <= 8 else [*cmd[:2], "...", *cmd[-5:]]
        return f"{p.pid} (parent {p.ppid()}: {' '.join(shown)})"
    except psutil.Error:
        return str(p.pid)


def _check_left_behind(*, ignore_shared: bool) -> None:
    deadline = time.monotonic() + REAP_GRACE
    left = _leftovers(ignore_shared=ignore_shared)
    while left and time.monotonic() < deadline:
        time.sleep(0.05)  # polling for exits: there is no event for another's process ending
        left = _leftovers(ignore_shared=ignore_shared)
    desc = [_describe(p) for p in left]
    for p in left:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()  # psutil checks that the pid still names the same process
    assert not left, f"Julia processes left behind: {desc}"


@pytest.fixture(autouse=True)
def no_julia_left_behind() -> Iterator[None]:
    """Fail the test if a Julia it started is still alive (or a zombie) afterwards, whether
    it is still our descendant or was reparented to init."""
    yield
    _check_left_behind(ignore_shared=True)


@pytest.fixture(scope="module", autouse=True)
def no_julia_left_by_the_module() -> Iterator[None]:
    """Fail the module if its shared kernels or supervisors left a Julia behind (this runs
    after the module's own fixtures have ended them)."""
    yield
    _check_left_behind(ignore_shared=False)


# ---- Pkg's registry on a machine with no network ----

# Pkg 1.7 and newer install the General registry on first use when no registry is reachable
# (JuliaLang/Pkg.jl release-1.10 src/API.jl: `status`, like every command but `precompile`,
# calls Registry.download_default_registries; JULIA_PKG_OFFLINE does not stop it). These
# machines have no network, and a notebook's `] st` is not a test of it. Where the Julia under
# test would download one, an empty registry goes into a depot that JULIA_DEPOT_PATH appends
# to the default ones (a leading empty entry stands for them: base/initdefs.jl
# `init_depot_path` on release-1.10 and newer), as a machine that has General would be. Pkg 1.5
# has no `reachable_registries` and never downloads: nothing changes there.
NEEDS_A_REGISTRY = (
    "import Pkg; r = isdefined(Pkg, :Registry) ? Pkg.Registry : nothing; "
    "print(r !== nothing && isdefined(r, :reachable_registries) && "
    "isempty(r.reachable_registries()))"
)
EMPTY_REGISTRY = (
    'name = "JKernelTestEmpty"\nuuid = "5d1f2a7c-8e3b-4c96-a0d4-3b7e9f1c6a28"\n\n[packages]\n'
)


@pytest.fixture(scope="session", autouse=True)
def a_registry_without_network(tmp_path_factory: pytest.TempPathFactory) -> Iterator[None]:
    julia = shutil.which(os.environ.get("JUTUL_JKERNEL_JULIA", "julia"))
    if julia is None or "JULIA_DEPOT_PATH" in os.environ:  # a user's depots are theirs
        yield
        return
    probe = [julia, "--startup-file=no", "-e", NEEDS_A_REGISTRY]
    needed = subprocess.run(probe, capture_output=True, text=True, timeout=120, check=False)
    if needed.stdout.strip() != "true":
        yield
        return
    depot = tmp_path_factory.mktemp("registry-depot")
    (depot / "registries" / "JKernelTestEmpty").mkdir(parents=True)
    (depot / "registries" / "JKernelTestEmpty" / "Registry.toml").write_text(EMPTY_REGISTRY)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JULIA_DEPOT_PATH", os.pathsep + str(depot))
        yield


def private_depot(path: Path) -> str:
    """A JULIA_DEPOT_PATH with ``path`` first, where compiled caches and Pkg's files go, and
    Julia's own depots behind it: the session's JULIA_DEPOT_PATH if it set one (with the empty
    registry's depot), else the empty entry that stands for Julia's default depots
    (base/initdefs.jl `init_depot_path`, 1.5.3 to master). ``path`` alone would drop the bundled
    depot, where 1.10+ keeps its stdlibs' caches: Pkg and REPL then compile anew (minutes on
    1.12, past every cell's bound)."""
    rest = os.environ.get("JULIA_DEPOT_PATH", "")
    return f"{path}{os.pathsep}{rest}"


@functools.lru_cache(maxsize=1)
def julia_own_depots() -> str:
    """The depots that come with the Julia on PATH, without the user's (`~/.julia`): Julia's
    default DEPOT_PATH after its first entry (base/initdefs.jl `append_default_depot_path!`).
    1.10+ keeps its stdlibs' caches there, so a test depot that must leave the user's depot
    out still lists these behind it."""
    env = {k: v for k, v in os.environ.items() if k != "JULIA_DEPOT_PATH"}
    code = 'print(join(DEPOT_PATH[2:end], Sys.iswindows() ? ";" : ":"))'
    julia = os.environ.get("JUTUL_JKERNEL_JULIA", "julia")
    done = subprocess.run(
        [julia, "--startup-file=no", "-e", code],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    return done.stdout.strip()


KERNEL_NAME = "julia-supervised-client-test"


def install_spec(prefix: Path, name: str, *args: str) -> None:
    """Install the kernelspec as ``name`` under ``prefix`` (never the user's own dirs)."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jutul_jkernel.install",
            "--prefix",
            str(prefix),
            "--name",
            name,
            # The doctor (seconds per install) has tests of its own: test_doctor, test_install.
            "--no-doctor",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"kernelspec install failed:\n{done.stdout}{done.stderr}"


@pytest.fixture(scope="module")
def kernel_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Install the kernelspec into a private prefix and point JUPYTER_PATH at it."""
    prefix = tmp_path_factory.mktemp("prefix")
    install_spec(prefix, KERNEL_NAME)
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(prefix / "share" / "jupyter")
    try:
        yield dict(os.environ)
    finally:
        if old is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = old


# ---- kernels started through jupyter_client ----

START_TIMEOUT = 60.0

Kernel = tuple[KernelManager, BlockingKernelClient]


def start_kernel(name: str = KERNEL_NAME) -> Kernel:
    km = KernelManager(kernel_name=name)
    km.start_kernel()
    # ZMQ drops IOPub messages for a subscriber 1000 messages behind (its default high-water
    # mark, which ipykernel and jupyter_client keep); a busy test process can fall that far
    # behind a 100 MB line. The tests read like a fast frontend: no receive limit.
    km.context.setsockopt(zmq.RCVHWM, 0)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=START_TIMEOUT)
    except RuntimeError:
        kc.stop_channels()
        km.shutdown_kernel(now=True)
        raise
    return km, kc


def stop_kernel(km: KernelManager, kc: BlockingKernelClient) -> None:
    kc.stop_channels()
    if km.is_alive():
        km.shutdown_kernel()
    km.cleanup_resources()
    km.context.destroy(linger=0)


@contextlib.contextmanager
def shared_kernel(name: str = KERNEL_NAME) -> Iterator[Kernel]:
    """A kernel that outlives single tests: the leftover guard ignores its Julia meanwhile."""
    km, kc = start_kernel(name)
    pid = km.provisioner.pid if km.provisioner else None
    assert pid is not None
    SHARED_KERNEL_PIDS.add(pid)
    try:
        yield km, kc
    finally:
        stop_kernel(km, kc)
        SHARED_KERNEL_PIDS.discard(pid)


@pytest.fixture(scope="module")
def kernel(kernel_env: dict[str, str]) -> Iterator[Kernel]:
    """One kernel for a module's tests that do not end it. A module whose kernel needs more
    (a depot, cells run first, a warm-up) says so in a fixture of its own."""
    with shared_kernel() as k:
        yield k


@pytest.fixture
def own_kernel(kernel_env: dict[str, str]) -> Iterator[Kernel]:
    """A kernel of the test's own, for tests that end or break it."""
    km, kc = start_kernel()
    try:
        yield km, kc
    finally:
        stop_kernel(km, kc)


def julia_of(km: KernelManager) -> int:
    """The pid of the Julia that the kernel runs now."""
    pid = km.provisioner.pid if km.provisioner else None
    assert pid is not None
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        for p in julia_descendants():
            if pid in {a.pid for a in p.parents()}:
                return int(p.pid)
        time.sleep(0.05)
    raise AssertionError("the kernel runs no Julia")


# ---- a Julia's warm-up, waited for through a supervisor or a kernel ----

# server.jl compiles its error-report path (and more) in small steps whenever Julia has been
# idle for 0.2 s; a user typing gives it that time. Until then the first interrupt of a cell
# that computes takes seconds to report, and the escalation mistakes it for a cell that ignored
# its SIGINT (seen here: forced, even restarted, on a loaded machine).
WARM_UP_BOUND = 120.0
WARM_UP_POLL = 0.5  # idle time between polls: the warm-up only advances while Julia is idle


@pytest.fixture
async def julia() -> AsyncIterator[JuliaSupervisor]:
    """A started supervisor with default settings, shut down after the test."""
    sup = JuliaSupervisor(startup_timeout=STARTUP_TIMEOUT)
    await sup.start()
    try:
        yield sup
    finally:
        await sup.shutdown()


class Output:
    """Collects live output per stream, in arrival order."""

    def __init__(self) -> None:
        self.chunks: list[tuple[str, bytes]] = []

    def __call__(self, stream: str, data: bytes) -> None:
        self.chunks.append((stream, data))

    def text(self, stream: str = "stdout") -> str:
        return b"".join(d for s, d in self.chunks if s == stream).decode("utf-8", "replace")


@pytest.fixture
def output() -> Output:
    return Output()


class StartSignal:
    """A FIFO that a cell writes to when it reaches a given point: an event to wait on, instead
    of a guess of how long the cell needs to get there.

    ``julia`` is the Julia statement that signals; it opens, writes and closes a file
    synchronously, so it neither yields nor needs the cell's output to be forwarded (a cell
    that computes forwards nothing until it yields).
    """

    def __init__(self, directory: Path) -> None:
        self.path = directory / f"started-{secrets.token_hex(4)}"
        os.mkfifo(self.path, 0o600)
        # Opened before the cell runs, so Julia's open for writing never blocks.
        self._fd = os.open(self.path, os.O_RDONLY | os.O_NONBLOCK)

    @property
    def julia(self) -> str:
        path = str(self.path)
        assert not set(path) & set('"$\\'), f"{path!r} needs quoting in Julia"
        return f'write("{path}", "x")'

    @property
    def julia_once_waiting(self) -> str:
        """The statement that signals from a task of its own, which runs only once the cell
        yields (in its sleep or wait). An interrupt sent then meets a Julia that waits: sent
        while the cell is still on its way there, 20 ms without an answer (a loaded machine)
        let a SIGINT deliver it instead of the frame, by design."""
        return f"@async {self.julia}"

    def wait(self, timeout: float) -> None:
        """Block until the cell signalled; fail after ``timeout`` seconds."""
        ready, _, _ = select.select([self._fd], [], [], timeout)
        assert ready, f"the cell did not reach its start signal within {timeout:g} s"
        assert os.read(self._fd, 16) == b"x"

    async def wait_async(self, timeout: float) -> None:
        """Wait on the event loop until the cell signalled; fail after ``timeout`` seconds."""
        loop = asyncio.get_running_loop()
        ready: asyncio.Future[None] = loop.create_future()
        loop.add_reader(self._fd, lambda: ready.done() or ready.set_result(None))
        try:
            await asyncio.wait_for(ready, timeout)
        except (TimeoutError, asyncio.TimeoutError):
            msg = f"the cell did not reach its start signal within {timeout:g} s"
            raise AssertionError(msg) from None
        finally:
            loop.remove_reader(self._fd)
        assert os.read(self._fd, 16) == b"x"

    def close(self) -> None:
        os.close(self._fd)
        self.path.unlink(missing_ok=True)


@pytest.fixture
def start_signal(tmp_path: Path) -> Iterator[StartSignal]:
    sig = StartSignal(tmp_path)
    try:
        yield sig
    finally:
        sig.close()


# ---- Jupyter end to end (test_notebooks.py, test_console.py) ----

E2E_KERNEL_NAME = "julia-supervised"  # the name examples/*.ipynb ask for


@pytest.fixture(scope="module")
def e2e_jupyter_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, str]]:
    """Install the kernelspec under a temporary ``--prefix`` and point Jupyter there.

    ``JUPYTER_PATH`` finds the spec first; Jupyter's data, runtime and config directories (and
    IPython's) are redirected too, so the user's own kernelspecs and settings take no part. The
    environment is patched for the module and also returned, for subprocesses.
    """
    root = tmp_path_factory.mktemp("jupyter")
    install_spec(root / "prefix", E2E_KERNEL_NAME)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(root / "prefix" / "share" / "jupyter"))
        for var, sub in (
            ("JUPYTER_DATA_DIR", "data"),
            ("JUPYTER_RUNTIME_DIR", "runtime"),
            ("JUPYTER_CONFIG_DIR", "config"),
            ("IPYTHONDIR", "ipython"),
        ):
            mp.setenv(var, str(root / sub))
        yield dict(os.environ)
