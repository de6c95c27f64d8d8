"""Own one Julia process running ``server.jl`` and its connection; know nothing of Jupyter.

The supervisor starts Julia in its own process group, checks the handshake, sends code and
routes what comes back: live output to a callback, one :class:`ExecutionResult` per execution.
Executions run one at a time; :meth:`JuliaSupervisor.interrupt` and
:meth:`JuliaSupervisor.shutdown` never wait behind them. If Julia dies, every waiter fails at
once with :class:`JuliaDiedError` explaining how, and the next execution starts a fresh Julia
and says that state was lost. :meth:`JuliaSupervisor.launch` spawns Julia synchronously, before
any event loop runs, for start() to adopt: the kernel's entry point uses it so that Julia boots
while ipykernel is still being imported.

Usage from plain Python::

    async with JuliaSupervisor() as julia:
        result = await julia.execute("x = 1 + 1", on_output=print_bytes)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import secrets
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import psutil

from . import _resources, children
from .capture import OutputPipes, make_pipe, marker_prefix, new_marker
from .juliaup import julia_argv
from .protocol import Decoder, Frame, FrameKind, ProtocolError, encode, inner_frame
from .rendezvous import Rendezvous

log = logging.getLogger(__name__)

OutputCallback = Callable[[str, bytes], None]
InterruptPath = Literal["unsent", "frame", "sigint", "forced", "restart"]
DisplayCallback = Callable[[dict[str, Any]], None]
InputCallback = Callable[[str, bool], Awaitable[str]]

_IS_WINDOWS = sys.platform == "win32"

# A cold Julia needs ~1 s to connect; a big --sysimage or a slow disk much more.
_STARTUP_TIMEOUT = 60.0
# Julia writes RDY the moment it connects; a connection silent this long is not Julia.
_FIRST_FRAME_WAIT = 5.0

# Interrupt escalation. Julia ACKs an interrupt as soon as it reached the evaluation: the
# listener when it hands an INT frame over, the evaluation when it catches one that came by
# signal (run_cell in eval.jl: the cell's code has unwound). An ACK of the latter kind ends the
# escalation; the cell then ends in its own time (rendering the error can take a second when
# cold), and pressing stop again starts a new escalation.
# An INT frame stops every cell that yields (sleep, I/O, printing) and is ACKed in ~1 ms; a cell
# that computes never lets the server read it, so after this long without an ACK, and without
# any frame from Julia, we send SIGINT, which lands at the next safepoint (~2 ms for allocating
# code). While frames still arrive, the ACK is queued behind them (a cell printing flat out) and
# we keep waiting, up to _INT_ACK_MAX: a SIGINT that reaches Julia while it waits in libuv can
# unwind through a libuv callback, and once left a pipe pump deaf, so that the cell never ended
# (seen in 1 of ~30 print floods through the kernel).
_INT_ACK_WAIT = 0.02
_INT_ACK_MAX = 3.0
# One request, one delivery (issue 21). The INT frame and the SIGINT that follows it are two
# ways to deliver one request, and either alone may be late: the listener reads the frame only
# when the cell yields, perhaps long after the SIGINT (a cell that catches the interrupt and
# prints a report), or just as the silence runs out, so that its ACK and our SIGINT cross. A
# round trip (the listener asks, we answer "deliver" or "drop") only moves the race: the answer
# too is read only when the cell next yields. So the two sides race for the request on an
# atomic primitive both have, mkdir of <claims>/<request> (POSIX mkdir(2), Windows
# CreateDirectoryW; Julia's `mkdir` is uv_fs_mkdir, JuliaLang/julia release-1.10,
# release-1.12 and master base/file.jl): the listener delivers the frame only if it made the
# directory, we send the SIGINT only if we did. A listener that finds it made already answers
# ACK all the same: it runs, so the SIGINT, sent as we claimed, lands at its next safepoint.
# The listener's ACK says only that the INT frame was handed to the cell. Code that catches the
# interrupt can go on, or hang: Pkg's precompile (JuliaLang/julia release-1.12
# base/precompilation.jl, and Pkg release-1.10 src/precompilation.jl) catches it in
# `wait(interrupted_or_done)` and then, with stderr not a TTY, waits in `handle_interrupt` for a
# print task that waits for `first_started`, notified only after that wait returns (audit N14).
# Unless the cell's code unwinds (run_cell's own ACK) or the cell ends within this long, or
# while Julia compiles (a cold run_cell's error path: see _COMPILE_WAIT), the escalation goes
# on to the SIGINT below, which also reaches the child processes in Julia's group, as Ctrl-C in
# a terminal does.
_UNWIND_WAIT = 1.0
# Allocating loops and blocking ccalls ACK a SIGINT within milliseconds (bench: "interrupt"
# rows); past this the code has no safepoint (a float spin) and we send a burst, which makes
# Julia force the throw. Short, so that every shape stops within a second; not shorter, since
# Julia also forces the throw into its compiler, which a cold cell may be in for a while.
_SIGINT_WAIT = 0.5
# Julia defers a SIGINT while it compiles, and a forced throw that lands in its compiler wedges
# or crashes it (seen: interrupting a cold `] add`, 4 of 4 trials lost the session). Compiling
# touches new memory all the time and a loop without safepoints none, so while the main thread
# has taken a page fault within the last _COMPILE_QUIET we wait for the deferred SIGINT instead
# of forcing, up to _COMPILE_WAIT. Where /proc is missing we force as before.
_COMPILE_SAMPLE = 0.1
_COMPILE_QUIET = 0.5  # LLVM's own passes can go a quarter second without a new page
_COMPILE_WAIT = 30.0
_BURST_COUNT = 5
_BURST_GAP = 0.05
# After a forced throw the ACK follows within milliseconds; past this we restart.
_BURST_WAIT = 3.0
# Once a signal was taken, the cell's result follows within seconds (rendering the error is
# the slow part when cold); past this Julia is wedged and restarted. Unless the cell's code
# caught the interrupt (no ACK from run_cell, only the listener's for the claimed request) and
# goes on: it gets the interrupt again, as a new request, as the INT frame's rung does after
# _UNWIND_WAIT; a wedged Julia ends in that request's restart.
_AFTER_SIGNAL_WAIT = 15.0
# Julia writes an output marker and sends MRK right after; reading up to it takes milliseconds
# (paused for IOPub, as long as IOPub needs). Past this, a marker is taken as lost.
_MARK_WAIT = 10.0
# From an interrupt until Julia acknowledges it, output still arriving is dropped beyond this
# much: a flood's megabytes in flight would hold IOPub, and the cell's error, behind them.
_KEPT_IN_FLIGHT = 8 * 1024
# Shutdown: after EOF on its socket the server exits by itself; a cell that never yields does not
# see the EOF, so SIGTERM then SIGKILL follow. Together well inside jupyter_client's 2.5 s.
# An idle server exits in ~10 ms; one still compiling its warm-up (the first seconds after a
# start on a loaded machine) takes longer. 1.0 + 0.5 + a kill fit the 2 s budget.
_EXIT_AFTER_EOF_WAIT = 1.0
_EXIT_AFTER_TERM_WAIT = 0.5
_REAP_WAIT = 2.0
# A cancelled execution is interrupted: the whole escalation above, then a kill, fit in this.
_SETTLE_WAIT = (
    _INT_ACK_MAX
    + _UNWIND_WAIT
    + _COMPILE_WAIT
    + _SIGINT_WAIT
    + _COMPILE_WAIT
    + _BURST_COUNT * _BURST_GAP
    + _BURST_WAIT
    + _AFTER_SIGNAL_WAIT
    + 2 * _REAP_WAIT
)
# How much of Julia's stderr a death report quotes.
_STDERR_TAIL_BYTES = 2048
_LOG_TAIL_BYTES = 2048
_READ_CHUNK_BYTES = 256 * 1024
# Completion, inspection and is_complete answer in milliseconds once compiled; a query waits
# this long when a computing cell keeps Julia from answering.
_QUERY_TIMEOUT = 30.0

_SIGNAL_NOTES = {
    "SIGKILL": "usually the system out-of-memory killer, or someone ran kill -9",
    "SIGSEGV": "a crash inside Julia or a library it called",
    "SIGABRT": "Julia or a library it called aborted",
    "SIGBUS": "a crash inside Julia or a library it called",
    "SIGTERM": "someone asked it to terminate",
    "SIGINT": "an interrupt arrived where Julia could not handle it",
}


class JuliaStartupError(RuntimeError):
    """Julia could not be started or did not complete the handshake."""


class JuliaDiedError(RuntimeError):
    """The Julia process ended while something was waiting on it."""

    def __init__(
        self,
        message: str,
        *,
        exit_description: str = "",
        stderr_tail: str = "",
        log_path: Path | None = None,
    ) -> None:
        super().__init__(message)
        self.exit_description = exit_description
        self.stderr_tail = stderr_tail
        self.log_path = log_path


@dataclass
class ErrorInfo:
    """A Julia exception as Jupyter wants it: type name, message, traceback lines."""

    ename: str
    evalue: str
    traceback: list[str]


@dataclass
class ExecutionResult:
    """The outcome of one :meth:`JuliaSupervisor.execute`."""

    status: Literal["ok", "error", "interrupted"]
    text: str = ""  # REPL text of the value ("" for nothing or a trailing `;`), or the error text
    data: dict[str, Any] | None = None  # MIME bundle when the value shows more than text/plain
    error: ErrorInfo | None = None
    state_kept: bool = True  # False when Julia had to be restarted during this execution
    notice: str | None = None  # something the user should be told (a restart, a forced interrupt)
    # How far the last interrupt escalated before Julia took it: "unsent" (interrupted while it
    # was starting: never ran), "frame" (the INT frame, no signal), "sigint", "forced" (a burst
    # of SIGINTs), "restart"; None if never interrupted.
    interrupt_path: InterruptPath | None = None
    # Jupyter execute_reply payloads the cell asked for (IJulia.load: set_next_input).
    payload: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class _Execution:
    id: int
    on_output: OutputCallback | None
    on_display: DisplayCallback | None
    on_input: InputCallback | None
    future: asyncio.Future[ExecutionResult]
    data: dict[str, Any] | None = None
    error: ErrorInfo | None = None
    payload: list[dict[str, Any]] = field(default_factory=list)
    sigint_sent: bool = False
    forced: bool = False
    killed_for_interrupt: bool = False
    interrupt_path: InterruptPath | None = None
    # From an interrupt request until Julia ACKs it, output beyond _KEPT_IN_FLIGHT is dropped
    # rather than delivered: it was printed before the interrupt, and a cell printing flat out
    # can have megabytes in flight, which IOPub would send before the cell's error.
    discarding: bool = False
    dropped_bytes: int = 0
    kept_in_flight: int = 0  # bytes passed on while an interrupt was on its way
    interrupter: asyncio.Task[None] | None = None
    acked: bool = False  # Julia took the current interrupt; the cell may still go on
    acks: int = 0  # ACK frames of this execution so far (the listener's and run_cell's)
    # Julia's descendants when the execution was sent: an interrupted cell's new ones are
    # stopped when it ends (children.py). None where that cannot be known (Windows).
    children_before: children.Snapshot | None = None
    again: bool = False  # another interrupt was asked for while one was under way
    requests: list[int] = field(default_factory=list)  # its interrupt requests (claims)
    input_tasks: set[asyncio.Task[None]] = field(default_factory=set)


class _ChildProcess:
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


@dataclass
class _Launch:
    """A Julia process spawned but not yet connected (see :meth:`JuliaSupervisor.launch`)."""

    popen: subprocess.Popen[bytes]
    listener: Rendezvous
    token: str
    log_path: Path
    pipe_fds: dict[str, int] | None  # read ends of Julia's fd 1 and fd 2 (POSIX)
    marker: bytes  # the prefix of its output markers (capture.py)
    settings: tuple[Any, ...]

    def discard(self) -> None:
        """Kill the process (and its group), reap it, close what we hold of it."""
        self.listener.close()
        if not _IS_WINDOWS:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(self.popen.pid, signal.SIGKILL)
        with contextlib.suppress(ProcessLookupError):
            self.popen.kill()
        with contextlib.suppress(subprocess.TimeoutExpired):
            self.popen.wait(_REAP_WAIT)
        for fd in (self.pipe_fds or {}).values():
            with contextlib.suppress(OSError):
                os.close(fd)
        self.pipe_fds = None


@dataclass
class _Julia:
    """One incarnation of the Julia process and its connection."""

    proc: _ChildProcess
    log_path: Path
    pipes: OutputPipes | None  # Julia's fd 1 and fd 2, read here (POSIX; else OUT frames)
    reader: asyncio.StreamReader | None = None
    writer: asyncio.StreamWriter | None = None
    reader_task: asyncio.Task[None] | None = None
    info: dict[str, Any] = field(default_factory=dict)
    stderr_tail: deque[bytes] = field(default_factory=lambda: deque(maxlen=64))
    dead: bool = False
    death: JuliaDiedError | None = None
    last_frame_at: float = 0.0  # loop time of the last frame or output read


def _env_seconds(name: str, default: float) -> float:
    value = os.environ.get(name, "")
    if not value:
        return default
    try:
        seconds = float(value)
    except ValueError:
        seconds = -1.0
    if seconds <= 0:
        msg = f"{name}={value!r} is not a positive number of seconds"
        raise ValueError(msg)
    return seconds


def _split_startup_file_flag(julia_args: list[str]) -> tuple[list[str], bool]:
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


def default_threads() -> int:
    """Physical cores minus one, at least one: the user's compute threads."""
    cores = psutil.cpu_count(logical=False) or os.cpu_count() or 1
    return max(1, cores - 1)


def describe_exit(returncode: int | None) -> str:
    """Say in words how a process ended, from its return code."""
    if returncode is None:
        return "is still running"
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        return f"was killed by signal {-returncode}"
    note = _SIGNAL_NOTES.get(name)
    return f"was killed by {name}" + (f" ({note})" if note else "")


class JuliaSupervisor:
    """Start, feed, interrupt, restart and stop one Julia process.

    ``julia`` defaults to ``$JUTUL_JKERNEL_JULIA`` or ``julia`` on PATH; ``julia_args`` are
    extra command-line flags (``--project=...``, ``--sysimage=...``; a ``+channel`` for
    juliaup's launcher goes first on the command line), added to those in
    ``$JUTUL_JKERNEL_JULIA_ARGS``; ``threads`` defaults to ``$JUTUL_JKERNEL_THREADS`` or
    physical cores minus one; ``startup_timeout`` defaults to
    ``$JUTUL_JKERNEL_STARTUP_TIMEOUT`` or 60 s. ``on_stray_output`` receives output printed
    between executions (by background tasks) and ``on_stray_display`` their displays (without
    it, their text/plain goes to ``on_stray_output``); ``backpressure`` is awaited after each
    chunk of Julia's output.
    """

    def __init__(
        self,
        julia: str | None = None,
        julia_args: list[str] | tuple[str, ...] = (),
        *,
        threads: int | str | None = None,
        cwd: str | os.PathLike[str] | None = None,
        env: dict[str, str] | None = None,
        startup_timeout: float | None = None,
        log_dir: str | os.PathLike[str] | None = None,
        on_stray_output: OutputCallback | None = None,
        on_stray_display: DisplayCallback | None = None,
        backpressure: Callable[[], Awaitable[None]] | None = None,
    ) -> None:
        self.julia = julia or os.environ.get("JUTUL_JKERNEL_JULIA") or "julia"
        self.julia_args = [
            *shlex.split(os.environ.get("JUTUL_JKERNEL_JULIA_ARGS", "")),
            *julia_args,
        ]
        self.threads = threads if threads is not None else os.environ.get("JUTUL_JKERNEL_THREADS")
        self.cwd = cwd
        self.env = env or {}
        # A bad setting is reported by start(), as a JuliaStartupError: a kernel then stays up
        # and every cell says what is wrong, where raising here would kill it before kernel_info.
        self._setting_error: str | None = None
        if startup_timeout is not None:
            self.startup_timeout = startup_timeout
        else:
            try:
                self.startup_timeout = _env_seconds(
                    "JUTUL_JKERNEL_STARTUP_TIMEOUT", _STARTUP_TIMEOUT
                )
            except ValueError as exc:
                self._setting_error = f"{exc}: set it to a number of seconds, or unset it"
                self.startup_timeout = _STARTUP_TIMEOUT
        self._log_dir = Path(log_dir) if log_dir else None
        self._own_log_dir = False
        self.on_stray_output = on_stray_output
        self.on_stray_display = on_stray_display
        # Awaited after every chunk read from Julia: a consumer that falls behind makes the
        # reader wait, TCP fills up and Julia's writes block, instead of output piling up here.
        self.backpressure = backpressure
        self._julia: _Julia | None = None
        self._launched: _Launch | None = None  # spawned by launch(), adopted by start()
        # The Julia that start() is waiting on, from its spawn (or adoption) until it is
        # self._julia: shutdown() and kill_now() end it too, or it outlives the kernel.
        self._starting: _Julia | None = None
        self._lock = asyncio.Lock()  # serialises executions
        self._start_lock = asyncio.Lock()
        self._next_id = 0
        self._current: _Execution | None = None
        self._waiters: dict[int, asyncio.Future[Any]] = {}  # ANS / ACK by id
        self._incarnation = 0
        self._lost_state: str | None = None  # notice for the next execution after a death
        self._needs_sync = False
        self._interrupt_pending = False  # interrupt() came while an execution was starting
        self._settling: asyncio.Task[None] | None = None  # see _settle
        # Where the INT frame and the SIGINT race for each interrupt request (see _INT_ACK_MAX);
        # one per supervisor, so request ids (from _new_id) never repeat in it.
        self._claims: Path | None = None
        self._closed = False
        self._background: set[asyncio.Task[Any]] = set()

    # ---- public API ----

    async def __aenter__(self) -> JuliaSupervisor:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    @property
    def shut_down(self) -> bool:
        """Whether shutdown() was called (start() then fails)."""
        return self._closed

    @property
    def alive(self) -> bool:
        """Whether a Julia process is running and connected."""
        j = self._julia
        return j is not None and not j.dead and j.proc.returncode is None

    @property
    def pid(self) -> int | None:
        return self._julia.proc.pid if self._julia else None

    @property
    def julia_version(self) -> str | None:
        return self._julia.info.get("julia_version") if self._julia else None

    @property
    def julia_path(self) -> str | None:
        """The Julia binary that runs, as Julia reports it: never a launcher such as juliaup's."""
        return self._julia.info.get("julia_path") if self._julia else None

    @property
    def log_path(self) -> Path | None:
        """Julia's own stdout/stderr before the server took them over (boot errors)."""
        return self._julia.log_path if self._julia else None

    async def start(self) -> None:
        """Start Julia unless it is running; raise JuliaStartupError if it cannot be."""
        if self._closed:
            msg = "this JuliaSupervisor was shut down; create a new one"
            raise RuntimeError(msg)
        if self._setting_error is not None:
            raise JuliaStartupError(self._setting_error)
        async with self._start_lock:
            if not self.alive:
                await self._spawn()

    async def execute(
        self,
        code: str,
        on_output: OutputCallback | None = None,
        *,
        on_display: DisplayCallback | None = None,
        on_input: InputCallback | None = None,
        name: str | None = None,
    ) -> ExecutionResult:
        """Evaluate ``code`` in Main and return its result.

        ``on_output(stream, data)`` receives live output bytes ("stdout"/"stderr");
        ``on_display(msg)`` receives display_data / update_display_data / clear_output messages
        (default: their text/plain goes to ``on_output``); ``await on_input(prompt, password)``
        answers ``readline()`` (default: readline raises an error in Julia); ``name`` is what
        backtraces call the code (printable ASCII, e.g. ``In[3]``). A named execution is a
        cell as the REPL and IJulia know it: its code goes to Julia's ``In[n]`` and its shown
        value to ``Out[n]`` (``n`` from ``In[n]``, else the execution's id), and the
        pre-execute hooks run; an unnamed one (``user_expressions``) leaves history alone.
        Raises JuliaDiedError if Julia dies meanwhile. Cancelling it (a timeout around it, say)
        interrupts the cell as interrupt() would, and the next execution waits until it ended.
        """
        async with self._lock:
            if self._settling is not None:
                await self._settling  # a cancelled execution is still being interrupted
            await self.start()
            notice, self._lost_state = self._lost_state, None
            if self._needs_sync:
                await self._sync()
            j = self._julia
            assert j is not None and j.writer is not None
            ex = _Execution(
                self._new_id(),
                on_output,
                on_display,
                on_input,
                asyncio.get_running_loop().create_future(),
            )
            self._current = ex
            j.stderr_tail.clear()  # a death report quotes this execution's stderr only
            if not _IS_WINDOWS:
                ex.children_before = children.descendants(j.proc.pid)
            try:
                frame = (
                    encode(FrameKind.EXE, ex.id, payload=code.encode())
                    if name is None
                    else encode(FrameKind.EXN, ex.id, name, payload=code.encode())
                )
                if self._interrupt_pending:
                    # Interrupted before it was sent: it never runs, and nothing needs a signal
                    # (a cold Julia compiling its first cell is where a forced SIGINT hurts).
                    self._interrupt_pending = False
                    ex.interrupt_path = "unsent"
                    self._resolve(ex, "int", "InterruptException")
                else:
                    await self._send(j, frame)
                # Shielded: cancelling this task must not cancel the future, which stays
                # the cell's fate while _settle interrupts it.
                result = await asyncio.shield(ex.future)
                if result.status == "interrupted":
                    await self._stop_children(j, ex)
            except asyncio.CancelledError:
                if self.alive and not ex.future.done():
                    # The caller gave up on the cell (a timeout, a cancelled task), but Julia
                    # still runs it, perhaps blocked in C: it is interrupted as interrupt()
                    # would, and the next execution waits until it has ended, instead of
                    # queueing behind it.
                    self._settling = asyncio.create_task(self._settle(ex))
                raise
            finally:
                if self._settling is None:
                    self._current = None
                    self._finish_execution(ex)
            if notice:
                result.notice = notice if not result.notice else f"{notice}\n{result.notice}"
            return result

    async def _settle(self, ex: _Execution) -> None:
        """Interrupt a cancelled execution and wait (bounded by the escalation, which ends in
        a restart) until it has ended."""
        try:
            if ex.interrupter is None or ex.interrupter.done():
                ex.interrupter = asyncio.create_task(self._escalate(ex))
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(ex.future), _SETTLE_WAIT)
            j = self._julia
            if (
                j is not None
                and ex.future.done()
                and ex.future.exception() is None
                and ex.future.result().status == "interrupted"
            ):
                await self._stop_children(j, ex)
        finally:
            if self._current is ex:
                self._current = None
            self._finish_execution(ex)
            self._settling = None

    async def interrupt(self) -> None:
        """Interrupt the running execution, escalating as needed; return at once.

        The execution's result says how it ended: interrupted with state kept, or (if Julia
        ignored every interrupt) interrupted after a restart, with ``state_kept`` False.
        """
        ex = self._current
        if ex is None and self._lock.locked() and not self.alive:
            # An execution waits for Julia to start (seconds): it is the one the user means, so
            # it is resolved as interrupted instead of sent. A request that arrives within the
            # milliseconds between two executions is not taken for the next one.
            self._interrupt_pending = True
            return
        if ex is None or ex.future.done():
            return
        if ex.interrupter and not ex.interrupter.done():
            if not ex.acked:
                # The escalation under way answers it; should the cell catch that interrupt and
                # go on, this one starts over once Julia has taken it.
                ex.again = True
                return
            ex.interrupter.cancel()  # Julia took the last one and the cell went on: start over
        ex.acked = ex.again = False
        ex.interrupter = asyncio.create_task(self._escalate(ex))

    async def restart(self) -> None:
        """Stop Julia and start a fresh one: all state is lost."""
        async with self._start_lock:
            await self._stop_julia(reason="was restarted")
            self._lost_state = None
            await self._spawn()

    async def shutdown(self) -> None:
        """Stop Julia (ask, wait, SIGTERM, SIGKILL, reap) and release everything."""
        self._closed = True
        launched, self._launched = self._launched, None
        if launched is not None:  # launched but never started: nothing to ask, kill it
            launched.discard()
        starting = self._starting
        if starting is not None and starting is not self._julia:
            self._signal_group(starting, kill=True)  # not connected: nothing to ask; start() fails
        await self._stop_julia(reason="was shut down")
        for task in list(self._background):
            task.cancel()
        self._remove_claims()
        if self._own_log_dir and self._log_dir is not None:
            shutil.rmtree(self._log_dir, ignore_errors=True)

    def kill_now(self) -> None:
        """SIGKILL Julia's process group at once, synchronously (signal handlers, atexit)."""
        for j in (self._julia, self._starting):
            if j is not None and j.proc.returncode is None:
                self._signal_group(j, kill=True)
        if self._launched is not None:
            if not _IS_WINDOWS:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(self._launched.popen.pid, signal.SIGKILL)
            self._launched.listener.close()  # and its socket's directory
        self._remove_claims()

    async def complete(self, code: str, cursor: int) -> dict[str, Any]:
        """REPL completions at ``cursor`` (code points): matches, cursor_start, cursor_end."""
        return await self._query("complete", code, cursor)

    async def inspect(self, code: str, cursor: int) -> dict[str, Any]:
        """The docstring of the name at ``cursor``, as ``?name`` shows it."""
        return await self._query("inspect", code, cursor)

    async def is_complete(self, code: str) -> dict[str, Any]:
        """Whether ``code`` is complete, incomplete (with an indent) or invalid."""
        return await self._query("is_complete", code, 0)

    # ---- start-up ----

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _argv(self, address: str) -> list[str]:
        # which() finds the PATH entry and keeps it as it is: juliaup's `julia` is a launcher
        # (often a link to `julialauncher`), which must never become the versioned binary.
        julia = shutil.which(self.julia) or self.julia
        # Julia itself never runs the startup file: an error in it would end server.jl before
        # the handshake. The server runs it in the first cell instead (see _child_env).
        julia_args, _ = _split_startup_file_flag(self.julia_args)
        # julia_argv puts a `+channel` first, the one place juliaup's launcher looks for it.
        return julia_argv(
            julia,
            ["--startup-file=no", *julia_args],
            str(_resources.server_script()),
            address,
        )

    def _child_env(self, token: str) -> dict[str, str]:
        env = {**os.environ, **self.env}
        # The supervisor's own settings are not the user's business inside Julia.
        for key in (
            "JUTUL_JKERNEL_JULIA",
            "JUTUL_JKERNEL_JULIA_ARGS",
            "JUTUL_JKERNEL_THREADS",
            "JUTUL_JKERNEL_STARTUP_TIMEOUT",
        ):
            env.pop(key, None)
        threads = self.threads
        if threads in (None, "", "auto") and "JULIA_NUM_THREADS" not in self.env:
            threads = default_threads()
        if threads not in (None, ""):
            # "N,1" gives the evaluation loop an interactive thread on Julia >= 1.9; Julia 1.5-1.8
            # read the variable with strtol and take N. Being an environment variable, it needs
            # no version probe before the start, and an explicit --threads flag still wins.
            env["JULIA_NUM_THREADS"] = f"{threads},1" if str(threads) != "auto" else "auto"
        env["JUTUL_JKERNEL_TOKEN"] = token
        _, startup_file = _split_startup_file_flag(self.julia_args)
        env["JUTUL_JKERNEL_STARTUP_FILE"] = "yes" if startup_file else "no"
        return env

    def _new_log(self) -> Path:
        if self._log_dir is None:
            self._log_dir = Path(tempfile.mkdtemp(prefix="jutul-jkernel-"))
            self._own_log_dir = True
        self._log_dir.mkdir(parents=True, exist_ok=True)
        self._incarnation += 1
        return self._log_dir / f"julia-{os.getpid()}-{self._incarnation}.log"

    def _launch(self) -> _Launch:
        """Spawn Julia with a listener for it to connect to; no event loop needed."""
        token = secrets.token_hex(16)
        log_path = self._new_log()
        try:
            listener = Rendezvous()
        except OSError as exc:
            msg = f"could not open a socket for Julia to connect to: {exc}"
            raise JuliaStartupError(msg) from exc
        argv = self._argv(listener.address)
        fd = os.open(log_path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        env = self._child_env(token)
        claims = self._claims_dir()
        if claims is not None:
            env["JUTUL_JKERNEL_CLAIMS"] = str(claims)
        kwargs: dict[str, Any] = {}
        pipe_fds: dict[str, int] | None = None
        ours: list[int] = []  # write ends, closed here once Julia has them
        err_write = fd
        marker = new_marker()
        if _IS_WINDOWS:
            # No pass_fds: Julia redirects its output in-process and sends it as OUT frames.
            kwargs["creationflags"] = 0x00000200  # CREATE_NEW_PROCESS_GROUP: Ctrl+Break target
        else:
            kwargs["start_new_session"] = True  # our signals reach Julia, never our own group
            # fd 2 is a pipe from the start (what Julia writes while booting or dying is read
            # here); fd 1 stays the log until the server moves it onto the other pipe, so its
            # start-up messages stay in the log. See capture.py for why we read them, not Julia.
            out_read, out_write = make_pipe()
            err_read, err_write = make_pipe()
            pipe_fds = {"stdout": out_read, "stderr": err_read}
            ours = [out_write, err_write]
            kwargs["pass_fds"] = (out_write,)
            env["JUTUL_JKERNEL_STDOUT_FD"] = str(out_write)
            env["JUTUL_JKERNEL_MARK"] = marker
        try:
            popen = subprocess.Popen(
                argv,
                stdin=subprocess.DEVNULL,
                stdout=fd,
                stderr=err_write,
                cwd=self.cwd,
                env=env,
                **kwargs,
            )
        except OSError as exc:
            listener.close()
            for read_end in (pipe_fds or {}).values():
                os.close(read_end)
            msg = (
                f"could not start Julia with {argv[0]!r}: {exc}. Install Julia (juliaup, or "
                "`make setup` in a checkout) or point JUTUL_JKERNEL_JULIA at the executable."
            )
            raise JuliaStartupError(msg) from exc
        finally:
            os.close(fd)
            for write_end in ours:
                os.close(write_end)
        return _Launch(
            popen, listener, token, log_path, pipe_fds, marker_prefix(marker), self._settings()
        )

    def _claims_dir(self) -> Path | None:
        """The claims directory, made beside the logs at the first start; None if it cannot be
        (both sides then deliver as they can, as before claims: see _INT_ACK_MAX)."""
        if self._claims is None and self._log_dir is not None:
            try:
                # Absolute: Julia runs in another working directory (cwd) than a relative
                # log directory is relative to.
                made = tempfile.mkdtemp(prefix="claims-", dir=self._log_dir)
                self._claims = Path(made).absolute()
            except OSError as exc:
                log.warning("no interrupt claims directory in %s: %s", self._log_dir, exc)
        return self._claims

    def _remove_claims(self) -> None:
        claims, self._claims = self._claims, None
        if claims is not None:
            shutil.rmtree(claims, ignore_errors=True)

    def _settings(self) -> tuple[Any, ...]:
        """What decides Julia's command line and environment (an early launch must match)."""
        return (
            self.julia,
            tuple(self.julia_args),
            self.threads,
            self.cwd,
            tuple(sorted(self.env.items())),
        )

    def launch(self) -> None:
        """Spawn Julia now, synchronously, without waiting for it; start() then adopts it.

        A kernel calls this before its slow imports, so that Julia boots meanwhile. Nothing
        is sent to this Julia before start() has checked its handshake; if start() never
        comes, Julia exits when this process does (its socket closes, and it polls its parent).
        """
        if self._closed or self.alive or self._launched is not None:
            return
        if self._setting_error is not None:
            return  # start() reports it
        try:
            self._launched = self._launch()
        except JuliaStartupError as exc:
            log.debug("early launch failed; start() will try again: %s", exc)

    async def _spawn(self) -> None:
        launched, self._launched = self._launched, None
        if launched is not None and (
            launched.settings != self._settings() or launched.popen.poll() is not None
        ):
            # Settings changed since, or it already died: start afresh (and report that one).
            launched.discard()
            launched = None
        if launched is None:
            launched = self._launch()
        proc = _ChildProcess(launched.popen)
        j = self._starting = _Julia(proc, launched.log_path, None)
        try:
            await self._connect(j, launched)
        except JuliaStartupError:
            if self._closed:  # shutdown() ended it: not a failure of Julia's to report
                msg = "the supervisor was shut down while Julia was starting"
                raise JuliaStartupError(msg) from None
            raise
        finally:
            self._starting = None
        # server.jl says in the log why it loaded from source (no cache yet, stale, unwritable).
        loaded = "its compile cache" if j.info.get("loaded_from") == "cache" else "source"
        log.info(
            "Julia %s started (%s, pid %s, JKernel from %s, log %s)",
            self.julia_version,
            self.julia_path,
            proc.pid,
            loaded,
            j.log_path,
        )

    async def _connect(self, j: _Julia, launched: _Launch) -> None:
        """Accept Julia's connection and wait for its INF frame; then it is self._julia."""
        listener, token, log_path = launched.listener, launched.token, launched.log_path
        argv = launched.popen.args
        assert isinstance(argv, list)
        proc = j.proc
        if launched.pipe_fds is not None:
            j.pipes = OutputPipes(
                launched.pipe_fds, launched.marker, lambda name, data: self._piped(j, name, data)
            )
            j.pipes.start()  # now: Julia may already be writing, and a full pipe would stop it
        try:
            conn, decoder, early = await asyncio.wait_for(
                self._accept(j, listener, token), self.startup_timeout
            )
        except (TimeoutError, asyncio.TimeoutError):
            cpu = _cpu_seconds(proc.pid)
            await self._kill(j)
            said = self._post_mortem(j)
            msg = f"Julia ({argv[0]}) did not connect within {self.startup_timeout:g} s. "
            if said:
                msg += f"Its log is {log_path}:\n{said}"
            else:
                # Nothing to quote: say so, with what tells a stuck Julia from a starved one.
                used = f", having used {cpu:.1f} s of CPU" if cpu is not None else ""
                msg += (
                    f"It wrote nothing before it was stopped{used}; a Julia that is slow to "
                    "start (a loaded machine, a big --sysimage) needs a longer "
                    f"JUTUL_JKERNEL_STARTUP_TIMEOUT. Its log is {log_path}."
                )
            raise JuliaStartupError(msg) from None
        except BaseException:
            await self._kill(j)
            self._post_mortem(j)
            raise
        finally:
            listener.close()
        if listener.is_tcp:
            conn.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        j.reader, j.writer = await asyncio.open_connection(sock=conn, limit=_READ_CHUNK_BYTES)
        self._julia = j
        self._needs_sync = False  # no SIGINT of ours is in flight to a new Julia
        info_waiter = asyncio.get_running_loop().create_future()
        self._waiters[0] = info_waiter
        j.reader_task = asyncio.create_task(self._read_loop(j, decoder, early))
        try:
            await asyncio.wait_for(info_waiter, self.startup_timeout)
        except (TimeoutError, asyncio.TimeoutError):
            await self._stop_julia(reason="did not describe itself")
            msg = f"Julia connected but sent no INF frame; its log is {log_path}"
            raise JuliaStartupError(msg) from None
        except JuliaDiedError as exc:
            raise JuliaStartupError(str(exc)) from None

    async def _accept(
        self, j: _Julia, listener: Rendezvous, token: str
    ) -> tuple[socket.socket, Decoder, list[Frame]]:
        """Accept connections until one opens with RDY and our token."""
        loop = asyncio.get_running_loop()
        exited = asyncio.ensure_future(j.proc.wait())
        pending: asyncio.Future[tuple[socket.socket, Any]] | None = None
        try:
            while True:
                pending = asyncio.ensure_future(loop.sock_accept(listener.socket))
                await asyncio.wait({pending, exited}, return_when=asyncio.FIRST_COMPLETED)
                if not pending.done():
                    said = self._post_mortem(j) or "(it wrote nothing)"
                    msg = (
                        f"Julia ({self.julia}) {describe_exit(j.proc.returncode)} before "
                        f"connecting. Its log is {j.log_path}:\n{said}"
                    )
                    raise JuliaStartupError(msg)
                conn, peer = pending.result()
                peer = listener.describe(peer)
                pending = None
                decoder = Decoder()
                keep = False
                try:
                    # Julia sends RDY as soon as it connects; a silent peer must not hold the
                    # only door open while the real Julia waits behind it.
                    first, rest = await asyncio.wait_for(
                        self._first_frame(conn, decoder), _FIRST_FRAME_WAIT
                    )
                    if first.kind is FrameKind.RDY and secrets.compare_digest(first.args[0], token):
                        keep = True
                        return conn, decoder, rest
                    log.warning(
                        "refused a connection from %s: its first frame was not RDY with the "
                        "right token",
                        peer,
                    )
                except (ProtocolError, ConnectionError, TimeoutError, asyncio.TimeoutError) as exc:
                    log.warning("refused a connection from %s: %r", peer, exc)
                finally:
                    if not keep:
                        conn.close()
        finally:
            exited.cancel()
            if pending is not None and not pending.cancel() and pending.exception() is None:
                pending.result()[0].close()  # accepted just as we were cancelled: unused

    @staticmethod
    async def _first_frame(conn: socket.socket, decoder: Decoder) -> tuple[Frame, list[Frame]]:
        """Read until the first frame is complete; return it and any frames that followed."""
        loop = asyncio.get_running_loop()
        conn.setblocking(False)
        while True:
            data = await loop.sock_recv(conn, 4096)
            if not data:
                msg = "connection closed before its first frame"
                raise ConnectionError(msg)
            frames = decoder.feed(data)
            if frames:
                return frames[0], frames[1:]

    # ---- the connection ----

    async def _send(self, j: _Julia, data: bytes) -> None:
        if j.dead or j.writer is None:
            raise j.death or JuliaDiedError("Julia is not running")
        j.writer.write(data)
        await j.writer.drain()

    async def _read_loop(self, j: _Julia, decoder: Decoder, early: list[Frame]) -> None:
        assert j.reader is not None
        reason = "closed its connection"
        try:
            for frame in early:  # arrived with the handshake
                await self._handle(j, frame)
            while True:
                data = await j.reader.read(_READ_CHUNK_BYTES)
                if not data:
                    decoder.check_eof()
                    break
                frames = decoder.feed(data)
                if frames:
                    j.last_frame_at = asyncio.get_running_loop().time()
                for frame in frames:
                    await self._handle(j, frame)
                ex = self._current
                if self.backpressure is not None and not (ex is not None and ex.discarding):
                    await self.backpressure()
        except ProtocolError as exc:
            reason = f"sent a malformed frame ({exc})"
            log.error("protocol error from Julia: %s", exc)
        except ConnectionError as exc:
            reason = f"dropped its connection ({exc})"
        except asyncio.CancelledError:
            return
        except Exception as exc:  # a frame we could not handle: same as malformed, never a hang
            reason = f"sent a frame the supervisor could not handle ({exc!r})"
            log.exception("handling a frame from Julia failed")
        await self._on_death(j, reason)

    def _output(self, j: _Julia, name: str, data: bytes) -> None:
        """Bytes Julia's process wrote to fd 1 or fd 2: to the running cell, or stray."""
        if name == "stderr":
            j.stderr_tail.append(data)
        ex = self._current
        if ex is not None and ex.discarding:
            # The first few KiB still show (the last lines a cell printed before it was
            # stopped); the rest of a flood in flight is dropped, and the result says so.
            room = max(0, _KEPT_IN_FLIGHT - ex.kept_in_flight)
            if room and ex.on_output is not None:
                ex.kept_in_flight += min(room, len(data))
                ex.on_output(name, data[:room])
            ex.dropped_bytes += max(0, len(data) - room)
        elif ex is not None and ex.on_output is not None:
            ex.on_output(name, data)
        elif ex is None and self.on_stray_output is not None:
            self.on_stray_output(name, data)

    def _piped(self, j: _Julia, name: str, data: bytes) -> None:
        """Output read from the pipes; pause them while the consumer catches up."""
        if self._julia is not j:
            # Still starting (or already replaced): no cell owns this, and a start-up failure
            # quotes it from the log.
            if name == "stderr":
                j.stderr_tail.append(data)
            with contextlib.suppress(OSError), open(j.log_path, "ab") as f:
                f.write(data)
            return
        # Julia is still sending: the escalation waits for its ACK instead of signalling.
        j.last_frame_at = asyncio.get_running_loop().time()
        self._output(j, name, data)
        ex = self._current
        pipes = j.pipes
        if (
            self.backpressure is None
            or pipes is None
            or pipes.paused
            or (ex is not None and ex.discarding)
        ):
            return
        pipes.pause()
        backpressure = self.backpressure

        async def catch_up() -> None:
            try:
                await backpressure()
            finally:
                pipes.resume()

        task = asyncio.create_task(catch_up())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _handle(self, j: _Julia, frame: Frame) -> None:
        if frame.kind is FrameKind.MRK:
            await self._ordered(j, frame)
        else:
            self._dispatch(j, frame)

    async def _ordered(self, j: _Julia, frame: Frame) -> None:
        """MRK n: handle the frame it carries once fd 1 and fd 2 were read up to marker n."""
        n = int(frame.args[0])
        inner = inner_frame(frame)
        if j.pipes is not None:
            if not await j.pipes.passed(n, _MARK_WAIT):
                log.warning("output marker %d did not arrive within %g s; going on", n, _MARK_WAIT)
                j.pipes.skip(n)
        if inner is not None:
            self._dispatch(j, inner)
        if j.pipes is not None:
            j.pipes.release(n)

    def _dispatch(self, j: _Julia, frame: Frame) -> None:
        kind, args = frame.kind, frame.args
        ex = self._current
        if kind is FrameKind.OUT:
            self._output(j, args[0], frame.payload)
            return
        if kind is FrameKind.MRK:
            raise ProtocolError("an MRK frame outside the read loop")
        if kind is FrameKind.INF:
            j.info = _json(frame)
            waiter = self._waiters.pop(0, None)
            if waiter is not None and not waiter.done():
                waiter.set_result(None)
            return
        if kind in (FrameKind.ANS, FrameKind.ACK):
            if ex is not None and int(args[0]) == ex.id:
                ex.discarding = False  # what follows was written after the interrupt
                ex.acks += kind is FrameKind.ACK
            waiter = self._waiters.pop(int(args[0]), None)
            if waiter is not None and not waiter.done():
                waiter.set_result(_json(frame) if kind is FrameKind.ANS else None)
            return
        if kind is FrameKind.RDY:
            raise ProtocolError("a second RDY frame")
        if ex is None and kind in (FrameKind.DSP, FrameKind.CLR):
            # A task that outlived its cell displays where its println goes: the last cell.
            shown = _display_msg(frame)
            if self.on_stray_display is not None:
                self.on_stray_display(shown)
            elif self.on_stray_output is not None and shown["type"] != "clear_output":
                text = shown["data"].get("text/plain", "")
                self.on_stray_output("stdout", (text + "\n").encode())
            return
        if ex is None or int(args[0]) != ex.id:
            log.debug("dropped a %s frame for execution %s: not running", kind.name, args[0])
            return
        if kind in (FrameKind.DSP, FrameKind.CLR):
            self._display(ex, _display_msg(frame))
        elif kind is FrameKind.PAY:
            item = _json(frame)
            if not isinstance(item.get("source"), str):
                raise ProtocolError(f"PAY frame without a source: {frame.payload[:80]!r}")
            ex.payload.append(item)
        elif kind is FrameKind.VAL:
            ex.data = _bundle_of(frame, _json(frame).get("data"))
        elif kind is FrameKind.ERR:
            err = _json(frame)
            ename, evalue, traceback = (err.get(k) for k in ("ename", "evalue", "traceback"))
            if not (
                isinstance(ename, str)
                and isinstance(evalue, str)
                and isinstance(traceback, list)
                and all(isinstance(line, str) for line in traceback)
            ):
                raise ProtocolError(f"ERR frame of the wrong shape: {frame.payload[:80]!r}")
            ex.error = ErrorInfo(ename, evalue, traceback)
        elif kind is FrameKind.INP:
            task = asyncio.create_task(self._answer_input(j, ex, frame))
            ex.input_tasks.add(task)
            task.add_done_callback(ex.input_tasks.discard)
        elif kind is FrameKind.RES:
            self._resolve(ex, args[1], frame.payload.decode("utf-8", "replace"))

    @staticmethod
    def _display(ex: _Execution, msg: dict[str, Any]) -> None:
        if ex.on_display is not None:
            ex.on_display(msg)
        elif ex.on_output is not None and msg["type"] != "clear_output":
            text = msg["data"].get("text/plain", "")
            ex.on_output("stdout", (text + "\n").encode())

    def _resolve(self, ex: _Execution, status: str, text: str) -> None:
        if ex.future.done():
            return
        ex.discarding = False
        result = ExecutionResult(
            status="ok" if status == "ok" else "error" if status == "err" else "interrupted",
            text=text,
            data=ex.data,
            error=ex.error,
            interrupt_path=ex.interrupt_path,
            payload=ex.payload,
        )
        notices = []
        if result.status == "interrupted" and ex.forced:
            notices.append(
                "The interrupt had to be forced (the code was not at a safepoint); "
                "Julia's state may be inconsistent. Restart if anything misbehaves."
            )
        if ex.dropped_bytes:
            notices.append(
                f"Output cut short: {ex.dropped_bytes} bytes printed before the interrupt "
                "reached Julia were dropped, so that the interrupt did not wait for them."
            )
        result.notice = "\n".join(notices) or None
        ex.future.set_result(result)

    async def _answer_input(self, j: _Julia, ex: _Execution, frame: Frame) -> None:
        prompt = frame.payload.decode("utf-8", "replace")
        if ex.on_input is None:
            reply = encode(
                FrameKind.NIN,
                ex.id,
                payload=b"stdin is not available: this frontend does not take input",
            )
        else:
            try:
                line = await ex.on_input(prompt, frame.args[1] == "1")
                reply = encode(FrameKind.TXT, ex.id, payload=line.encode())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the frontend's refusal becomes Julia's error
                reply = encode(FrameKind.NIN, ex.id, payload=f"no input: {exc}".encode())
        with contextlib.suppress(ConnectionError, JuliaDiedError):
            await self._send(j, reply)

    async def _query(self, op: str, code: str, cursor: int) -> dict[str, Any]:
        await self.start()
        j = self._julia
        assert j is not None
        qid = self._new_id()
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters[qid] = waiter
        try:
            await self._send(
                j, encode(FrameKind.QRY, qid, op, max(0, cursor), payload=code.encode())
            )
            try:
                result: dict[str, Any] = await asyncio.wait_for(waiter, _QUERY_TIMEOUT)
            except (TimeoutError, asyncio.TimeoutError):
                msg = (
                    f"Julia did not answer a {op} query within {_QUERY_TIMEOUT:g} s "
                    "(a running cell that computes without yielding keeps it busy)"
                )
                raise TimeoutError(msg) from None
            return result
        finally:
            self._waiters.pop(qid, None)

    async def _sync(self) -> None:
        """Round-trip a SYN so that any SIGINT still in flight lands before the next cell."""
        j = self._julia
        assert j is not None
        sid = self._new_id()
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters[sid] = waiter
        try:
            await self._send(j, encode(FrameKind.SYN, sid))
            await asyncio.wait_for(waiter, 5.0)
        except (TimeoutError, asyncio.TimeoutError):
            log.warning("Julia did not answer a SYN within 5 s")
        finally:
            self._waiters.pop(sid, None)
        self._needs_sync = False

    def _finish_execution(self, ex: _Execution) -> None:
        if ex.interrupter is not None and not ex.interrupter.done():
            ex.interrupter.cancel()
        for task in list(ex.input_tasks):
            task.cancel()
        if ex.sigint_sent and not ex.killed_for_interrupt:
            self._needs_sync = True
        # Julia claims only for the running evaluation (or one not started): this one has
        # ended, so its claims are settled.
        for request in ex.requests:
            if self._claims is not None:
                with contextlib.suppress(OSError):
                    (self._claims / str(request)).rmdir()

    # ---- interrupts ----

    async def _escalate(self, ex: _Execution) -> None:
        """INT frame, SIGINT, a burst of SIGINTs, a restart: each step only until Julia ACKs."""
        j = self._julia
        if j is None or j.dead:
            return
        ack: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters[ex.id] = ack
        ex.discarding = True
        if j.pipes is not None:
            j.pipes.resume()  # an interrupt never waits for output to drain: it is dropped now
        try:
            ex.interrupt_path = "frame"
            acks = ex.acks
            request = self._new_id()
            ex.requests.append(request)
            await self._send(j, encode(FrameKind.INT, ex.id, request))
            handed = await self._acked_before_silence(j, ex, ack)
            if not handed and not self._claim(request):
                # The listener claimed it as the silence ran out: the frame delivers it, and
                # its ACK is on the way.
                await _taken(ex, ack, _INT_ACK_MAX)
                handed = True
            if handed:
                # Handed over; the cell's own ACK follows the listener's once its code unwound.
                # Cold, unwinding means compiling run_cell's error path: wait while it compiles.
                ack = self._next_ack(ex)
                faults = _main_thread_faults(j.proc.pid)
                if (
                    ex.acks >= acks + 2
                    or await _taken(ex, ack, _UNWIND_WAIT)
                    or await _taken_while_compiling(j, ex, ack, faults)
                ):
                    self._start_over_if_asked_again(ex)
                    return
                log.info("execution %s goes on after its interrupt; interrupting again", ex.id)
            ex.interrupt_path = "sigint"
            faults = _main_thread_faults(j.proc.pid)
            log.debug("execution %s: no ACK of the INT frame; sending SIGINT", ex.id)
            self._signal(j)
            ex.sigint_sent = True
            claimed, acks = not handed, ex.acks  # the SIGINT delivers this request
            taken = await _taken(ex, ack, _SIGINT_WAIT)
            if not taken:
                taken = await _taken_while_compiling(j, ex, ack, faults)
            if not taken:
                log.warning("execution %s ignored SIGINT; forcing the interrupt", ex.id)
                ex.interrupt_path = "forced"
                ex.forced = True
                for _ in range(_BURST_COUNT):
                    self._signal(j)
                    if taken := await _taken(ex, ack, _BURST_GAP):
                        break
                taken = taken or await _taken(ex, ack, _BURST_WAIT)
            # A signal can land anywhere, even in a libuv callback, and leave the server unable
            # to finish the cell (seen twice in 120 interrupts under load). Taken, the cell ends
            # in seconds; past _AFTER_SIGNAL_WAIT a restart beats a session that never answers.
            # A cell whose own code caught the interrupt may go on meanwhile, and a new
            # interrupt then starts over (see interrupt()).
            if taken:
                log.debug("execution %s: Julia took the interrupt (%s)", ex.id, ex.interrupt_path)
                ex.acked = True
                if self._start_over_if_asked_again(ex) or await _finished(ex, _AFTER_SIGNAL_WAIT):
                    return
                if claimed and not ex.forced and ex.acks < acks + 2:
                    log.info("execution %s goes on after its interrupt; asking again", ex.id)
                    ex.acked = ex.again = False
                    ex.interrupter = asyncio.create_task(self._escalate(ex))
                    return
            log.warning("execution %s survived a forced interrupt; restarting Julia", ex.id)
            ex.interrupt_path = "restart"
            ex.killed_for_interrupt = True
            await self._kill(j)
        except (ConnectionError, JuliaDiedError):
            return
        finally:
            # A late ACK finds no waiter and is dropped; a death finds no orphaned future. (A
            # later escalation of the same execution has its own waiter under the same key.)
            if self._waiters.get(ex.id) is ack:
                del self._waiters[ex.id]
            if ack.done() and not ack.cancelled():
                ack.exception()  # the death that woke it is the execution's to report

    def _next_ack(self, ex: _Execution) -> asyncio.Future[Any]:
        """Wait anew for an ACK of ``ex``: the next rung's, or run_cell's after the listener's."""
        ack: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiters[ex.id] = ack
        return ack

    async def _stop_children(self, j: _Julia, ex: _Execution) -> None:
        """Stop the processes an interrupted cell started and left running, and say so.

        Interrupted, the cell's code has unwound, but what it started runs on: a `run` that
        an INT frame interrupted leaves its process, and Pkg's precompile workers (`julia`
        processes that Base.compilecache starts with `open(pipeline(...))`, JuliaLang/julia
        release-1.10, release-1.12 and master base/loading.jl) go on compiling, and their
        tasks print into later cells. A restart already killed Julia's whole group.
        """
        if ex.children_before is None or ex.killed_for_interrupt or j.dead:
            return
        left = children.started_since(j.proc.pid, ex.children_before)
        if not left:
            return
        stopped = await asyncio.to_thread(children.stop, left)
        if stopped and ex.on_output is not None:
            n = len(stopped)
            line = (
                f"jutul-jkernel: stopped {n} process{'es' if n > 1 else ''} the cell started: "
                f"{', '.join(stopped)}\n"
            )
            ex.on_output("stderr", line.encode())
        log.info("execution %s: stopped %s", ex.id, ", ".join(stopped))

    def _start_over_if_asked_again(self, ex: _Execution) -> bool:
        """Julia took the interrupt; if another was asked for meanwhile and the cell goes on
        (its code caught the first), escalate anew for that one. Whether it did."""
        if not ex.again or ex.future.done():
            return False
        ex.acked = ex.again = False
        ex.interrupter = asyncio.create_task(self._escalate(ex))
        return True

    def _claim(self, request: int) -> bool:
        """Claim interrupt ``request`` for a SIGINT; False if Julia's listener claimed it for
        the INT frame (see _INT_ACK_MAX). Signal at once after a True: no await between."""
        if self._claims is None:
            return True
        try:
            (self._claims / str(request)).mkdir()
        except FileExistsError:
            return False
        except OSError as exc:
            log.warning("could not claim interrupt %s (%s); signalling anyway", request, exc)
        return True

    @staticmethod
    async def _acked_before_silence(j: _Julia, ex: _Execution, ack: asyncio.Future[Any]) -> bool:
        """Wait for the ACK while Julia keeps sending frames; False after _INT_ACK_WAIT of silence."""
        loop = asyncio.get_running_loop()
        sent = loop.time()
        while True:
            until = min(max(sent, j.last_frame_at) + _INT_ACK_WAIT, sent + _INT_ACK_MAX)
            left = until - loop.time()
            if left <= 0:
                return ack.done() or ex.future.done()
            if await _taken(ex, ack, left):
                return True

    @staticmethod
    def _signal(j: _Julia) -> None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            if _IS_WINDOWS:
                os.kill(j.proc.pid, signal.CTRL_BREAK_EVENT)  # type: ignore[attr-defined]
            else:
                os.killpg(j.proc.pid, signal.SIGINT)

    # ---- death and teardown ----

    async def _on_death(self, j: _Julia, reason: str) -> None:
        """Explain why Julia went away and wake everyone waiting on it."""
        if j.dead:
            return
        j.dead = True
        if j.writer is not None:
            j.writer.close()
        try:
            await asyncio.wait_for(j.proc.wait(), _REAP_WAIT)
        except (TimeoutError, asyncio.TimeoutError):
            await self._kill(j)  # it closed the socket but lives on: it is of no use
        how = describe_exit(j.proc.returncode)
        tail = self._post_mortem(j, quote_log=False)
        if not tail:
            tail = b"".join(j.stderr_tail)[-_STDERR_TAIL_BYTES:].decode("utf-8", "replace")
        tail = tail.strip()
        message = f"Julia {how}"
        if j.proc.returncode == 0 or reason != "closed its connection":
            message += f"; it {reason}"
        message += "."
        if tail:
            message += f"\nThe end of its stderr:\n{tail}"
        message += f"\nJulia's log: {j.log_path}"
        j.death = JuliaDiedError(
            message, exit_description=how, stderr_tail=tail, log_path=j.log_path
        )
        ex = self._current
        if ex is not None and not ex.future.done():
            if ex.killed_for_interrupt:
                ex.future.set_result(
                    ExecutionResult(
                        status="interrupted",
                        text="InterruptException",
                        state_kept=False,
                        interrupt_path="restart",
                        notice="Julia did not respond to interrupts and was restarted: variables, "
                        "functions and packages loaded before are gone.",
                    )
                )
            else:
                ex.future.set_exception(j.death)
        for key, waiter in list(self._waiters.items()):
            if not waiter.done():
                waiter.set_exception(j.death)
            self._waiters.pop(key, None)
        if self._julia is j:
            self._julia = None
            if ex is not None and ex.killed_for_interrupt:
                self._lost_state = None
                if not self._closed:
                    self._start_in_background()
            elif not self._closed:
                self._lost_state = (
                    f"Julia {how} during an earlier execution; this one ran in a fresh Julia "
                    "session: variables, functions and packages loaded before are gone."
                )

    def _start_in_background(self) -> None:
        async def start() -> None:
            if self._closed:
                return
            try:
                await self.start()
            except JuliaStartupError as exc:
                log.error("restarting Julia failed: %s", exc)

        task = asyncio.create_task(start())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _stop_julia(self, reason: str) -> None:
        j, self._julia = self._julia, None
        if j is None:
            return
        if j.writer is not None and not j.dead:
            j.writer.close()  # EOF: the server exits by itself
        try:
            await asyncio.wait_for(j.proc.wait(), _EXIT_AFTER_EOF_WAIT)
        except (TimeoutError, asyncio.TimeoutError):
            self._signal_group(j, kill=False)
            try:
                await asyncio.wait_for(j.proc.wait(), _EXIT_AFTER_TERM_WAIT)
            except (TimeoutError, asyncio.TimeoutError):
                await self._kill(j)
        self._signal_group(j, kill=True)  # children it left in its group
        self._post_mortem(j)
        if j.reader_task is not None:
            j.reader_task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await j.reader_task
        death = JuliaDiedError(f"Julia {reason}")
        j.dead, j.death = True, j.death or death
        ex = self._current
        if ex is not None and not ex.future.done():
            ex.future.set_exception(death)
        for key, waiter in list(self._waiters.items()):
            if not waiter.done():
                waiter.set_exception(death)
            self._waiters.pop(key, None)

    async def _kill(self, j: _Julia) -> None:
        """SIGKILL Julia's whole process group and reap it."""
        self._signal_group(j, kill=True)
        with contextlib.suppress(ProcessLookupError):
            j.proc.kill()
        with contextlib.suppress(TimeoutError, asyncio.TimeoutError):
            await asyncio.wait_for(j.proc.wait(), _REAP_WAIT)

    @staticmethod
    def _signal_group(j: _Julia, *, kill: bool) -> None:
        """SIGKILL (or SIGTERM) Julia's process group, children included."""
        if _IS_WINDOWS:  # no process groups to signal: end Julia itself
            with contextlib.suppress(ProcessLookupError):
                j.proc.kill() if kill else j.proc.terminate()
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(j.proc.pid, signal.SIGKILL if kill else signal.SIGTERM)

    def _post_mortem(self, j: _Julia, *, quote_log: bool = True) -> str:
        """Collect what Julia wrote to fd 1 and 2 that was not passed on; append it to the log.

        Return the end of its stderr, or (with ``quote_log``) the end of the log if none.
        """
        left: dict[str, bytes] = {}
        if j.pipes is not None:
            left = j.pipes.drain()
            j.pipes.close()
            j.pipes = None
        text = left.get("stderr", b"")
        with contextlib.suppress(OSError), open(j.log_path, "ab") as f:
            for data in (left.get("stdout", b""), text):
                f.write(data)
        tail = text[-_STDERR_TAIL_BYTES:].decode("utf-8", "replace").strip()
        if not tail and quote_log:
            tail = self._log_tail(j.log_path)
        return tail

    @staticmethod
    def _log_tail(path: Path) -> str:
        try:
            with open(path, "rb") as f:
                f.seek(0, os.SEEK_END)
                f.seek(max(0, f.tell() - _LOG_TAIL_BYTES))
                return f.read().decode("utf-8", "replace").strip()
        except OSError as exc:
            return f"(could not read it: {exc})"


async def _finished(ex: _Execution, timeout: float) -> bool:
    """Wait up to ``timeout`` s for the execution's result; return whether it came."""
    if not ex.future.done():
        await asyncio.wait({ex.future}, timeout=timeout)
    return ex.future.done()


def _cpu_seconds(pid: int) -> float | None:
    """CPU time a process has used so far (user + system), or None if it cannot be read."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return times.user + times.system


def _main_thread_faults(pid: int) -> int | None:
    """Minor page faults of a process's main thread so far (Linux), else None."""
    try:
        stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
        return int(stat.rsplit(")", 1)[1].split()[7])
    except (OSError, IndexError, ValueError):
        return None


async def _taken_while_compiling(
    j: _Julia, ex: _Execution, ack: asyncio.Future[Any], faults: int | None
) -> bool:
    """Wait for the ACK while Julia's main thread keeps touching new memory (see
    _COMPILE_WAIT); False once it touched none for _COMPILE_QUIET, or at the bound. ``faults``
    was read at least _COMPILE_QUIET ago."""
    if faults is None:
        return False
    loop = asyncio.get_running_loop()
    now = loop.time()
    until = now + _COMPILE_WAIT
    last_growth = now - _SIGINT_WAIT  # faults was read when the SIGINT was sent
    logged = False
    while True:
        current = _main_thread_faults(j.proc.pid)
        now = loop.time()
        if current is None or now >= until:
            return False
        if current != faults:
            faults, last_growth = current, now
            if not logged:
                log.info("execution %s: Julia is compiling; waiting for it to take the SIGINT", ex.id)
                logged = True
        elif now - last_growth >= _COMPILE_QUIET:
            return False
        if await _taken(ex, ack, _COMPILE_SAMPLE):
            return True


async def _taken(ex: _Execution, ack: asyncio.Future[Any], timeout: float) -> bool:
    """Wait up to ``timeout`` s for Julia to ACK the interrupt or end the execution."""
    if not (ack.done() or ex.future.done()):
        await asyncio.wait({ack, ex.future}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    return ack.done() or ex.future.done()


def _display_msg(frame: Frame) -> dict[str, Any]:
    """The display_data / update_display_data / clear_output message of a DSP or CLR frame."""
    if frame.kind is FrameKind.CLR:
        return {"type": "clear_output", "wait": frame.args[1] == "1"}
    msg = _json(frame)
    shown: dict[str, Any] = {
        "type": "update_display_data" if msg.get("update") else "display_data",
        "data": _bundle_of(frame, msg.get("data")),
        "metadata": _object_of(frame, msg.get("metadata", {}), "metadata"),
    }
    if "transient" in msg:
        transient = _object_of(frame, msg["transient"], "transient")
        if not isinstance(transient.get("display_id", ""), str):
            raise ProtocolError(f"DSP frame with a non-string display_id: {msg!r:.80}")
        shown["transient"] = transient
    return shown


def _object_of(frame: Frame, value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        msg = f"{frame.kind.name} frame whose {what} is not a JSON object: {frame.payload[:80]!r}"
        raise ProtocolError(msg)
    return value


def _bundle_of(frame: Frame, value: object) -> dict[str, str]:
    """A MIME bundle as the server sends it: MIME type -> text (base64 for binary types)."""
    bundle = _object_of(frame, value, "data")
    if not all(isinstance(v, str) for v in bundle.values()):
        msg = f"{frame.kind.name} frame with a non-text MIME value: {frame.payload[:80]!r}"
        raise ProtocolError(msg)
    return bundle


def _json(frame: Frame) -> dict[str, Any]:
    try:
        value = json.loads(frame.payload)
    except ValueError as exc:
        msg = f"{frame.kind.name} frame payload is not JSON: {frame.payload[:80]!r}"
        raise ProtocolError(msg) from exc
    if not isinstance(value, dict):
        msg = f"{frame.kind.name} frame payload is not a JSON object: {frame.payload[:80]!r}"
        raise ProtocolError(msg)
    return value
