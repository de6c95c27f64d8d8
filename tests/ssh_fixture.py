"""A private OpenSSH server on a loopback port, for Distributed's SSH cluster manager.

`SshServer.start(root)` writes a host key, a client key, an ``sshd_config`` and an
``ssh_config`` into ``root`` and runs Debian's ``/usr/sbin/sshd`` in the foreground, listening on
127.0.0.1 only, on a port that was free a moment before (it retries when another process takes
it first). `stop()` ends the server and every process started through it.

Every session the server starts carries ``JJK_SSHD_TAG=<random>`` in its environment
(``SetEnv``), so the processes it started are found even once their sshd session has ended
and they were re-parented (`session_processes`).

Sessions do not run the user's ``~/.bashrc``: bash runs it for a command over ssh only as a
top-level shell (bash's shell.c: ``(run_by_ssh || isnetconn(...)) && shell_level < 2``), and
``SHLVL=1`` in the session's environment makes the login shell's level 2. A pyenv rehash lock
in a ``.bashrc`` once hung every login of the tests; whatever it does is no business of
theirs. Clients use ``ssh -F <root>/ssh_config jjk-sshd``; Distributed's ``addprocs`` takes
the same ``-F`` through ``sshflags``.
"""

from __future__ import annotations

import contextlib
import getpass
import os
import secrets
import shutil
import socket
import subprocess
import time
from pathlib import Path

import psutil

SSHD = shutil.which("sshd") or "/usr/sbin/sshd"
SSH_KEYGEN = shutil.which("ssh-keygen") or "/usr/bin/ssh-keygen"
HOST_ALIAS = "jjk-sshd"
TAG_VARIABLE = "JJK_SSHD_TAG"
# sshd writes "Server listening on ..." within milliseconds; a loaded machine may need seconds.
LISTEN_TIMEOUT = 20.0
PORT_ATTEMPTS = 5
STOP_TIMEOUT = 5.0
# sshd running as root checks that its privilege-separation directory exists; Debian's service
# creates it at boot, a container that never ran the service may lack it.
PRIVSEP_DIR = Path("/run/sshd")


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _keygen(path: Path) -> str:
    subprocess.run(
        [SSH_KEYGEN, "-q", "-t", "ed25519", "-N", "", "-C", "jjk-test", "-f", str(path)],
        check=True,
        capture_output=True,
        timeout=30,
    )
    return path.with_suffix(".pub").read_text().strip()


class SshServer:
    """A running private sshd; see the module docstring."""

    def __init__(self, root: Path, port: int, proc: subprocess.Popen[bytes], tag: str) -> None:
        self.root = root
        self.port = port
        self.proc = proc
        self.tag = tag
        self.host = HOST_ALIAS
        self.client_config = root / "ssh_config"
        self.log = root / "sshd.log"

    # ---- start and stop ----

    @classmethod
    def start(cls, root: Path) -> SshServer:
        root.mkdir(parents=True, exist_ok=True)
        user = getpass.getuser()
        host_pub = _keygen(root / "host_ed25519")
        client_pub = _keygen(root / "client_ed25519")
        (root / "authorized_keys").write_text(client_pub + "\n")
        (root / "known_hosts").write_text(f"{HOST_ALIAS} {host_pub}\n")
        if os.geteuid() == 0 and not PRIVSEP_DIR.is_dir():
            PRIVSEP_DIR.mkdir(mode=0o755, parents=True, exist_ok=True)
        tag = secrets.token_hex(8)
        last_log = ""
        for _ in range(PORT_ATTEMPTS):
            port = _free_port()
            cls._write_configs(root, port, user, tag)
            log = root / "sshd.log"
            log.write_text("")
            proc = subprocess.Popen(
                [SSHD, "-D", "-f", str(root / "sshd_config"), "-E", str(log)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
            if cls._wait_listening(proc, log, port):
                return cls(root, port, proc, tag)
            last_log = log.read_text(errors="replace")
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(timeout=STOP_TIMEOUT)
        msg = f"sshd did not start on a free loopback port in {PORT_ATTEMPTS} tries:\n{last_log}"
        raise RuntimeError(msg)

    @staticmethod
    def _write_configs(root: Path, port: int, user: str, tag: str) -> None:
        (root / "sshd_config").write_text(
            f"""\
Port {port}
ListenAddress 127.0.0.1
HostKey {root}/host_ed25519
PidFile {root}/sshd.pid
AuthorizedKeysFile {root}/authorized_keys
AllowUsers {user}
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
PermitRootLogin prohibit-password
UsePAM no
StrictModes no
X11Forwarding no
AllowAgentForwarding no
AllowTcpForwarding no
PrintMotd no
PrintLastLog no
SetEnv {TAG_VARIABLE}={tag} SHLVL=1
LogLevel INFO
"""
        )
        (root / "ssh_config").write_text(
            f"""\
Host {HOST_ALIAS}
    HostName 127.0.0.1
    Port {port}
    User {user}
    IdentityFile {root}/client_ed25519
    IdentitiesOnly yes
    HostKeyAlias {HOST_ALIAS}
    UserKnownHostsFile {root}/known_hosts
    StrictHostKeyChecking yes
    BatchMode yes
    ConnectTimeout 10
    ControlMaster no
    LogLevel ERROR
"""
        )

    @staticmethod
    def _wait_listening(proc: subprocess.Popen[bytes], log: Path, port: int) -> bool:
        deadline = time.monotonic() + LISTEN_TIMEOUT
        needle = f"Server listening on 127.0.0.1 port {port}."
        while time.monotonic() < deadline:
            if needle in log.read_text(errors="replace"):
                return True
            if proc.poll() is not None:
                return False
            time.sleep(0.02)
        return False

    def stop(self) -> list[int]:
        """End sshd and everything started through it; return the pids that had to be killed."""
        killed = [p.pid for p in self.session_processes()]
        for p in self.session_processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=STOP_TIMEOUT)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=STOP_TIMEOUT)
        _, alive = psutil.wait_procs(self._own_processes(), timeout=STOP_TIMEOUT)
        if alive:
            msg = f"processes of the private sshd survived SIGKILL: {[p.pid for p in alive]}"
            raise RuntimeError(msg)
        return killed

    # ---- what runs through it ----

    @property
    def sshflags(self) -> str:
        """Julia command literal of the flags every ssh to this server needs."""
        return f"`-F {self.client_config}`"

    def ssh(self, command: str, timeout: float = 30.0) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["ssh", "-F", str(self.client_config), "-T", self.host, command],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )

    def session_processes(self) -> list[psutil.Process]:
        """Live processes started through this server: its session sshds and what they ran,
        including processes re-parented after their session ended."""
        found: dict[int, psutil.Process] = {}
        if self.proc.poll() is None:
            with contextlib.suppress(psutil.NoSuchProcess):
                for p in psutil.Process(self.proc.pid).children(recursive=True):
                    found[p.pid] = p
        marker = f"{TAG_VARIABLE}={self.tag}".encode()
        for p in psutil.process_iter():
            if p.pid in found:
                continue
            try:
                environ = Path(f"/proc/{p.pid}/environ").read_bytes()
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
            if marker in environ.split(b"\0"):
                found[p.pid] = p
        alive = []
        for p in found.values():
            with contextlib.suppress(psutil.NoSuchProcess):
                if p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(p)
        return alive

    def julia_processes(self) -> list[psutil.Process]:
        """The Julia processes (Distributed workers) started through this server."""
        found = []
        for p in self.session_processes():
            with contextlib.suppress(psutil.NoSuchProcess):
                if "julia" in p.name():
                    found.append(p)
        return found

    def _own_processes(self) -> list[psutil.Process]:
        procs = self.session_processes()
        with contextlib.suppress(psutil.NoSuchProcess):
            procs.append(psutil.Process(self.proc.pid))
        return procs
