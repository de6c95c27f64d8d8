"""A Julia on its way up: spawned (early, or when start() needs it), adopted, and connected
with its handshake checked; and ended if the supervisor stops first.

Until the supervisor holds it as its ``_julia``, a Julia is the starter's, in one of two hands:
``launched`` (spawned by launch() before any event loop runs, or taken from
supervisor/early_launch.py, waiting to be adopted) or
``starting`` (adopted: a JuliaProcess whose connection is being accepted and checked). The
supervisor lets ``starting`` go only once it holds that Julia, so that a shutdown or kill_now
at any moment finds every Julia in one hand or the other, and none outlives the kernel. Each
start writes a log of its own into the log directory (a temporary one unless the caller named
one), with the interrupt claims directory beside it.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import socket
from collections.abc import Callable
from pathlib import Path

from jutul_jkernel import settings
from jutul_jkernel.protocol.wire import Decoder, Frame
from jutul_jkernel.supervisor.child_process import ChildProcess
from jutul_jkernel.supervisor.early_launch import EarlyLaunch
from jutul_jkernel.supervisor.errors import JuliaStartupError
from jutul_jkernel.supervisor.handshake import accept_julia
from jutul_jkernel.supervisor.interrupt_claims import Claims
from jutul_jkernel.supervisor.julia_process import JuliaProcess
from jutul_jkernel.supervisor.launch_settings import LaunchSettings
from jutul_jkernel.supervisor.pipes import OutputPipes
from jutul_jkernel.supervisor.rendezvous import Rendezvous
from jutul_jkernel.supervisor.spawn import Launch, log_file, new_log_dir, new_token, spawn

log = logging.getLogger(__name__)

Piped = Callable[[JuliaProcess, str, bytes], None]  # (Julia, "stdout" | "stderr", bytes)


class JuliaStarter:
    """Spawns Julias and brings each to a checked connection (one supervisor's)."""

    def __init__(self, log_dir: Path | None, claims: Claims) -> None:
        self._log_dir = log_dir
        self._own_log_dir = False
        self._incarnation = 0
        self._claims = claims
        self.launched: Launch | None = None  # spawned by launch(), adopted by adopt()
        # The Julia being started, from its adoption until the supervisor holds it (it sets
        # this back to None): shutdown() and kill_now() end it too, or it outlives the kernel.
        self.starting: JuliaProcess | None = None
        # The socket `starting` is to connect to, until its handshake closes it: kill_now (the
        # kernel's atexit and SIGTERM) removes its directory, since the process ends before the
        # handshake gets to (a kernel shut down while Julia started left it behind).
        self._listener: Rendezvous | None = None

    def launch(self, launch_settings: LaunchSettings) -> None:
        """Spawn Julia now, synchronously (no event loop needed), for adopt() to take."""
        try:
            self.launched = self._spawn(launch_settings)
        except JuliaStartupError as exc:
            log.debug("early launch failed; start() will try again: %s", exc)

    def take_early(self, early: EarlyLaunch) -> bool:
        """Take a Julia spawned before the supervisor existed (supervisor/early_launch.py) as
        if launch() had spawned it, with its log directory and claims directory; False (and
        nothing taken) if this starter already has a log directory or a Julia."""
        if self.launched is not None or self._log_dir is not None or self._incarnation:
            return False
        if early.claims is None:
            log.warning("no interrupt claims directory in %s", early.log_dir)
        elif not self._claims.take(early.claims):
            return False
        self._log_dir, self._own_log_dir, self._incarnation = early.log_dir, True, 1
        self.launched = early.launch
        return True

    def adopt(self, launch_settings: LaunchSettings) -> tuple[JuliaProcess, Launch]:
        """The Julia to start, from now on ``starting``: the launched one if it was launched
        with these settings and still runs, else a new one (on the running loop)."""
        launched, self.launched = self.launched, None
        if launched is not None and (
            launched.settings != launch_settings or launched.popen.poll() is not None
        ):
            # Settings changed since, or it already died: start afresh (and report that one).
            launched.discard()
            launched = None
        if launched is None:
            launched = self._spawn(launch_settings)
        self.starting = JuliaProcess(ChildProcess(launched.popen), launched.log_path, None)
        self._listener = launched.listener
        return self.starting, launched

    async def handshake(
        self, j: JuliaProcess, launched: Launch, timeout: float, piped: Piped
    ) -> tuple[socket.socket, Decoder, list[Frame]]:
        """Read Julia's pipes (to ``piped``) and accept its connection within ``timeout``
        seconds: the socket, its decoder and the frames that came with RDY. A Julia that does
        not connect is killed, and the JuliaStartupError quotes what it wrote."""
        listener, token, log_path = launched.listener, launched.token, launched.log_path
        argv = launched.popen.args
        assert isinstance(argv, list)
        if launched.pipe_fds is not None:
            j.pipes = OutputPipes(
                launched.pipe_fds, launched.marker, lambda name, data: piped(j, name, data)
            )
            j.pipes.start()  # now: Julia may already be writing, and a full pipe would stop it
        try:
            conn, decoder, early = await asyncio.wait_for(
                accept_julia(j, listener, token, launched.settings.julia), timeout
            )
        except (TimeoutError, asyncio.TimeoutError):
            cpu = j.cpu_seconds()
            await j.kill()
            said = j.post_mortem()
            msg = f"Julia ({argv[0]}) did not connect within {timeout:g} s. "
            if said:
                msg += f"Its log is {log_path}:\n{said}"
            else:
                # Nothing to quote: say so, with what tells a stuck Julia from a starved one.
                used = f", having used {cpu:.1f} s of CPU" if cpu is not None else ""
                msg += (
                    f"It wrote nothing before it was stopped{used}; a Julia that is slow to "
                    "start (a loaded machine, a big --sysimage) needs a longer "
                    f"{settings.STARTUP_TIMEOUT}. Its log is {log_path}."
                )
            raise JuliaStartupError(msg) from None
        except BaseException:
            await j.kill()
            j.post_mortem()
            raise
        finally:
            listener.close()
            if self._listener is listener:
                self._listener = None
        if listener.is_tcp:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        return conn, decoder, early

    def stop(self, connected: JuliaProcess | None) -> None:
        """End the Julias not yet connected (shutdown); ``connected`` is the supervisor's."""
        if self.launched is not None:  # launched but never started: nothing to ask, kill it
            self.launched.discard()
            self.launched = None
        starting = self.starting
        if starting is not None and starting is not connected:
            starting.signal_group(kill=True)  # not connected: nothing to ask; start() fails

    def kill_now(self) -> None:
        """SIGKILL the Julias not yet connected at once, synchronously."""
        starting = self.starting
        if starting is not None and starting.proc.returncode is None:
            starting.signal_group(kill=True)
        if self.launched is not None:
            self.launched.kill_group()
            self.launched.listener.close()  # and its socket's directory
        if self._listener is not None:
            self._listener.remove_directory()

    def remove_log_dir(self) -> None:
        """Remove the log directory if it is a temporary one of the starter's."""
        if self._own_log_dir and self._log_dir is not None:
            shutil.rmtree(self._log_dir, ignore_errors=True)

    def _new_log(self) -> Path:
        if self._log_dir is None:
            self._log_dir = new_log_dir()
            self._own_log_dir = True
        self._log_dir.mkdir(parents=True, exist_ok=True)
        self._incarnation += 1
        return log_file(self._log_dir, self._incarnation)

    def _spawn(self, launch_settings: LaunchSettings) -> Launch:
        """Spawn Julia with a listener for it to connect to; no event loop needed."""
        log_path = self._new_log()
        claims = self._claims.make(log_path.parent)
        return spawn(launch_settings, new_token(), log_path, claims)
