"""Who can talk to the kernel and to Julia, and who can read what they write.

Two doors: the private socket between supervisor and Julia (a Unix socket in a 0700 directory,
one connection, a one-time token that never appears in argv), and Jupyter's ZMQ sockets (HMAC
signatures always on; CurveZMQ encryption when the client provisions keys). Files the kernel
writes (Julia's log) are private to the user.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import json
import logging
import os
import socket
import stat
import sys
import textwrap
import time
import warnings
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager
from jupyter_client.session import Session

from jutul_jkernel.supervisor.julia_supervisor import JuliaStartupError, JuliaSupervisor

from .clients import REPLY_TIMEOUT, execute, result_of
from .conftest import (
    KERNEL_NAME,
    START_TIMEOUT,
    STARTUP_TIMEOUT,
    julia_descendants,
    start_kernel,
    stop_kernel,
)

CELL_BOUND = 30.0
# A message that must get no reply: how long we listen before calling it ignored.
NO_REPLY_WAIT = 3.0
# Startup with an impostor in the way must still be about as quick as without one.
STARTUP_DESPITE_IMPOSTOR = 15.0


def _fake_julia(path: Path, body: str) -> str:
    """Write an executable Python script that does ``body`` and then execs the real julia."""
    path.write_text(
        f"#!{sys.executable}\n"
        + textwrap.dedent(body)
        + '\nos.execvp("julia", ["julia", *sys.argv[1:]])\n'
    )
    path.chmod(0o755)
    return str(path)


def _tcp_sockets(pid: int) -> list[tuple[str, int, str]]:
    """(local address, port, state) of every TCP socket process ``pid`` holds."""
    return [
        (c.laddr.ip, c.laddr.port, c.status)
        for c in psutil.Process(pid).net_connections(kind="tcp")
        if c.laddr
    ]


# ---- the private socket ----


@pytest.mark.integration
async def test_julia_connects_through_a_unix_socket_only_the_user_can_reach(
    tmp_path: Path,
) -> None:
    """While Julia starts, the supervisor listens on a Unix socket in a directory of mode 0700
    that this user owns, and on no TCP port; the directory is gone once Julia is connected."""
    report = tmp_path / "listening.json"
    fake = _fake_julia(
        tmp_path / "fake-listen-check",
        """
        import json, os, stat, sys
        import psutil
        address = sys.argv[-1]
        st, parent = os.stat(address), os.stat(os.path.dirname(address))
        supervisor = psutil.Process(os.getppid())
        tcp = [list(c.laddr) for c in supervisor.net_connections("tcp")]
        with open(os.environ["FAKE_REPORT"], "w") as f:
            json.dump({
                "address": address,
                "is_socket": stat.S_ISSOCK(st.st_mode),
                "dir_mode": stat.S_IMODE(parent.st_mode),
                "dir_owner": parent.st_uid,
                "supervisor_tcp": tcp,
            }, f)
        """,
    )
    sup = JuliaSupervisor(
        julia=fake, env={"FAKE_REPORT": str(report)}, startup_timeout=STARTUP_TIMEOUT
    )
    before = [[ip, port] for ip, port, _ in _tcp_sockets(os.getpid())]  # other tests' sockets
    try:
        await sup.start()
        assert (await asyncio.wait_for(sup.execute("1 + 2"), CELL_BOUND)).text == "3"
        seen = json.loads(report.read_text())
        assert not Path(seen["address"]).parent.exists(), seen
    finally:
        await sup.shutdown()
    assert seen["is_socket"], seen
    assert seen["dir_mode"] == 0o700 and seen["dir_owner"] == os.getuid(), seen
    assert [a for a in seen["supervisor_tcp"] if a not in before] == [], seen


@pytest.mark.integration
async def test_second_connection_after_the_handshake_is_refused(julia: JuliaSupervisor) -> None:
    """Once Julia is connected the socket is gone: nothing else can connect to it."""
    assert julia.pid is not None
    address = psutil.Process(julia.pid).cmdline()[-1]
    assert not Path(address).exists()
    with socket.socket(socket.AF_UNIX) as s, pytest.raises(FileNotFoundError):
        s.connect(address)
    assert _tcp_sockets(julia.pid) == []
    assert (await asyncio.wait_for(julia.execute("1 + 1"), CELL_BOUND)).text == "2"


@pytest.mark.integration
async def test_impostors_are_refused_and_logged(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """Connections with a wrong token, a bad first frame or none at all are each refused and
    logged as a warning; then the real Julia connects and works."""
    fake = _fake_julia(
        tmp_path / "fake-impostors",
        """
        import os, socket, sys
        address = sys.argv[-1]
        with open(os.environ["FAKE_REPORT"], "w") as f:
            f.write(address)
        for first in (b"RDY not-the-token 0\\n", b"HELLO there\\n", b""):
            s = socket.socket(socket.AF_UNIX)
            s.connect(address)
            if first:
                s.sendall(first)
            else:
                s.shutdown(socket.SHUT_WR)
            s.settimeout(20)
            assert s.recv(10) == b"", "an impostor was not disconnected"
            s.close()
        """,
    )
    caplog.set_level(logging.WARNING, logger="jutul_jkernel.supervisor.handshake")
    report = tmp_path / "address"
    sup = JuliaSupervisor(
        julia=fake, env={"FAKE_REPORT": str(report)}, startup_timeout=STARTUP_TIMEOUT
    )
    try:
        await sup.start()
        assert (await asyncio.wait_for(sup.execute("1 + 2"), CELL_BOUND)).text == "3"
    finally:
        await sup.shutdown()
    refusals = [
        r.getMessage()
        for r in caplog.records
        if r.name == "jutul_jkernel.supervisor.handshake" and r.levelno >= logging.WARNING
    ]
    assert len([m for m in refusals if m.startswith("refused a connection")]) == 3, refusals
    assert any("not RDY with the right token" in m for m in refusals), refusals
    assert any("unknown frame kind" in m and "HELLO" in m for m in refusals), refusals
    assert any("closed before its first frame" in m for m in refusals), refusals
    assert all(report.read_text() in m for m in refusals), refusals


def _silent_impostor(tmp_path: Path) -> tuple[str, Path]:
    """A julia wrapper that first forks a process which connects and then says nothing for
    60 s (its pid goes to the returned file), then execs the real julia."""
    held = tmp_path / "impostor.pid"
    fake = _fake_julia(
        tmp_path / "fake-silent",
        f"""
        import os, socket, sys, time
        if os.fork() == 0:
            s = socket.socket(socket.AF_UNIX)
            s.connect(sys.argv[-1])
            with open({str(held)!r} + ".tmp", "w") as f:
                f.write(str(os.getpid()))
            os.rename({str(held)!r} + ".tmp", {str(held)!r})
            time.sleep(60)  # silent, connection open
            os._exit(0)
        deadline = time.monotonic() + 10
        while not os.path.exists({str(held)!r}) and time.monotonic() < deadline:
            time.sleep(0.01)
        time.sleep(0.2)
        """,
    )
    return fake, held


def _kill_impostor(held: Path) -> None:
    """Kill the silent impostor, unless it already went with Julia's process group."""
    if held.exists():
        with contextlib.suppress(psutil.NoSuchProcess):
            impostor = psutil.Process(int(held.read_text()))
            if "fake-silent" in " ".join(impostor.cmdline()):
                impostor.kill()


@pytest.mark.integration
async def test_a_silent_connection_does_not_stall_startup(tmp_path: Path) -> None:
    """A local process that connects first and then says nothing must not keep Julia waiting:
    start() completes in about the usual time, not when the impostor gives up."""
    fake, held = _silent_impostor(tmp_path)
    sup = JuliaSupervisor(julia=fake, startup_timeout=STARTUP_TIMEOUT)
    t0 = time.perf_counter()
    try:
        await asyncio.wait_for(sup.start(), STARTUP_DESPITE_IMPOSTOR)
        assert (await asyncio.wait_for(sup.execute("1 + 2"), CELL_BOUND)).text == "3"
    finally:
        print(f"\n[silent impostor] start() took {time.perf_counter() - t0:.1f} s")
        await sup.shutdown()
        _kill_impostor(held)
        # A socket the cancelled start() left open is judged by the next test, not elsewhere.
        with warnings.catch_warnings(record=True):
            warnings.simplefilter("always", ResourceWarning)
            gc.collect()


@pytest.mark.integration
async def test_a_failed_start_closes_the_sockets_it_accepted(tmp_path: Path) -> None:
    """When start() gives up (here: a startup timeout while an impostor holds the handshake),
    every socket the supervisor accepted is closed, not left to the garbage collector."""
    fake, held = _silent_impostor(tmp_path)
    sup = JuliaSupervisor(julia=fake, startup_timeout=3)
    with warnings.catch_warnings(record=True):  # earlier tests' garbage is not ours to judge
        warnings.simplefilter("always", ResourceWarning)
        gc.collect()
    try:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always", ResourceWarning)
            with pytest.raises(JuliaStartupError):
                await asyncio.wait_for(sup.start(), 30)
            await sup.shutdown()
            await asyncio.sleep(0)
            gc.collect()
        leaks = [str(w.message) for w in caught if issubclass(w.category, ResourceWarning)]
        assert not [m for m in leaks if "socket" in m], leaks
    finally:
        await sup.shutdown()
        _kill_impostor(held)


def _all_argvs() -> list[tuple[int, str]]:
    out = []
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmdline = p.info.get("cmdline") or []
        out.append((p.info["pid"], "\0".join(cmdline)))
    return out


def _token_recorder(tmp_path: Path) -> tuple[str, Path]:
    """A julia wrapper that writes the token it was given to a file (the test is its owner)."""
    record = tmp_path / "token"
    fake = _fake_julia(
        tmp_path / "fake-token-recorder",
        f"""
        import os, sys
        with open({str(record)!r}, "w") as f:
            f.write(os.environ["JUTUL_JKERNEL_TOKEN"])
        """,
    )
    return fake, record


@pytest.mark.integration
async def test_token_is_in_no_argv_supervisor(tmp_path: Path) -> None:
    """The handshake token appears in no process's command line (Julia's or any other)."""
    fake, record = _token_recorder(tmp_path)
    sup = JuliaSupervisor(julia=fake, startup_timeout=STARTUP_TIMEOUT)
    try:
        await sup.start()
        token = record.read_text()
        assert len(token) >= 32
        assert sup.pid is not None
        assert psutil.Process(sup.pid).cmdline()  # Julia's own argv is readable and ...
        holders = [(pid, argv) for pid, argv in _all_argvs() if token in argv]
        assert holders == [], holders  # ... nobody's holds the token
    finally:
        await sup.shutdown()


def _julia_of(km: KernelManager, within: float = START_TIMEOUT) -> psutil.Process:
    pid = km.provisioner.pid if km.provisioner else None
    assert pid is not None
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        for p in julia_descendants():
            try:
                if pid in {a.pid for a in p.parents()} and p.name() == "julia":
                    return p
            except psutil.NoSuchProcess:
                continue
        time.sleep(0.1)
    raise AssertionError("the kernel has no Julia running")


@pytest.mark.e2e
def test_kernel_keeps_token_and_key_out_of_argv_and_its_files_private(
    kernel_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Through Jupyter: neither the handshake token nor the HMAC key is in any argv; Julia's
    log is mode 0600 in a 0700 directory, even under a permissive umask."""
    fake, record = _token_recorder(tmp_path)
    monkeypatch.setenv("JUTUL_JKERNEL_JULIA", fake)
    old_umask = os.umask(0)  # the kernel inherits it: privacy must not depend on the umask
    try:
        km, kc = start_kernel()
    finally:
        os.umask(old_umask)
    try:
        assert result_of(execute(kc, "1 + 1")[1]) == "2"
        token = record.read_text()
        key = json.loads(Path(km.connection_file).read_text())["key"]
        assert len(token) >= 32 and len(key) >= 32
        argvs = _all_argvs()
        assert [p for p, a in argvs if token in a] == []
        assert [p for p, a in argvs if key in a] == []
        julia = _julia_of(km)
        # Julia's original stdout (kept as its diagnostic channel) is the log file.
        logs = {
            Path(os.readlink(fd))
            for fd in Path(f"/proc/{julia.pid}/fd").iterdir()
            if os.readlink(fd).endswith(".log") and "jutul-jkernel-" in os.readlink(fd)
        }
        assert len(logs) == 1, logs
        (log_path,) = logs
        assert stat.S_IMODE(log_path.stat().st_mode) == 0o600, oct(log_path.stat().st_mode)
        assert stat.S_IMODE(log_path.parent.stat().st_mode) == 0o700
    finally:
        stop_kernel(km, kc)


@pytest.mark.e2e
def test_a_kernel_binds_no_tcp_port_but_its_connection_files(
    kernel_env: dict[str, str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The kernel process and its Julia hold no TCP socket but the five ports jupyter_client
    chose, also while Julia starts (before the kernel has bound those five).

    jupyter_client picks the five by binding port 0 and releasing it, and the kernel binds them
    a moment later (jupyter_client#487): a port-0 socket of ours in that window could take one
    of them, from this kernel or one starting beside it, which then dies with "Address already
    in use". That is how ten kernels starting together failed CI (test_many_kernels)."""
    report = tmp_path / "at-start.json"
    fake = _fake_julia(
        tmp_path / "fake-port-check",
        f"""
        import json, os, sys
        import psutil
        kernel = psutil.Process(os.getppid())
        tcp = [[c.laddr.ip, c.laddr.port] for c in kernel.net_connections("tcp")]
        with open({str(report)!r}, "w") as f:
            json.dump(tcp, f)
        """,
    )
    monkeypatch.setenv("JUTUL_JKERNEL_JULIA", fake)
    km, kc = start_kernel()
    try:
        assert result_of(execute(kc, "1 + 1")[1]) == "2"
        info = json.loads(Path(km.connection_file).read_text())
        chosen = {info[f"{name}_port"] for name in ("shell", "iopub", "stdin", "control", "hb")}
        assert json.loads(report.read_text()) == []  # Julia starts before the kernel binds
        pid = km.provisioner.pid if km.provisioner else None
        assert pid is not None
        kernel = psutil.Process(pid).net_connections(kind="tcp")
        listening = {c.laddr.port for c in kernel if c.status == psutil.CONN_LISTEN}
        assert listening == chosen, (listening, chosen)
        # ipykernel's debugger connects a socket to the kernel's own shell port: fine, that
        # port is already bound when it connects.
        others = [
            c for c in kernel if c.laddr.port not in chosen and c.raddr[1:] != (info["shell_port"],)
        ]
        assert others == [], others
        assert _tcp_sockets(_julia_of(km).pid) == []
    finally:
        stop_kernel(km, kc)


@pytest.mark.integration
async def test_julia_log_is_private(tmp_path: Path) -> None:
    """supervisor.log_path is mode 0600 in a 0700 directory, whatever the umask."""
    old_umask = os.umask(0)
    try:
        sup = JuliaSupervisor(startup_timeout=STARTUP_TIMEOUT)
        await sup.start()
    finally:
        os.umask(old_umask)
    try:
        log_path = sup.log_path
        assert log_path is not None and log_path.exists()
        assert stat.S_IMODE(log_path.stat().st_mode) == 0o600
        assert stat.S_IMODE(log_path.parent.stat().st_mode) == 0o700
        # A restart writes a new log: private too.
        await sup.restart()
        assert sup.log_path is not None and sup.log_path != log_path
        assert stat.S_IMODE(sup.log_path.stat().st_mode) == 0o600
    finally:
        await sup.shutdown()


# ---- Jupyter's sockets: HMAC signatures ----


def _raw_socket(ctx: zmq.Context[Any], km: KernelManager, channel: str) -> zmq.Socket[Any]:
    sock = ctx.socket(zmq.DEALER)
    sock.linger = 0
    sock.connect(f"tcp://{km.ip}:{getattr(km, channel + '_port')}")
    return sock


def _reply(sock: zmq.Socket[Any], session: Session, timeout: float) -> dict[str, Any] | None:
    """The next message on ``sock`` within ``timeout`` s (any signature), or None."""
    if not sock.poll(int(timeout * 1000)):
        return None
    _, msg = session.recv(sock, mode=zmq.NOBLOCK)
    return msg


@pytest.mark.e2e
def test_hmac_signing_is_on_and_enforced(
    own_kernel: tuple[KernelManager, BlockingKernelClient],
) -> None:
    """The connection file carries a key and hmac-sha256; messages signed with another key (or
    not at all) get no reply and do not run, the same message signed properly does."""
    km, kc = own_kernel
    info = json.loads(Path(km.connection_file).read_text())
    assert info["key"], "empty HMAC key: signatures are off"
    assert info["signature_scheme"] == "hmac-sha256"
    assert stat.S_IMODE(Path(km.connection_file).stat().st_mode) == 0o600

    right = Session(key=km.session.key, signature_scheme="hmac-sha256")
    impostors = {
        "wrong key": Session(key=b"not-the-key", signature_scheme="hmac-sha256"),
        "unsigned": Session(key=b"", signature_scheme="hmac-sha256"),
    }
    ctx: zmq.Context[Any] = zmq.Context()
    try:
        for name, bad in impostors.items():
            var = "pwned_" + name.replace(" ", "_")
            shell = _raw_socket(ctx, km, "shell")
            bad.send(shell, "execute_request", _execute_content(f"{var} = 1"))
            bad.send(shell, "kernel_info_request", {})
            assert _reply(shell, right, NO_REPLY_WAIT) is None, f"{name}: the kernel replied"
            control = _raw_socket(ctx, km, "control")
            bad.send(control, "shutdown_request", {"restart": False})
            assert _reply(control, right, NO_REPLY_WAIT) is None, f"{name}: shutdown answered"
            assert km.is_alive(), f"{name}: a forged shutdown_request stopped the kernel"
            shell.close()
            control.close()
            # The forged cell did not run.
            assert result_of(execute(kc, f"isdefined(Main, :{var})")[1]) == "false"
        shell = _raw_socket(ctx, km, "shell")
        right.send(shell, "kernel_info_request", {})
        reply = _reply(shell, right, REPLY_TIMEOUT)
        assert reply is not None and reply["msg_type"] == "kernel_info_reply"
        right.send(shell, "execute_request", _execute_content("signed_ok = 1"))
        reply = _reply(shell, right, REPLY_TIMEOUT)
        assert reply is not None and reply["content"]["status"] == "ok"
        shell.close()
    finally:
        ctx.destroy(linger=0)


def _execute_content(code: str) -> dict[str, Any]:
    return {
        "code": code,
        "silent": False,
        "store_history": False,
        "user_expressions": {},
        "allow_stdin": False,
        "stop_on_error": False,
    }


# ---- Jupyter's sockets: CurveZMQ ----


def _start_logged(km: KernelManager, log: Path) -> BlockingKernelClient:
    with open(log, "w") as f:
        km.start_kernel(stdout=f, stderr=f)
    kc = km.client()
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=START_TIMEOUT)
    except RuntimeError:
        stop_kernel(km, kc)
        raise
    return kc


def _no_reply_without_the_keys(km: KernelManager) -> None:
    """Clients that lack the kernel's Curve server key get nothing back, even with the HMAC key."""
    ctx: zmq.Context[Any] = zmq.Context()
    session = Session(key=km.session.key, signature_scheme="hmac-sha256")
    try:
        plain = _raw_socket(ctx, km, "shell")
        session.send(plain, "kernel_info_request", {})
        assert _reply(plain, session, NO_REPLY_WAIT) is None, "a plain client was answered"
        wrong = ctx.socket(zmq.DEALER)
        wrong.linger = 0
        client_public, client_secret = zmq.curve_keypair()
        wrong.curve_serverkey, _ = zmq.curve_keypair()
        wrong.curve_publickey, wrong.curve_secretkey = client_public, client_secret
        wrong.connect(f"tcp://{km.ip}:{km.shell_port}")
        session.send(wrong, "kernel_info_request", {})
        assert _reply(wrong, session, NO_REPLY_WAIT) is None, "a wrong server key was answered"
        # Plain-text clients also see nothing of what the kernel publishes.
        sub = ctx.socket(zmq.SUB)
        sub.linger = 0
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(f"tcp://{km.ip}:{km.iopub_port}")
        time.sleep(0.5)
        kc = km.client()
        kc.start_channels()
        try:
            execute(kc, 'println("secret output")')
        finally:
            kc.stop_channels()
        assert not sub.poll(int(NO_REPLY_WAIT * 1000)), "IOPub readable without the keys"
    finally:
        ctx.destroy(linger=0)


@pytest.mark.e2e
def test_curve_zmq_with_keys_provisioned_in_the_connection_file(
    kernel_env: dict[str, str], tmp_path: Path
) -> None:
    """jupyter_client 8.10 writes a manager's curve_publickey/secretkey into the connection
    file; ipykernel 7.4 then makes every socket a Curve server. Our kernel works that way end to
    end, and clients without the keys get no reply."""
    km = KernelManager(kernel_name=KERNEL_NAME)
    km.curve_publickey, km.curve_secretkey = zmq.curve_keypair()
    log = tmp_path / "kernel.log"
    kc = _start_logged(km, log)
    try:
        info = json.loads(Path(km.connection_file).read_text())
        assert info["curve_publickey"] == km.curve_publickey.decode()
        assert kc.curve_publickey == km.curve_publickey
        reply, outputs = execute(kc, 'println("over curve"); 6 * 7')
        assert reply["content"]["status"] == "ok"
        assert result_of(outputs) == "42"
        _no_reply_without_the_keys(km)
    finally:
        stop_kernel(km, kc)
    text = log.read_text()
    assert "running over TCP without encryption" not in text, text


@pytest.mark.e2e
def test_curve_zmq_when_the_manager_requires_transport_encryption(
    kernel_env: dict[str, str], tmp_path: Path
) -> None:
    """KernelManager(transport_encryption="required") is jupyter_client's switch for CurveZMQ;
    it needs the kernelspec to declare metadata.supported_encryption = ["curve"] (as
    ipykernel's own spec does). Our kernel supports Curve, so its spec must say so."""
    km = KernelManager(kernel_name=KERNEL_NAME, transport_encryption="required")
    assert "curve" in (km.kernel_spec.metadata.get("supported_encryption") or []), (
        f"kernelspec metadata {km.kernel_spec.metadata} does not declare Curve support"
    )
    kc = _start_logged(km, tmp_path / "kernel.log")
    try:
        assert json.loads(Path(km.connection_file).read_text()).get("curve_publickey")
        assert result_of(execute(kc, "6 * 7")[1]) == "42"
        _no_reply_without_the_keys(km)
    finally:
        stop_kernel(km, kc)
