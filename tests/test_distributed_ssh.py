"""Distributed.jl workers on another host (SSHManager, through a private sshd on loopback):
their output reaches the cell, an interrupt stops their computation and keeps them, a worker
killed on its host gives Distributed's error, and no process started through that sshd outlives
the kernel's shutdown or restart, or a Julia SIGKILLed with its process group.

The "other host" is this machine reached over ssh: SSHManager runs `ssh jjk-sshd ... julia
--worker` exactly as it would for a remote machine, and interrupts with `ssh jjk-sshd kill -2`.
Every process the sshd starts carries a tag in its environment, so workers are found even after
their ssh session ended (tests/ssh_fixture.py).
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import signal
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from .clients import collect, drain, execute, result_of, text_of
from .conftest import (
    SHARED_KERNEL_PIDS,
    START_TIMEOUT,
    julia_of,
    start_kernel,
    stop_kernel,
)
from .ssh_fixture import SshServer
from .test_distributed import assert_everywhere_prints, sigint_a_running_cell

pytestmark = pytest.mark.e2e

# addprocs over ssh: ~10 s here (one ssh login and one Julia start per worker, on a shared
# 2-core machine); a loaded machine may need much more.
ADDPROCS_TIMEOUT = 100.0
CELL_TIMEOUT = 30.0
# The interrupt pings the workers (up to 1 s) and runs one ssh per busy worker (1-2.5 s here).
INTERRUPT_TIMEOUT = 60.0
# How long the remote loops must keep their markers unchanged to count as stopped; they
# rewrite them several times a second while they run.
QUIET_WINDOW = 3.0
# Spinning workers must show progress before the interrupt, so the test can tell.
PROGRESS_TIMEOUT = 60.0
# After shutdown or restart: the detached interrupt needs one ssh login, then the worker exits.
GONE_TIMEOUT = 30.0

# Allocating, so a SIGINT lands at the next safepoint; rewrites its marker file as it goes.
SPIN = """
@everywhere function jjk_spin(dir)
    path = joinpath(dir, "marker-$(myid())")
    n = 0
    while true
        n += 1
        v = Vector{Float64}(undef, 16)
        n % 500_000 == 0 && write(path, string(n))
    end
end
"""


@pytest.fixture(scope="module")
def ssh_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshServer]:
    """A private sshd for the module; its processes are checked and ended afterwards."""
    if shutil.which("sshd") is None and not Path("/usr/sbin/sshd").exists():
        pytest.fail("sshd not found: run `make setup` (scripts/ensure-ssh.sh installs OpenSSH)")
    server = SshServer.start(tmp_path_factory.mktemp("sshd"))
    # Workers are descendants of this test process through the sshd: the module's tests and
    # this fixture account for them, not the per-test Julia guard.
    SHARED_KERNEL_PIDS.add(server.proc.pid)
    try:
        yield server
    finally:
        SHARED_KERNEL_PIDS.discard(server.proc.pid)
        left = server.stop()
    assert not left, f"processes started through the sshd were left running: {left}"


def test_sessions_do_not_run_the_users_bashrc(ssh_server: SshServer) -> None:
    """The login shell starts one level down (SHLVL 2), where bash skips ~/.bashrc for a
    command over ssh (see tests/ssh_fixture.py): the tests never depend on the user's rc."""
    done = ssh_server.ssh('echo "$SHLVL"')
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "2", (done.stdout, done.stderr)


def _remote_julia() -> str:
    """The julia the workers run over ssh: the one the kernel runs, as a user names theirs.

    An ssh session has the login's environment, not the kernel's, so the workers cannot take
    Julia's own path: where Debian's Julia 1.5.3 runs through make setup's launcher (its own
    libunwind, scripts/ensure-julia.sh), /usr/bin/julia over ssh would have the system's and
    crash on the interrupt these tests send."""
    found = shutil.which(os.environ.get("JUTUL_JKERNEL_JULIA", "julia"))
    assert found is not None, "no julia on PATH"
    return found


def _add_ssh_workers(kc: BlockingKernelClient, server: SshServer, workdir: Path) -> list[int]:
    """addprocs(2) on the sshd's host from a cell; return the workers' OS pids."""
    code = (
        "using Distributed; "
        f'addprocs([("{server.host} 127.0.0.1", 2)]; sshflags = {server.sshflags}, '
        f'exename = "{_remote_julia()}", dir = "{workdir}"); '
        "nworkers()"
    )
    reply, outputs = execute(kc, code, ADDPROCS_TIMEOUT)
    assert reply["content"]["status"] == "ok", reply["content"]
    assert result_of(outputs) == "2", text_of(outputs, "stderr")
    reply, outputs = execute(kc, "[remotecall_fetch(getpid, w) for w in workers()]", CELL_TIMEOUT)
    assert reply["content"]["status"] == "ok", reply["content"]
    pids = [int(n) for n in re.findall(r"^\s*(\d+)\s*$", result_of(outputs) or "", re.MULTILINE)]
    assert len(pids) == 2, result_of(outputs)
    remote = {p.pid for p in server.julia_processes()}
    assert set(pids) <= remote, f"workers {pids} are not processes of the sshd {remote}"
    return pids


def _describe(procs: list[psutil.Process]) -> list[tuple[int, str, str, float]]:
    """pid, name, state and CPU use of processes a test expected gone: computing or stuck?"""
    found = []
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            found.append((p.pid, p.name(), p.status(), p.cpu_percent(interval=0.5)))
    return found


def _alive(procs: list[psutil.Process]) -> list[psutil.Process]:
    """Those of ``procs`` still running (a zombie has ended)."""
    found = []
    for p in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                found.append(p)
    return found


def _markers(workdir: Path) -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in workdir.glob("marker-*")}


def _start_spinning(kc: BlockingKernelClient, workdir: Path) -> str:
    """Start a pmap whose two items spin forever on the two workers; wait until both run."""
    for p in workdir.glob("marker-*"):
        p.unlink()
    reply, _ = execute(kc, SPIN, CELL_TIMEOUT)
    assert reply["content"]["status"] == "ok", reply["content"]
    msg_id = kc.execute(f'pmap(i -> jjk_spin("{workdir}"), 1:2)')
    deadline = time.monotonic() + PROGRESS_TIMEOUT
    first: dict[str, int] = {}
    while time.monotonic() < deadline:
        seen = _markers(workdir)
        first = first or (seen if len(seen) == 2 else {})
        if first and all(seen[k] != first[k] for k in first):
            return msg_id  # both loops have rewritten their marker: both are computing
        time.sleep(0.1)
    pytest.fail(f"the remote loops did not both make progress: {_markers(workdir)}")


def _wait_gone(
    server: SshServer, timeout: float, others: frozenset[int] = frozenset()
) -> list[psutil.Process]:
    """Wait until every process the sshd started, but ``others``, is gone; return the rest."""

    def left() -> list[psutil.Process]:
        return [p for p in server.session_processes() if p.pid not in others]

    deadline = time.monotonic() + timeout
    procs = left()
    while procs and time.monotonic() < deadline:
        time.sleep(0.1)
        procs = left()
    return procs


@pytest.fixture(scope="module")
def ssh_cluster(
    kernel_env: dict[str, str],
    ssh_server: SshServer,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[tuple[KernelManager, BlockingKernelClient, list[int], Path]]:
    """One kernel whose Julia has two SSH workers, for the tests that keep it running."""
    workdir = tmp_path_factory.mktemp("ssh-workers")
    km, kc = start_kernel()
    pid = km.provisioner.pid if km.provisioner else None
    assert pid is not None
    SHARED_KERNEL_PIDS.add(pid)
    try:
        pids = _add_ssh_workers(kc, ssh_server, workdir)
        yield km, kc, pids, workdir
    finally:
        stop_kernel(km, kc)
        SHARED_KERNEL_PIDS.discard(pid)
    left = _wait_gone(ssh_server, GONE_TIMEOUT)
    assert not left, f"after shutdown, still running under the sshd: {[p.pid for p in left]}"


def test_worker_output_reaches_the_cell(
    ssh_cluster: tuple[KernelManager, BlockingKernelClient, list[int], Path],
) -> None:
    """println on the SSH workers shows up in the running cell's stdout."""
    _, kc, _, _ = ssh_cluster
    assert_everywhere_prints(kc)


def test_interrupt_stops_the_remote_computation(
    ssh_cluster: tuple[KernelManager, BlockingKernelClient, list[int], Path],
) -> None:
    """Interrupting a pmap over two SSH workers stops their loops; session and workers stay."""
    km, kc, pids, workdir = ssh_cluster
    drain(kc)
    execute(kc, "keep = 42")
    msg_id = _start_spinning(kc, workdir)
    t0_wall = time.time()
    t0 = time.perf_counter()
    km.interrupt_kernel()
    reply, outputs = collect(kc, msg_id, INTERRUPT_TIMEOUT)
    reply_s = time.perf_counter() - t0
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "InterruptException", reply["content"]
    before = _markers(workdir)
    time.sleep(QUIET_WINDOW)
    after = _markers(workdir)
    assert after == before, "the remote loops kept running after the interrupt"
    notice = re.search(r"interrupting remote workers (\d), (\d)", text_of(outputs, "stderr"))
    assert notice is not None, text_of(outputs, "stderr")
    assert sorted(notice.groups()) == ["2", "3"]
    stopped_s = max(after.values()) / 1e9 - t0_wall
    # The workers answer at once (a busy one would not), and they are the same processes.
    reply, outputs = execute(
        kc, "(nworkers(), [remotecall_fetch(getpid, w) for w in workers()], keep)", CELL_TIMEOUT
    )
    assert reply["content"]["status"] == "ok", reply["content"]
    assert result_of(outputs) == f"(2, Int32[{pids[0]}, {pids[1]}], 42)"
    print(
        f"\n[ssh workers] reply {reply_s:.2f} s after the interrupt; "
        f"remote loops' last progress {stopped_s:.2f} s after it"
    )


def test_next_pmap_works(
    ssh_cluster: tuple[KernelManager, BlockingKernelClient, list[int], Path],
) -> None:
    """After the interrupt, a pmap uses both workers and returns every result."""
    _, kc, _, _ = ssh_cluster
    drain(kc)
    code = (
        "r = pmap(x -> (sleep(0.05); (x^2, myid())), 1:20); "
        "(sum(first.(r)), sort(unique(last.(r))))"
    )
    reply, outputs = execute(kc, code, CELL_TIMEOUT)
    assert reply["content"]["status"] == "ok", reply["content"]
    assert result_of(outputs) == "(2870, [2, 3])"


def test_a_signalled_interrupt_keeps_the_workers_and_their_lifeline(
    ssh_cluster: tuple[KernelManager, BlockingKernelClient, list[int], Path],
) -> None:
    """A SIGINT to Julia's process group (the supervisor's interrupt when Julia does not
    answer its INT frame) leaves the lifeline's ssh running, so the workers stay: the lifeline
    ends them only when Julia ends."""
    km, kc, pids, _ = ssh_cluster
    drain(kc)
    julia = julia_of(km)
    lifelines = [
        p
        for p in psutil.Process(julia).children()
        if p.name() == "ssh" and any("while read" in a for a in p.cmdline())
    ]
    assert len(lifelines) == 1, [p.cmdline() for p in psutil.Process(julia).children()]
    sigint_a_running_cell(kc, julia)
    # A cell's round trip to both workers: an ssh the SIGINT reached has died by its end.
    reply, outputs = execute(kc, "[remotecall_fetch(getpid, w) for w in workers()]", CELL_TIMEOUT)
    assert reply["content"]["status"] == "ok", reply["content"]
    assert _alive(lifelines) == lifelines, "the SIGINT ended the lifeline's ssh"
    found = re.findall(r"^\s*(\d+)\s*$", result_of(outputs) or "", re.MULTILINE)
    assert [int(n) for n in found] == pids, result_of(outputs)


def test_worker_killed_remotely_gives_distributeds_error(
    ssh_cluster: tuple[KernelManager, BlockingKernelClient, list[int], Path],
    ssh_server: SshServer,
) -> None:
    """A worker SIGKILLed on its host fails the call waiting on it with ProcessExitedException;
    the kernel, its variables and the other worker carry on. (Last: it costs a worker.)"""
    _, kc, pids, _ = ssh_cluster
    drain(kc)
    execute(kc, "keep = 42")
    msg_id = kc.execute("remotecall_fetch(() -> (sleep(600); 1), 3)")
    time.sleep(1.0)
    done = ssh_server.ssh(f"kill -9 {pids[1]}")
    assert done.returncode == 0, done.stderr
    reply, _ = collect(kc, msg_id, CELL_TIMEOUT)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "ProcessExitedException", reply["content"]
    reply, outputs = execute(kc, "(nworkers(), remotecall_fetch(myid, 2), keep)", CELL_TIMEOUT)
    assert result_of(outputs) == "(1, 2, 42)", reply["content"]
    assert not psutil.pid_exists(pids[1]) or psutil.Process(pids[1]).status() == "zombie"


# ---- workers end with their kernel ----


@contextlib.contextmanager
def _spinning_kernel(
    ssh_server: SshServer, workdir: Path
) -> Iterator[tuple[KernelManager, BlockingKernelClient, frozenset[int]]]:
    """A kernel of its own whose two SSH workers are computing, ended afterwards in any case.

    Yields the pids of what the sshd ran before (the module's shared cluster), which are not
    this kernel's to end.
    """
    others = frozenset(p.pid for p in ssh_server.session_processes())
    km, kc = start_kernel()
    try:
        _add_ssh_workers(kc, ssh_server, workdir)
        _start_spinning(kc, workdir)
        yield km, kc, others
    finally:
        stop_kernel(km, kc)
        for p in ssh_server.session_processes():  # a failed test must not leak into the next
            if p.pid not in others:
                with contextlib.suppress(psutil.NoSuchProcess):
                    p.kill()


def test_shutdown_ends_busy_remote_workers(
    kernel_env: dict[str, str], ssh_server: SshServer, tmp_path: Path
) -> None:
    """A shutdown_request while SSH workers compute: nothing the sshd started stays running."""
    with _spinning_kernel(ssh_server, tmp_path) as (_, kc, others):
        assert [p for p in ssh_server.julia_processes() if p.pid not in others]
        t0 = time.perf_counter()
        kc.shutdown()
        reply = kc.get_control_msg(timeout=CELL_TIMEOUT)
        assert reply["msg_type"] == "shutdown_reply"
        left = _wait_gone(ssh_server, GONE_TIMEOUT, others)
        gone_s = time.perf_counter() - t0
        assert not left, f"still running under the sshd after shutdown: {_describe(left)}"
    print(f"\n[ssh workers] busy workers gone {gone_s:.2f} s after shutdown_request")


def test_restart_ends_busy_remote_workers(
    kernel_env: dict[str, str], ssh_server: SshServer, tmp_path: Path
) -> None:
    """KernelManager.restart_kernel while SSH workers compute: they end; the new kernel runs."""
    with _spinning_kernel(ssh_server, tmp_path) as (km, kc, others):
        t0 = time.perf_counter()
        km.restart_kernel()
        left = _wait_gone(ssh_server, GONE_TIMEOUT, others)
        gone_s = time.perf_counter() - t0
        assert not left, f"still running under the sshd after restart: {_describe(left)}"
        kc.wait_for_ready(timeout=START_TIMEOUT)
        drain(kc)
        assert result_of(execute(kc, "isdefined(Main, :Distributed)")[1]) == "false"
    print(f"\n[ssh workers] busy workers gone {gone_s:.2f} s after restart")


def test_sigkilled_julia_ends_busy_remote_workers(
    kernel_env: dict[str, str], ssh_server: SshServer, tmp_path: Path
) -> None:
    """Julia's process group SIGKILLed (the supervisor's kill_now and _kill) while its SSH
    workers compute, so no Julia code runs at its death: the workers, their sessions and the
    local ssh clients all end (the lifeline, julia/JKernel/src/lifeline.jl). One worker is
    stopped (SIGSTOP) first, so that SIGTERM cannot end it and the lifeline must escalate."""
    with _spinning_kernel(ssh_server, tmp_path) as (km, _, others):
        julia = julia_of(km)
        clients = [p for p in psutil.Process(julia).children() if p.name() == "ssh"]
        assert clients, "Distributed started no ssh client"
        workers = [p for p in ssh_server.julia_processes() if p.pid not in others]
        assert len(workers) == 2, workers
        workers[-1].suspend()
        t0 = time.perf_counter()
        os.killpg(julia, signal.SIGKILL)
        left = _wait_gone(ssh_server, GONE_TIMEOUT, others)
        gone_s = time.perf_counter() - t0
        assert not left, f"still running under the sshd after SIGKILL: {_describe(left)}"
        deadline = time.monotonic() + GONE_TIMEOUT
        while _alive(clients) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(clients), f"local ssh clients left: {_describe(_alive(clients))}"
    print(f"\n[ssh workers] busy and stopped workers gone {gone_s:.2f} s after SIGKILL of Julia")
