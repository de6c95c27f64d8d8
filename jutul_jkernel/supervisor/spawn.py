"""Spawning Julia: the process in a process group of its own, its fd 1 and fd 2 as pipes for
the supervisor to read (with the marker its output carries), and its log.

:func:`spawn` needs no event loop, so that a kernel can start Julia before its slow imports
(supervisor/early_launch.py, :meth:`JuliaSupervisor.launch`); what it returns, a
:class:`Launch`, is what the starter adopts or discards. Being on that early path, this module
imports no asyncio, logging or psutil (tests/test_early_launch.py checks what is loaded when
Julia is spawned); the Popen as the supervisor awaits it, with the thread that reaps it, is
supervisor/child_process.py. Every signal of ours goes to Julia's own group, never to the
supervisor's.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from jutul_jkernel import settings
from jutul_jkernel.supervisor.errors import JuliaStartupError
from jutul_jkernel.supervisor.launch_settings import LaunchSettings
from jutul_jkernel.supervisor.rendezvous import Rendezvous

# typing.TYPE_CHECKING without importing typing before Julia is spawned (mypy takes it as true)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

IS_WINDOWS = sys.platform == "win32"

# How long a reap waits for Julia's exit once it was killed or closed its connection.
REAP_WAIT = 2.0
# Where Linux allows, the pipes hold this much rather than 64 KiB: fewer wake-ups in a flood,
# and a C library blocks later. Not more: past a per-user total (pipe-user-pages-soft, 64 MiB
# by default) Linux gives every new pipe of that user one page, and a server may run many
# kernels.
_PIPE_BYTES = 256 * 1024


@dataclass
class Launch:
    """A Julia process spawned but not yet connected (see :meth:`JuliaSupervisor.launch`)."""

    popen: subprocess.Popen[bytes]
    listener: Rendezvous
    token: str
    log_path: Path
    pipe_fds: dict[str, int] | None  # read ends of Julia's fd 1 and fd 2 (POSIX)
    marker: bytes  # the prefix of its output markers (supervisor/pipes.py)
    settings: LaunchSettings

    def kill_group(self) -> None:
        """SIGKILL its process group, synchronously (signal handlers, atexit)."""
        if not IS_WINDOWS:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signal.SIGKILL)

    def discard(self) -> None:
        """Kill the process (and its group), reap it, close what we hold of it."""
        self.listener.close()
        self.kill_group()
        with contextlib.suppress(ProcessLookupError):
            self.popen.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(REAP_WAIT)
        for fd in (self.pipe_fds or {}).values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pipe_fds = None


def spawn(chosen: LaunchSettings, token: str, log_path: Path, claims: Path | None) -> Launch:
    """Spawn Julia with a listener for it to connect to; no event loop needed."""
    try:
        listener = Rendezvous()
    except OSError as exc:
        msg = f"could not open a socket for Julia to connect to: {exc}"
        raise JuliaStartupError(msg) from exc
    argv = chosen.argv(listener.address)
    fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    env = chosen.environment(token)
    if claims is not None:
        env[settings.CLAIMS] = str(claims)
    kwargs: dict[str, Any] = {}
    pipe_fds: dict[str, int] | None = None
    ours: list[int] = []  # write ends, closed here once Julia has them
    err_write = fd
    marker = new_marker()
    if IS_WINDOWS:
        # No pass_fds: Julia redirects its output in-process and sends it as OUT frames.
        kwargs["creationflags"] = 0x00000200  # CREATE_NEW_PROCESS_GROUP: Ctrl+Break target
    else:
        kwargs["start_new_session"] = True  # our signals reach Julia, never our own group
        # fd 2 is a pipe from the start (what Julia writes while booting or dying is read here); fd
        # 1 stays the log until the server moves it onto the other pipe, so its start-up messages
        # stay in the log. See supervisor/pipes.py for why we read them, not Julia.
        out_read, out_write = make_pipe()
        err_read, err_write = make_pipe()
        pipe_fds = {"stdout": out_read, "stderr": err_read}
        ours = [out_write, err_write]
        kwargs["pass_fds"] = (out_write,)
        env[settings.STDOUT_FD] = str(out_write)
        env[settings.MARK] = marker
    try:
        popen = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=fd,
            stderr=err_write,
            cwd=chosen.cwd,
            env=env,
            **kwargs,
        )
    except OSError as exc:
        listener.close()
        for read_end in (pipe_fds or {}).values():
            os.close(read_end)
        msg = (
            f"could not start Julia with {argv[0]!r}: {exc}. Install Julia (juliaup, or "
            f"`make setup` in a checkout) or point {settings.JULIA} at the executable."
        )
        raise JuliaStartupError(msg) from exc
    finally:
        os.close(fd)
        for write_end in ours:
            os.close(write_end)
    return Launch(popen, listener, token, log_path, pipe_fds, marker_prefix(marker), chosen)


def new_token() -> str:
    """A one-time handshake token (supervisor/handshake.py): 32 hex digits."""
    return os.urandom(16).hex()  # secrets.token_hex(16), without importing secrets


def new_marker() -> str:
    """A marker for one Julia process, as the hex digits Julia puts into its marker bytes."""
    return os.urandom(8).hex()  # secrets.token_hex(8), without importing secrets


def marker_prefix(hex_digits: str) -> bytes:
    """The bytes every marker of that process starts with (supervisor/pipes.py reads them)."""
    return b"\0\x1fJJK" + hex_digits.encode("ascii")


def make_pipe() -> tuple[int, int]:
    """A pipe (read end non-blocking, for the event loop), enlarged where possible."""
    r, w = os.pipe()
    with contextlib.suppress(OSError, AttributeError):  # not Linux, or over the user's quota
        fcntl.fcntl(r, fcntl.F_SETPIPE_SZ, _PIPE_BYTES)  # type: ignore[attr-defined,unused-ignore]
    os.set_blocking(r, False)
    return r, w


def new_log_dir() -> Path:
    """A fresh temporary directory for Julia's logs (and the claims directory beside them)."""
    return Path(tempfile.mkdtemp(prefix="jutul-jkernel-"))


def log_file(log_dir: Path, incarnation: int) -> Path:
    """The log of this process's ``incarnation``-th Julia (1, 2, ...) in ``log_dir``."""
    return log_dir / f"julia-{os.getpid()}-{incarnation}.log"


def new_claims_dir(beside: Path) -> Path:
    """A fresh interrupt claims directory in ``beside`` (supervisor/interrupt_claims.py);
    OSError if it cannot be made."""
    # Absolute: Julia runs in another working directory (cwd) than a relative log directory
    # is relative to.
    return Path(tempfile.mkdtemp(prefix="claims-", dir=beside)).absolute()
