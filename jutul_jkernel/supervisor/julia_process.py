"""One Julia process: its command line and environment, the spawn, its signals, its log, the
replies it owes, and how it is stopped. The supervisor makes one :class:`JuliaProcess` per
incarnation (a restart makes a new one) and knows the process only through it.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import subprocess
import sys
import threading
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from jutul_jkernel import _resources, settings
from jutul_jkernel.supervisor.errors import (
    JuliaDiedError,
    JuliaStartupError,
    describe_exit,
    read_tail,
)
from jutul_jkernel.supervisor.juliaup import julia_argv
from jutul_jkernel.supervisor.pipes import OutputPipes, make_pipe, marker_prefix, new_marker
from jutul_jkernel.supervisor.rendezvous import Rendezvous

IS_WINDOWS = sys.platform == "win32"

# Shutdown: after EOF on its socket the server exits by itself; a cell that never yields does not
# see the EOF, so SIGTERM then SIGKILL follow. Together well inside jupyter_client's 2.5 s.
# An idle server exits in ~10 ms; one still compiling its warm-up (the first seconds after a
# start on a loaded machine) takes longer. 1.0 + 0.5 + a kill fit the 2 s budget.
_EXIT_AFTER_EOF_WAIT = 1.0
_EXIT_AFTER_TERM_WAIT = 0.5
REAP_WAIT = 2.0
# How much of Julia's stderr, or of its log, a death report quotes.
STDERR_TAIL_BYTES = 2048
_LOG_TAIL_BYTES = 2048


@dataclass(frozen=True)
class LaunchSettings:
    """What decides Julia's command line and environment (an early launch must match)."""

    julia: str
    julia_args: tuple[str, ...]
    threads: int | str | None
    cwd: str | os.PathLike[str] | None
    env: tuple[tuple[str, str], ...]

    def argv(self, address: str) -> list[str]:
        # which() finds the PATH entry and keeps it as it is: juliaup's `julia` is a launcher
        # (often a link to `julialauncher`), which must never become the versioned binary.
        julia = shutil.which(self.julia) or self.julia
        # Julia itself never runs the startup file: an error in it would end server.jl before
        # the handshake. The server runs it in the first cell instead (see environment).
        julia_args, _ = split_startup_file_flag(list(self.julia_args))
        # julia_argv puts a `+channel` first, the one place juliaup's launcher looks for it.
        return julia_argv(
            julia,
            ["--startup-file=no", *julia_args],
            str(_resources.server_script()),
            address,
        )

    def environment(self, token: str) -> dict[str, str]:
        own = dict(self.env)
        env = {**os.environ, **own}
        for key in settings.SUPERVISOR_ONLY:
            env.pop(key, None)
        threads = self.threads
        if threads in (None, "", "auto"):
            # The user's own request wins over our default: a --threads/-t flag among Julia's
            # arguments, or JULIA_NUM_THREADS wherever it was set (the environment Jupyter
            # started in, the kernelspec's env, env=), as IJulia's kernels read it.
            asked = asks_for_threads(self.julia_args) or env.get("JULIA_NUM_THREADS", "") != ""
            threads = None if asked else default_threads()
        if threads not in (None, ""):
            # "N,1" gives the evaluation loop an interactive thread on Julia >= 1.9; Julia 1.5-1.8
            # read the variable with strtol and take N. Being an environment variable, it needs
            # no version probe before the start, and an explicit --threads flag still wins.
            env["JULIA_NUM_THREADS"] = f"{threads},1" if str(threads) != "auto" else "auto"
        env[settings.TOKEN] = token
        _, startup_file = split_startup_file_flag(list(self.julia_args))
        env[settings.STARTUP_FILE] = "yes" if startup_file else "no"
        return env


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


class Replies:
    """The replies Julia owes, by request id: ANS (a query), ACK (an interrupt, a SYN), and
    INF (id 0, the handshake). All fail at once when Julia dies or is stopped."""

    def __init__(self) -> None:
        self._waiting: dict[int, asyncio.Future[Any]] = {}

    def expect(self, rid: int) -> asyncio.Future[Any]:
        """A future for the next reply to ``rid`` (replacing any earlier one of that id)."""
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = waiter
        return waiter

    def arrived(self, rid: int, value: Any) -> None:
        waiter = self._waiting.pop(rid, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(value)

    def forget(self, rid: int, waiter: asyncio.Future[Any] | None = None) -> None:
        """Stop expecting ``rid`` (only if it is still ``waiter``, when given)."""
        if waiter is None or self._waiting.get(rid) is waiter:
            self._waiting.pop(rid, None)

    def fail_all(self, exc: BaseException) -> None:
        waiting, self._waiting = self._waiting, {}
        for waiter in waiting.values():
            if not waiter.done():
                waiter.set_exception(exc)


@dataclass
class JuliaProcess:
    """One incarnation of the Julia process and its connection."""

    proc: ChildProcess
    log_path: Path
    pipes: OutputPipes | None  # Julia's fd 1 and fd 2, read here (POSIX; else OUT frames)
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    reader_task: asyncio.Task[None] | None = None
    info: dict[str, Any] = field(default_factory=dict)  # its INF frame
    replies: Replies = field(default_factory=Replies)
    stderr_tail: deque[bytes] = field(default_factory=lambda: deque(maxlen=64))
    dead: bool = False
    death: JuliaDiedError | None = None
    last_frame_at: float = 0.0  # loop time of the last frame or output read

    async def send(self, data: bytes) -> None:
        if self.dead or self.writer is None:
            raise self.death or JuliaDiedError("Julia is not running")
        self.writer.write(data)
        await self.writer.drain()

    async def ask(self, rid: int, request: bytes, timeout: float) -> Any:
        """Send ``request``, which Julia answers with ANS (or ACK) ``rid``, and return the
        answer; TimeoutError past ``timeout`` seconds."""
        waiter = self.replies.expect(rid)
        try:
            await self.send(request)
            return await asyncio.wait_for(waiter, timeout)
        finally:
            self.replies.forget(rid)

    def interrupt(self) -> None:
        """SIGINT to Julia's process group (Ctrl+Break on Windows), as Ctrl-C in a terminal."""
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if IS_WINDOWS:
                os.kill(self.proc.pid, signal.CTRL_BREAK_EVENT)  # type: ignore[attr-defined]
            else:
                os.killpg(self.proc.pid, signal.SIGINT)

    def signal_group(self, *, kill: bool) -> None:
        """SIGKILL (or SIGTERM) Julia's process group, children included."""
        if IS_WINDOWS:  # no process groups to signal: end Julia itself
            with contextlib.suppress(ProcessLookupError):
                self.proc.kill() if kill else self.proc.terminate()
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self.proc.pid, signal.SIGKILL if kill else signal.SIGTERM)

    async def kill(self) -> None:
        """SIGKILL Julia's whole process group and reap it."""
        self.signal_group(kill=True)
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
            await asyncio.wait_for(self.proc.wait(), REAP_WAIT)

    async def stop(self) -> None:
        """Ask it to exit (EOF), then SIGTERM, then SIGKILL; kill what it left in its group."""
        if self.writer is not None and not self.dead:
            self.writer.close()  # EOF: the server exits by itself
        try:
            await asyncio.wait_for(self.proc.wait(), _EXIT_AFTER_EOF_WAIT)
        except (TimeoutError, asyncio.TimeoutError):
            self.signal_group(kill=False)
            try:
                await asyncio.wait_for(self.proc.wait(), _EXIT_AFTER_TERM_WAIT)
            except (TimeoutError, asyncio.TimeoutError):
                await self.kill()
        self.signal_group(kill=True)  # children it left in its group
        self.post_mortem()
        if self.reader_task is not None:
            self.reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.reader_task

    async def reap_after_death(self, reason: str) -> JuliaDiedError:
        """It went away (``reason``: what the connection saw): reap it, and say how it ended
        and what it wrote to stderr while dying."""
        self.dead = True
        if self.writer is not None:
            self.writer.close()
        try:
            await asyncio.wait_for(self.proc.wait(), REAP_WAIT)
        except (TimeoutError, asyncio.TimeoutError):
            await self.kill()  # it closed the socket but lives on: it is of no use
        how = describe_exit(self.proc.returncode)
        tail = self.post_mortem(quote_log=False)
        if not tail:
            tail = b"".join(self.stderr_tail)[-STDERR_TAIL_BYTES:].decode("utf-8", "replace")
        tail = tail.strip()
        message = f"Julia {how}"
        if self.proc.returncode == 0 or reason != "closed its connection":
            message += f"; it {reason}"
        message += "."
        if tail:
            message += f"\nThe end of its stderr:\n{tail}"
        message += f"\nJulia's log: {self.log_path}"
        return JuliaDiedError(
            message, exit_description=how, stderr_tail=tail, log_path=self.log_path
        )

    def post_mortem(self, *, quote_log: bool = True) -> str:
        """Collect what Julia wrote to fd 1 and 2 that was not passed on; append it to the log.

        Return the end of its stderr, or (with ``quote_log``) the end of the log if none.
        """
        left: dict[str, bytes] = {}
        if self.pipes is not None:
            left = self.pipes.drain()
            self.pipes.close()
            self.pipes = None
        text = left.get("stderr", b"")
        with contextlib.suppress(OSError), open(self.log_path, "ab") as f:
            for data in (left.get("stdout", b""), text):
                f.write(data)
        tail = text[-STDERR_TAIL_BYTES:].decode("utf-8", "replace").strip()
        if not tail and quote_log:
            tail = read_tail(self.log_path, _LOG_TAIL_BYTES)
        return tail

    def append_to_log(self, name: str, data: bytes) -> None:
        """Output read before Julia connected: no cell owns it, and a start-up failure quotes
        it from the log."""
        if name == "stderr":
            self.stderr_tail.append(data)
        with contextlib.suppress(OSError), open(self.log_path, "ab") as f:
            f.write(data)

    def cpu_seconds(self) -> float | None:
        """CPU time it has used so far (user + system), or None if it cannot be read."""
        try:
            times = psutil.Process(self.proc.pid).cpu_times()
        except psutil.Error:
            return None
        return float(times.user + times.system)

    def main_thread_faults(self) -> int | None:
        """Minor page faults of its main thread so far (Linux), else None."""
        pid = self.proc.pid
        try:
            stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
            return int(stat.rsplit(")", 1)[1].split()[7])
        except (OSError, IndexError, ValueError):
            return None


def split_startup_file_flag(julia_args: list[str]) -> tuple[list[str], bool]:
    """Take ``--startup-file=yes|no`` (or ``--startup-file yes|no``) out of Julia's arguments.

    Return the other arguments and whether the startup file should run: yes unless the last
    such flag says no, as with Julia itself. Other values stay in, for Julia to reject.
    """
    rest: list[str] = []
    wanted = True
    i = 0
    while i < len(julia_args):
        arg = julia_args[i]
        value = None
        if arg.startswith("--startup-file="):
            value, step = arg.partition("=")[2], 1
        elif arg == "--startup-file" and i + 1 < len(julia_args):
            value, step = julia_args[i + 1], 2
        if value in ("yes", "no"):
            wanted = value == "yes"
            i += step
            continue
        rest.append(arg)
        i += 1
    return rest, wanted


def asks_for_threads(julia_args: Iterable[str]) -> bool:
    """Whether Julia's arguments set its thread count: ``-t N``, ``-tN``, ``--threads[=]N``."""
    return any(
        a in ("-t", "--threads") or a.startswith("--threads=") or (a.startswith("-t") and a[2:3])
        for a in julia_args
    )


def default_threads() -> int:
    """Physical cores minus one, at least one: the user's compute threads."""
    cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    return max(1, cores - 1)
