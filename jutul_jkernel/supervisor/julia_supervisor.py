"""Own one Julia process running ``server.jl`` and its connection; know nothing of Jupyter.

The supervisor starts Julia in its own process group, checks the handshake, sends code and
routes what comes back: live output to the execution's :class:`OutputSink`, one
:class:`ExecutionResult` per execution. Executions run one at a time;
:meth:`JuliaSupervisor.interrupt` and :meth:`JuliaSupervisor.shutdown` never wait behind them.
If Julia dies, every waiter fails at once with :class:`JuliaDiedError` explaining how, and the
next execution starts a fresh Julia and says that state was lost. Executions beside the main
one (a subshell's: :meth:`JuliaSupervisor.execute_beside`) run at once, whatever the main one
does (supervisor/beside.py).
:meth:`JuliaSupervisor.launch` spawns Julia synchronously, before any event loop runs, for
start() to adopt: the kernel's entry point uses it so that Julia boots while ipykernel is still
being imported.

It composes the concerns that have modules of their own in this package: startup.py (a Julia
until it is connected: launched, adopted, handshake), launch_settings.py and spawn.py (what
Julia is started with, and the spawn), julia_process.py (one incarnation: requests, signals,
log, stop), reader.py (reading its socket and pipes), routing.py (where each frame and output
byte goes), execution_queue.py (executions one at a time), execution.py (one execution and its
own frames), interrupts.py with interrupt_state.py, interrupt_claims.py and event_loop_page.py
(interrupts),
queries.py (complete, inspect, is_complete; SYN), post_mortem.py (explaining a death),
frame_payloads.py (checking what frames carry), output_sink.py (where output goes),
results.py and errors.py (what callers get), beside.py (executions beside the main
one). Left here: the Julia it holds, from its start to
its death or stop, and the public API.

Usage from plain Python::

    async with JuliaSupervisor() as julia:
        result = await julia.execute("x = 1 + 1", print_bytes)
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
from pathlib import Path
from typing import Any

from jutul_jkernel import settings
from jutul_jkernel.protocol.wire import Decoder, Frame, FrameKind, encode
from jutul_jkernel.supervisor import queries
from jutul_jkernel.supervisor.beside import BesideExecutions
from jutul_jkernel.supervisor.early_launch import EarlyLaunch
from jutul_jkernel.supervisor.errors import JuliaDiedError, JuliaStartupError, describe_exit
from jutul_jkernel.supervisor.event_loop_page import EventLoopPage
from jutul_jkernel.supervisor.execution_queue import ExecutionQueue
from jutul_jkernel.supervisor.frame_payloads import encode_comm, encode_comm_beside
from jutul_jkernel.supervisor.interrupt_claims import Claims
from jutul_jkernel.supervisor.interrupts import InterruptLadder
from jutul_jkernel.supervisor.julia_process import JuliaProcess
from jutul_jkernel.supervisor.launch_settings import LaunchSettings
from jutul_jkernel.supervisor.output_sink import CommMessage, OutputSink, StreamCallback, as_sink
from jutul_jkernel.supervisor.post_mortem import lost_state_notice
from jutul_jkernel.supervisor.reader import JuliaReader, open_streams
from jutul_jkernel.supervisor.results import ErrorInfo, ExecutionResult
from jutul_jkernel.supervisor.routing import FrameRouter
from jutul_jkernel.supervisor.startup import JuliaStarter

# Re-exported: callers import what the supervisor raises and returns from here.
__all__ = [
    "ErrorInfo",
    "ExecutionResult",
    "JuliaDiedError",
    "JuliaStartupError",
    "JuliaSupervisor",
    "OutputSink",
    "describe_exit",
]

log = logging.getLogger(__name__)

# A cold Julia needs ~1 s to connect; a big --sysimage or a slow disk much more.
_STARTUP_TIMEOUT = 60.0


# Seconds a new Julia gets to answer the query that warms the query path (_warm_query_path):
# it answers in under a millisecond, or is busy starting a cell the kernel sent at once.
_WARM_QUERY_WAIT = 10.0


class JuliaSupervisor:
    """Start, feed, interrupt, restart and stop one Julia process.

    ``julia`` defaults to ``$JUTUL_JKERNEL_JULIA`` or ``julia`` on PATH; ``julia_args`` are
    extra command-line flags (``--project=...``, ``--sysimage=...``; a ``+channel`` for
    juliaup's launcher goes first on the command line), added to those in
    ``$JUTUL_JKERNEL_JULIA_ARGS``; ``threads`` defaults to ``$JUTUL_JKERNEL_THREADS`` or
    physical cores minus one; ``startup_timeout`` defaults to
    ``$JUTUL_JKERNEL_STARTUP_TIMEOUT`` or 60 s. ``stray`` is the sink of what Julia prints
    between executions (background tasks); set it later with :meth:`route_stray_output`.
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
        stray: OutputSink | None = None,
    ) -> None:
        self.julia = julia or settings.julia_command()
        self.julia_args = [*settings.julia_args(), *julia_args]
        self.threads = threads if threads is not None else settings.threads()
        self.cwd = cwd
        self.env = env or {}
        # A bad setting is reported by start(), as a JuliaStartupError: a kernel then stays up
        # and every cell says what is wrong, where raising here would kill it before kernel_info.
        self._setting_error: str | None = None
        if startup_timeout is not None:
            self.startup_timeout = startup_timeout
        else:
            try:
                self.startup_timeout = settings.startup_timeout(_STARTUP_TIMEOUT)
            except ValueError as exc:
                self._setting_error = f"{exc}: set it to a number of seconds, or unset it"
                self.startup_timeout = _STARTUP_TIMEOUT
        self._julia: JuliaProcess | None = None  # connected; before that, self._starter's
        self._start_lock = asyncio.Lock()
        self._next_id = 0  # executions, queries, SYNs and interrupt requests share the ids
        self._claims = Claims()
        self._starter = JuliaStarter(Path(log_dir) if log_dir else None, self._claims)
        self._executions = ExecutionQueue(
            lambda: self.start(),
            lambda: self._julia,
            self._new_id,
            InterruptLadder(self._claims, self._new_id),
        )
        self._route = FrameRouter(lambda: self._executions.current, stray or OutputSink())
        self._reader = JuliaReader(self._route, lambda: self._julia, self._on_death)
        self._beside = BesideExecutions(
            start=self.start,
            julia=lambda: self._julia,
            new_id=self._new_id,
            stray=lambda: self._route.stray,
        )
        self._route.beside = self._beside
        self._closed = False
        self._background: set[asyncio.Task[Any]] = set()

    # ---- public API ----

    async def __aenter__(self) -> JuliaSupervisor:
        await self.start()
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.shutdown()

    def route_stray_output(self, sink: OutputSink) -> None:
        """Where output printed between executions goes from now on (a kernel made after the
        supervisor, which was launched early, says so once)."""
        self._route.stray = sink

    @property
    def shut_down(self) -> bool:
        """Whether shutdown() was called (start() then fails)."""
        return self._closed

    @property
    def alive(self) -> bool:
        """Whether a Julia process is running and connected."""
        j = self._julia
        return j is not None and j.running

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
        sink: OutputSink | StreamCallback | None = None,
        *,
        name: str | None = None,
    ) -> ExecutionResult:
        """Evaluate ``code`` in Main and return its result.

        ``sink`` receives the execution's output, displays and input requests (an
        :class:`OutputSink`; a bare callable is its ``stream``: ``sink(stream, data)`` gets live
        output bytes, and displays' text/plain). ``name`` is what backtraces call the code
        (printable ASCII, e.g. ``In[3]``). A named execution is a cell as the REPL and IJulia
        know it: its code goes to Julia's ``In[n]`` and its shown value to ``Out[n]`` (``n``
        from ``In[n]``, else the execution's id), and the pre-execute hooks run; an unnamed one
        (``user_expressions``) leaves history alone. Raises JuliaDiedError if Julia dies
        meanwhile. Cancelling it (a timeout around it, say) interrupts the cell as interrupt()
        would, and the next execution waits until it ended (and says so if its interrupt ended
        in a restart, which lost the state).
        """

        def frame_of(eid: int) -> bytes:
            if name is None:
                return encode(FrameKind.EXE, eid, payload=code.encode())
            return encode(FrameKind.EXN, eid, name, payload=code.encode())

        return await self._executions.run(frame_of, as_sink(sink))

    async def deliver_comm(
        self, message: CommMessage, sink: OutputSink | None = None
    ) -> ExecutionResult:
        """Hand a frontend's comm message (comm_open, comm_msg or comm_close) to Julia.

        Julia runs what it asks for (the target's ``register_comm``, or the comm's ``on_msg``
        or ``on_close``) as an execution of its own: after the cells sent before it, and
        interruptible, cancellable and reported as a cell is. ``sink`` gets what the callback
        prints, displays and sends over comms; a comm_open for a target Julia does not know is
        answered there with a comm_close. A callback's error is printed on its stderr, and the
        result is "ok" unless the callback was interrupted.
        """
        return await self._executions.run(
            lambda eid: encode_comm(eid, message), sink or OutputSink()
        )

    async def execute_beside(
        self,
        code: str,
        sink: OutputSink | StreamCallback | None = None,
        *,
        shell: int,
        name: str | None = None,
    ) -> ExecutionResult:
        """Evaluate ``code`` in Main now, beside whatever else runs: a subshell's cell.

        As :meth:`execute` (the same ``sink`` and ``name``), except that it waits for nothing
        but a free slot (at most ``beside.LIMIT`` run at once): Julia runs it in a task of its
        own whenever the main execution yields (sleep, I/O, ``yield()``). ``shell`` (1, 2, ...)
        is the route it belongs to: what it, and the tasks it starts, print or display goes to
        ``sink``, and once it ended to the route's stray sink (:meth:`route_shell_output`),
        told apart from the main execution's output by task, not by time. stdin cannot be read
        there, and :meth:`interrupt` does not reach it (:meth:`abandon_shell` ends it). Raises
        JuliaDiedError if Julia dies meanwhile; the route's next execution then says that the
        state was lost.
        """

        def frame_of(eid: int) -> bytes:
            return encode(FrameKind.EXS, eid, name or "-", payload=code.encode())

        return await self._beside.run(frame_of, as_sink(sink), shell)

    async def deliver_comm_beside(
        self, message: CommMessage, sink: OutputSink | None = None, *, shell: int
    ) -> ExecutionResult:
        """Hand a frontend's comm message that came on subshell ``shell`` to Julia, which runs
        its callback at once, beside whatever else runs (as :meth:`execute_beside`)."""
        return await self._beside.run(
            lambda eid: encode_comm_beside(eid, message), sink or OutputSink(), shell
        )

    def abandon_shell(self, shell: int, reason: str) -> None:
        """End the executions of route ``shell`` now, each with a ``SubshellDeleted`` error
        saying ``reason``, and ask Julia to stop them (a subshell was deleted)."""
        self._beside.abandon(shell, reason)

    def route_shell_output(self, shell: int, sink: OutputSink | None) -> None:
        """Where route ``shell``'s output goes once its execution ended (a task it started
        printing later); None: the stray sink of :meth:`route_stray_output`."""
        self._beside.route_stray(shell, sink)

    async def interrupt(self) -> None:
        """Interrupt the running execution, escalating as needed; return at once.

        The execution's result says how it ended: interrupted with state kept, or (if Julia
        ignored every interrupt) interrupted after a restart, with ``state_kept`` False. One
        that comes while an execution waits for Julia to start resolves it unsent.
        """
        self._executions.interrupt()

    async def restart(self) -> None:
        """Stop Julia and start a fresh one: all state is lost."""
        async with self._start_lock:
            await self._stop_julia(reason="was restarted")
            self._executions.lost_state = None
            await self._spawn()

    async def shutdown(self) -> None:
        """Stop Julia (ask, wait, SIGTERM, SIGKILL, reap) and release everything."""
        self._closed = True
        self._starter.stop(connected=self._julia)
        await self._stop_julia(reason="was shut down")
        self._reader.stop()
        for task in list(self._background):
            task.cancel()
        self._claims.remove()
        self._starter.remove_log_dir()

    def kill_now(self) -> None:
        """SIGKILL Julia's process group at once, synchronously (signal handlers, atexit)."""
        j = self._julia
        if j is not None and j.proc.returncode is None:
            j.signal_group(kill=True)
        self._starter.kill_now()
        self._claims.remove()
        # The logs too, as shutdown() does: nobody is left to quote them (a SIGTERMed kernel
        # left its directory in the temporary folder, one per kill).
        self._starter.remove_log_dir()  # kill_now's

    async def complete(self, code: str, cursor: int) -> dict[str, Any]:
        """REPL completions at ``cursor`` (code points): matches, cursor_start, cursor_end."""
        return await self._query("complete", code, cursor)

    async def inspect(self, code: str, cursor: int) -> dict[str, Any]:
        """The docstring of the name at ``cursor``, as ``?name`` shows it."""
        return await self._query("inspect", code, cursor)

    async def is_complete(self, code: str, timeout: float | None = None) -> dict[str, Any]:
        """Whether ``code`` is complete, incomplete (with an indent) or invalid; Julia's answer
        waited for at most ``timeout`` seconds once asked (TimeoutError)."""
        return await self._query("is_complete", code, 0, timeout)

    async def knows_comm_target(self, target: str, timeout: float | None = None) -> bool:
        """Whether Julia would take a comm_open to ``target`` (a package defined
        ``register_comm`` for it). Answered while a cell runs, if it yields."""
        return bool((await self._query("comm_target", target, 0, timeout)).get("known"))

    async def _query(
        self, op: str, code: str, cursor: int, timeout: float | None = None
    ) -> dict[str, Any]:
        # With Julia running, the request is written before this first waits: a caller's
        # handler that awaits it directly has sent it by its first wait.
        await self.start()
        j = self._julia
        assert j is not None
        return await queries.query(j, self._new_id(), op, code, cursor, timeout)

    # ---- start-up ----

    def _new_id(self) -> int:
        self._next_id += 1
        return self._next_id

    def _settings(self) -> LaunchSettings:
        """What decides Julia's command line and environment (an early launch must match)."""
        return LaunchSettings(
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
        if self._closed or self.alive or self._starter.launched is not None:
            return
        if self._setting_error is not None:
            return  # start() reports it
        self._starter.launch(self._settings())

    def adopt_early_launch(self, early: EarlyLaunch) -> None:
        """Take a Julia spawned before this supervisor existed
        (:func:`~jutul_jkernel.supervisor.early_launch.launch_from_env`), as if launch() had
        spawned it: start() adopts it if its settings match, and shutdown() and kill_now()
        end it. One this supervisor cannot take (it was started, launched, or given a log
        directory) is discarded at once."""
        if self._closed or self.alive or not self._starter.take_early(early):
            early.discard()

    async def _spawn(self) -> None:
        j, launched = self._starter.adopt(self._settings())
        try:
            conn, decoder, early = await self._starter.handshake(
                j, launched, self.startup_timeout, self._reader.piped
            )
            await self._connect(j, conn, decoder, early)
        except JuliaStartupError:
            if self._closed:  # shutdown() ended it: not a failure of Julia's to report
                msg = "the supervisor was shut down while Julia was starting"
                raise JuliaStartupError(msg) from None
            raise
        finally:
            self._starter.starting = None  # now self._julia, or gone
        # server.jl says in the log why it loaded from source (no cache yet, stale, unwritable).
        loaded = "its compile cache" if j.info.get("loaded_from") == "cache" else "source"
        log.info(
            "Julia %s started (%s, pid %s, JKernel from %s, log %s)",
            self.julia_version,
            self.julia_path,
            j.proc.pid,
            loaded,
            j.log_path,
        )
        self._warm_query_path(j)

    def _warm_query_path(self, j: JuliaProcess) -> None:
        """Ask a new Julia one is_complete at once, and read its answer as any other, unused.

        The first query of a session ran its whole path cold, on both sides of the socket (the
        frame read and dispatched, the answer written, read and routed): a fresh kernel's first
        is_complete took ~1.17 ms to the reply and its second 0.90, Julia's part ~190 us against
        ~50 (1.10.0, session 27), though JKernel answers one parse at start-up (main.jl). This
        one goes while the kernel answers kernel_info, before a client's first request.
        """

        async def ask() -> None:
            # A death or a silence: the next request finds out (or a restart came already).
            with contextlib.suppress(JuliaDiedError, OSError, TimeoutError, asyncio.TimeoutError):
                await queries.query(j, self._new_id(), "is_complete", "1", 0, _WARM_QUERY_WAIT)

        task = asyncio.create_task(ask())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _connect(
        self, j: JuliaProcess, conn: socket.socket, decoder: Decoder, early: list[Frame]
    ) -> None:
        """Take Julia's checked connection and wait for its INF frame; then it is self._julia."""
        j.reader, j.writer = await open_streams(conn)
        self._julia = j
        self._executions.needs_sync = False  # no SIGINT of ours is in flight to a new Julia
        info_waiter = j.replies.expect(0)
        j.reader_task = asyncio.create_task(self._reader.read_loop(j, decoder, early))
        try:
            await asyncio.wait_for(info_waiter, self.startup_timeout)
        except (TimeoutError, asyncio.TimeoutError):
            await self._stop_julia(reason="did not describe itself")
            msg = f"Julia connected but sent no INF frame; its log is {j.log_path}"
            raise JuliaStartupError(msg) from None
        except JuliaDiedError as exc:
            raise JuliaStartupError(str(exc)) from None
        j.loop_page = EventLoopPage.open(j.info.get("loop_page"))

    # ---- death and teardown ----

    async def _on_death(self, j: JuliaProcess, reason: str) -> None:
        """Explain why Julia went away and wake everyone waiting on it."""
        if j.dead:
            return
        j.death = await j.reap_after_death(reason)
        restarted = self._executions.julia_died(j.death)  # killed for ignoring interrupts
        j.replies.fail_all(j.death)
        self._julia_ended()
        if self._julia is j:
            self._julia = None
            if restarted:
                self._executions.lost_state = None
                if not self._closed:
                    self._start_in_background()
            elif not self._closed:
                self._executions.lost_state = lost_state_notice(j.death.exit_description)
        self._beside_ended(j, restarted)

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
        await j.stop()
        death = JuliaDiedError(f"Julia {reason}")
        j.dead, j.death = True, j.death or death
        self._executions.julia_stopped(death)
        j.replies.fail_all(death)
        self._beside.julia_ended(j, death, lost=None)
        self._julia_ended()

    def _beside_ended(self, j: JuliaProcess, restarted: bool) -> None:
        """Julia ``j`` died: each beside execution sent to it fails, saying so; each route's
        next one says that the state was lost."""
        assert j.death is not None
        if restarted:
            error = JuliaDiedError(
                "Julia was restarted: the main execution did not respond to interrupts, "
                "and this one ended with it"
            )
            lost = (
                "Julia was restarted because an execution did not respond to interrupts: "
                "variables, functions and packages loaded before are gone."
            )
        else:
            error = j.death
            lost = lost_state_notice(j.death.exit_description or "died")
        self._beside.julia_ended(j, error, lost=None if self._closed else lost)

    def _julia_ended(self) -> None:
        """Tell the stray sink that a Julia process ended: what it had open (comms) is gone."""
        stray = self._route.stray
        if stray.julia_ended is not None:
            try:
                stray.julia_ended()
            except Exception:  # the consumer's bug must not stop the teardown
                log.exception("julia_ended callback failed")
