"""Spawning Julia and reaping it: the process in a process group of its own, its fd 1 and fd 2
as pipes for the supervisor to read, its log, and the thread that waits for its exit.

:func:`spawn` needs no event loop, so that a kernel can start Julia before its slow imports
(:meth:`JuliaSupervisor.launch`); what it returns, a :class:`Launch`, is what the starter
adopts or discards. :class:`ChildProcess` is that Popen as the supervisor awaits it. Every
signal of ours goes to Julia's own group, never to the supervisor's.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from jutul_jkernel import settings
from jutul_jkernel.supervisor.errors import JuliaStartupError
from jutul_jkernel.supervisor.launch_settings import LaunchSettings
from jutul_jkernel.supervisor.pipes import make_pipe, marker_prefix, new_marker
from jutul_jkernel.supervisor.rendezvous import Rendezvous

IS_WINDOWS = sys.platform == "win32"

# How long a reap waits for Julia's exit once it was killed or closed its connection.
REAP_WAIT = 2.0


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


class ChildProcess:
    """A ``subprocess.Popen`` as the supervisor awaits it: pid, returncode, ``await wait()``.

    Julia is spawned with plain Popen so that it can be spawned before any event loop runs
    (:meth:`JuliaSupervisor.launch`). A thread waits for its exit, as asyncio's own
    ThreadedChildWatcher does for ``create_subprocess_exec``; it starts when the process is
    adopted, on the loop that awaits it.
    """

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid
        loop = asyncio.get_running_loop()
        self._exited: asyncio.Future[int] = loop.create_future()
        threading.Thread(
            target=self._reap, args=(loop,), name=f"reap-julia-{self.pid}", daemon=True
        ).start()

    def _reap(self, loop: asyncio.AbstractEventLoop) -> None:
        code = self._popen.wait()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_set_result, self._exited, code)

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def kill(self) -> None:
        self._popen.kill()  # a no-op once reaped: never signals a reused pid

    def terminate(self) -> None:
        self._popen.terminate()


def _set_result(future: asyncio.Future[int], code: int) -> None:
    if not future.done():
        future.set_result(code)
