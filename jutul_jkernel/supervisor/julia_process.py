"""One connected Julia incarnation: the requests sent to it, its signals, its log, and how it
is stopped. The supervisor makes one :class:`JuliaProcess` per incarnation (a restart makes a
new one) and knows the process only through it.

Stopping is a ladder that ends with nothing of Julia's left: EOF on its socket (the server exits
by itself), SIGTERM, SIGKILL, and a SIGKILL of its process group for the children it left. How
Julia is spawned is in supervisor/spawn.py, what it is started with in
supervisor/launch_settings.py, and how its death is explained in supervisor/post_mortem.py.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections import deque
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from jutul_jkernel.supervisor.child_process import ChildProcess
from jutul_jkernel.supervisor.errors import JuliaDiedError
from jutul_jkernel.supervisor.event_loop_page import EventLoopPage, LoopPolls
from jutul_jkernel.supervisor.pipes import OutputPipes
from jutul_jkernel.supervisor.post_mortem import death_error, keep_leftovers
from jutul_jkernel.supervisor.replies import Replies
from jutul_jkernel.supervisor.spawn import IS_WINDOWS, REAP_WAIT

# Shutdown: after EOF on its socket the server exits by itself; a cell that never yields does not
# see the EOF, so SIGTERM then SIGKILL follow. Together well inside jupyter_client's 2.5 s.
# An idle server exits in ~10 ms; one still compiling its warm-up (the first seconds after a
# start on a loaded machine) takes longer. 1.0 + 0.5 + a kill fit the 2 s budget.
_EXIT_AFTER_EOF_WAIT = 1.0
_EXIT_AFTER_TERM_WAIT = 0.5


@dataclass(frozen=True)
class ThreadActivity:
    """What Julia's main thread is doing, from /proc/<pid>/task/<pid>/ (Linux)."""

    state: str  # the state letter of `stat`: R running or waiting for a CPU, S and D asleep
    cpu_ns: int  # its time on a CPU so far (the first field of `schedstat`)
    wchan: str  # the kernel function it sleeps in ("0" when running or when /proc hides it)


def _read_small(path: str) -> str:
    # os.open/os.read, not pathlib: this runs every millisecond while an INT frame waits
    # (children.py says what pathlib costs).
    fd = os.open(path, os.O_RDONLY)
    try:
        return os.read(fd, 4096).decode("ascii", "replace")
    finally:
        os.close(fd)


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
    loop_page: EventLoopPage | None = None  # its INF frame's loop_page, mapped

    @property
    def running(self) -> bool:
        """Whether it has neither died nor been stopped, and has not exited."""
        return not self.dead and self.proc.returncode is None

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
        returncode = self.proc.returncode
        leftovers = self.post_mortem(quote_log=False)
        return death_error(returncode, reason, leftovers, self.stderr_tail, self.log_path)

    def post_mortem(self, *, quote_log: bool = True) -> str:
        """Collect what Julia wrote to fd 1 and 2 that was not passed on; append it to the log.

        Return the end of its stderr, or (with ``quote_log``) the end of the log if none.
        """
        tail = keep_leftovers(self.pipes, self.log_path, quote_log=quote_log)
        self.pipes = None
        if self.loop_page is not None:
            self.loop_page.close()
            self.loop_page = None
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

    def main_thread_activity(self) -> ThreadActivity | None:
        """What Julia's main thread (thread 1, where the server's tasks and the cell run) is
        doing now (Linux), else None. Read from Julia's own pid as its INF frame gives it: the
        process started may be a launcher (juliaup's) that waits for Julia."""
        pid = self.info.get("pid") or self.proc.pid
        task = f"/proc/{pid}/task/{pid}"
        try:
            stat = _read_small(f"{task}/stat")
            schedstat = _read_small(f"{task}/schedstat")
            wchan = _read_small(f"{task}/wchan")
            return ThreadActivity(
                stat.rsplit(")", 1)[1].split()[0], int(schedstat.split()[0]), wchan.strip()
            )
        except (OSError, IndexError, ValueError):
            return None

    def event_loop_polls(self) -> LoopPolls | None:
        """When its event loop last polled (where its INF frame named a page), else None."""
        return self.loop_page.polls() if self.loop_page is not None else None

    def main_thread_faults(self) -> int | None:
        """Minor page faults of its main thread so far (Linux), else None."""
        pid = self.proc.pid
        try:
            stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
            return int(stat.rsplit(")", 1)[1].split()[7])
        except (OSError, IndexError, ValueError):
            return None
