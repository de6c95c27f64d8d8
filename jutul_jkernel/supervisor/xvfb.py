"""Headless graphics: a private Xvfb X server per kernel, handed to Julia through ``DISPLAY``.

GL-based plotting (GLMakie) needs an X display even on a server without a screen. With
``JUTUL_JKERNEL_XVFB`` set (``python -m jutul_jkernel.install --xvfb`` writes it into the
kernelspec) the kernel starts its own Xvfb before Julia and gives Julia ``DISPLAY`` and
``XAUTHORITY``. Invariants this module keeps:

- Xvfb never outlives the kernel process that started it: it is that process's child with
  ``PR_SET_PDEATHSIG`` (Linux), so a SIGKILLed kernel, which runs no cleanup, still takes it
  along; an orderly shutdown terminates and reaps it. It runs in a session of its own, so an
  interrupt sent to the kernel's process group never reaches it.
- It picks a free display number itself (``-displayfd``: concurrent kernels never collide) and
  listens on no TCP port. A random cookie in a private directory (``-auth``) keeps other users
  of a shared machine off the display.
- Xvfb is started directly, never through ``xvfb-run``, which would merge Julia's stdout and
  stderr into one stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import ctypes.util
import os
import secrets
import shutil
import signal
import struct
import sys
import tempfile
from pathlib import Path
from typing import Any

from jutul_jkernel import settings
from jutul_jkernel.supervisor.errors import JuliaStartupError, indented, read_tail
from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor

DEFAULT_COMMAND = "Xvfb"
# 24-bit colour: GL contexts (GLMakie's GLFW) need it; Xvfb's default depth is lower on some
# versions. Big enough for a full-HD figure window.
_SCREEN = "1920x1080x24"
# Xvfb is accepting connections ~50-200 ms after exec here; under load (ten kernels starting on
# two cores) it can take seconds. Past this we call it hung.
_READY_TIMEOUT = 30.0
_STOP_WAIT = 2.0
_LOG_TAIL_BYTES = 2048
_PR_SET_PDEATHSIG = 1

_HOW_TO_GET_XVFB = (
    "Install Debian's xvfb package (`apt-get install xvfb`; `make setup` does it in a checkout "
    "of jutul-jkernel), or reinstall the kernel without --xvfb."
)


class XvfbError(JuliaStartupError):
    """The private X display that Julia was configured to get could not be started.

    A :class:`JuliaStartupError`: Julia does not start without the display it was promised, the
    cell says why, and the next cell tries again.
    """


def _xauthority_entry(cookie: bytes) -> bytes:
    """One Xauthority record: MIT-MAGIC-COOKIE-1 for any host and any display number.

    The server reads every record of its ``-auth`` file; clients (libXau) accept the wildcard
    family 0xFFFF with an empty display number for whatever display they open.
    """

    def counted(data: bytes) -> bytes:
        return struct.pack(">H", len(data)) + data

    family_wild = 0xFFFF
    return (
        struct.pack(">H", family_wild)
        + counted(b"")
        + counted(b"")
        + counted(b"MIT-MAGIC-COOKIE-1")
        + counted(cookie)
    )


def _die_with_parent() -> Any:
    """Return a preexec_fn that asks Linux to SIGTERM the child when its parent dies."""
    if not sys.platform.startswith("linux"):
        return None
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6", use_errno=True)
    prctl = libc.prctl
    parent = os.getpid()

    def preexec() -> None:  # runs in the child between fork and exec: nothing that locks
        prctl(_PR_SET_PDEATHSIG, signal.SIGTERM, 0, 0, 0)
        if os.getppid() != parent:  # the parent died before prctl took effect
            os._exit(1)

    return preexec


class Xvfb:
    """One private Xvfb server: :meth:`start` it, read :attr:`env`, :meth:`stop` it."""

    def __init__(self, command: str = DEFAULT_COMMAND, *, screen: str = _SCREEN) -> None:
        self.command = command
        self.screen = screen
        self.display: str | None = None
        self._proc: asyncio.subprocess.Process | None = None
        self._dir: Path | None = None
        self._lock = asyncio.Lock()  # a restart in the background may race the next cell

    @property
    def alive(self) -> bool:
        return self._proc is not None and self._proc.returncode is None

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    @property
    def env(self) -> dict[str, str]:
        """What a client needs to use this display: ``DISPLAY`` and ``XAUTHORITY``."""
        if self.display is None or self._dir is None:
            msg = "Xvfb is not running"
            raise RuntimeError(msg)
        return {"DISPLAY": self.display, "XAUTHORITY": str(self._dir / "Xauthority")}

    async def start(self) -> dict[str, str]:
        """Start Xvfb unless it runs; return :attr:`env`. Raise XvfbError naming what failed."""
        async with self._lock:
            if not self.alive:
                await self._spawn()
            return self.env

    async def _spawn(self) -> None:
        await self.stop()  # a dead one leaves its directory behind
        executable = shutil.which(self.command)
        if executable is None:
            where = "on PATH" if os.sep not in self.command else "there"
            msg = (
                f"Headless graphics are on ({settings.XVFB}={self.command}), but the X server "
                f"{self.command!r} was not found {where}. {_HOW_TO_GET_XVFB}"
            )
            raise XvfbError(msg)
        self._dir = Path(tempfile.mkdtemp(prefix="jutul-jkernel-xvfb-"))  # mode 0700
        auth = self._dir / "Xauthority"
        fd = os.open(auth, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "wb") as f:
            f.write(_xauthority_entry(secrets.token_bytes(16)))
        log_path = self._dir / "xvfb.log"
        ready_read, ready_write = os.pipe()
        argv = [
            executable,
            "-displayfd",
            str(ready_write),
            "-auth",
            str(auth),
            "-nolisten",
            "tcp",
            "-noreset",
            "-screen",
            "0",
            self.screen,
        ]
        try:
            with open(log_path, "wb") as log:
                proc = self._proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=log,
                    pass_fds=(ready_write,),
                    start_new_session=True,
                    preexec_fn=_die_with_parent(),
                )
        except OSError as exc:
            os.close(ready_read)
            msg = f"could not start the X server {executable}: {exc}. {_HOW_TO_GET_XVFB}"
            raise XvfbError(msg) from exc
        finally:
            os.close(ready_write)
        try:
            number = await asyncio.wait_for(self._read_display(ready_read), _READY_TIMEOUT)
        except (TimeoutError, asyncio.TimeoutError):
            await self.stop()
            msg = f"the X server {executable} did not get ready within {_READY_TIMEOUT:g} s"
            raise XvfbError(msg) from None
        finally:
            os.close(ready_read)
        if not number:
            with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                await asyncio.wait_for(proc.wait(), _STOP_WAIT)
            tail = _tail(log_path)
            how = (
                f"exited with status {proc.returncode}"
                if proc.returncode is not None
                else "closed its display pipe"
            )
            await self.stop()
            msg = f"the X server {executable} {how} before reporting a display; it said:\n{tail}"
            raise XvfbError(msg)
        self.display = f":{number}"

    @staticmethod
    async def _read_display(fd: int) -> str:
        """Read the display number Xvfb writes to ``-displayfd`` once it accepts clients."""
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(os.dup(fd), "rb", 0)
        )
        try:
            line = await reader.readline()  # b"" at EOF: Xvfb exited without a display
        finally:
            transport.close()
        return line.decode("ascii", "replace").strip()

    async def stop(self) -> None:
        """Terminate Xvfb (SIGTERM, bounded wait, SIGKILL), reap it, remove its directory."""
        proc, self._proc = self._proc, None
        self.display = None
        if proc is not None and proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), _STOP_WAIT)
            except (TimeoutError, asyncio.TimeoutError):
                with contextlib.suppress(ProcessLookupError):
                    proc.kill()
                with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
                    await asyncio.wait_for(proc.wait(), _STOP_WAIT)
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def kill_now(self) -> None:
        """SIGTERM Xvfb at once, synchronously (signal handlers, atexit); it exits in ms."""
        if self._proc is not None and self._proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self._proc.terminate()
        if self._dir is not None:
            shutil.rmtree(self._dir, ignore_errors=True)


def _tail(path: Path) -> str:
    return indented(read_tail(path, _LOG_TAIL_BYTES))


class HeadlessJuliaSupervisor(JuliaSupervisor):
    """A :class:`JuliaSupervisor` whose Julia starts with a private Xvfb as its display.

    Xvfb starts before each Julia start that finds it not running (so the first cell reports a
    missing Xvfb, and a later cell tries again), and stops with the supervisor.
    """

    def __init__(self, *args: Any, xvfb: Xvfb, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.env = dict(self.env)  # start() adds DISPLAY: never to the caller's dict
        self.xvfb = xvfb

    def launch(self) -> None:
        """Launch nothing early: Julia needs the display, which start() brings up first."""

    async def start(self) -> None:
        """Start Xvfb if needed, then Julia with its ``DISPLAY`` and ``XAUTHORITY``."""
        if not self.alive:
            self.env.update(await self.xvfb.start())
        await super().start()

    async def shutdown(self) -> None:
        """Stop Julia, then its display."""
        try:
            await super().shutdown()
        finally:
            await self.xvfb.stop()

    def kill_now(self) -> None:
        """Kill Julia and its display at once, synchronously."""
        super().kill_now()
        self.xvfb.kill_now()
