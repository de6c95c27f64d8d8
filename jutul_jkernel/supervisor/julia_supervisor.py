"""Own one Julia process running ``server.jl`` and its connection; know nothing of Jupyter.

The supervisor starts Julia in its own process group, checks the handshake, sends code and
routes what comes back: live output to the execution's :class:`OutputSink`, one
:class:`ExecutionResult` per execution. Executions run one at a time;
:meth:`JuliaSupervisor.interrupt` and :meth:`JuliaSupervisor.shutdown` never wait behind them.
If Julia dies, every waiter fails at once with :class:`JuliaDiedError` explaining how, and the
next execution starts a fresh Julia and says that state was lost.
:meth:`JuliaSupervisor.launch` spawns Julia synchronously, before any event loop runs, for
start() to adopt: the kernel's entry point uses it so that Julia boots while ipykernel is still
being imported.

It composes the concerns that have modules of their own in this package: startup.py (a Julia
until it is connected: launched, adopted, handshake), launch_settings.py and spawn.py (what
Julia is started with, and the spawn), julia_process.py (one incarnation: requests, signals,
log, stop), post_mortem.py (explaining a death), routing.py (where each frame and output byte
goes), execution.py (one execution and its own frames), interrupts.py (interrupts),
frame_payloads.py (checking what frames carry), output_sink.py (where output goes),
results.py and errors.py (what callers get).

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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from jutul_jkernel import settings
from jutul_jkernel.protocol.wire import Decoder, Frame, FrameKind, ProtocolError, encode
from jutul_jkernel.supervisor import children
from jutul_jkernel.supervisor.errors import JuliaDiedError, JuliaStartupError, describe_exit
from jutul_jkernel.supervisor.execution import Execution
from jutul_jkernel.supervisor.frame_payloads import encode_comm
from jutul_jkernel.supervisor.interrupt_claims import Claims
from jutul_jkernel.supervisor.interrupt_state import Interrupt
from jutul_jkernel.supervisor.interrupts import InterruptLadder, settle_wait
from jutul_jkernel.supervisor.julia_process import JuliaProcess
from jutul_jkernel.supervisor.launch_settings import LaunchSettings
from jutul_jkernel.supervisor.output_sink import CommMessage, OutputSink, StreamCallback, as_sink
from jutul_jkernel.supervisor.results import ErrorInfo, ExecutionResult, InterruptStep
from jutul_jkernel.supervisor.routing import FrameRouter
from jutul_jkernel.supervisor.spawn import IS_WINDOWS
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
_READ_CHUNK_BYTES = 256 * 1024
# Completion, inspection and is_complete answer in milliseconds once compiled; a query waits
# this long when a computing cell keeps Julia from answering.
_QUERY_TIMEOUT = 30.0
_SYNC_TIMEOUT = 5.0


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
        self._lock = asyncio.Lock()  # serialises executions
        self._start_lock = asyncio.Lock()
        self._next_id = 0
        # The running execution. execute() sets it; whoever finishes the execution (execute,
        # or _settle when execute was cancelled) clears it, in _end_execution.
        self._current: Execution | None = None
        self._lost_state: str | None = None  # notice for the next execution after a death
        self._needs_sync = False
        self._interrupt_pending = False  # interrupt() came while an execution was starting
        self._settling: asyncio.Task[None] | None = None  # see _settle
        self._claims = Claims()
        self._starter = JuliaStarter(Path(log_dir) if log_dir else None, self._claims)
        self._route = FrameRouter(lambda: self._current, stray or OutputSink())
        self._ladder = InterruptLadder(self._claims, self._new_id)
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

        return await self._run(frame_of, as_sink(sink))

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
        return await self._run(lambda eid: encode_comm(eid, message), sink or OutputSink())

    async def _run(self, frame_of: Callable[[int], bytes], sink: OutputSink) -> ExecutionResult:
        """Send the request ``frame_of(id)`` makes for a new execution id; wait for its result."""
        async with self._lock:
            if self._settling is not None:
                await self._settling  # a cancelled execution is still being interrupted
            await self.start()
            notice, self._lost_state = self._lost_state, None
            if self._needs_sync:
                await self._sync()
            j = self._julia
            assert j is not None and j.writer is not None
            eid = self._new_id()
            future: asyncio.Future[ExecutionResult] = asyncio.get_running_loop().create_future()
            ex = Execution(eid, sink, future, Interrupt(eid, future))
            self._current = ex
            j.stderr_tail.clear()  # a death report quotes this execution's stderr only
            if not IS_WINDOWS:
                ex.children_before = children.descendants(j.proc.pid)
            try:
                frame = frame_of(ex.id)
                if self._interrupt_pending:
                    # Interrupted before it was sent: it never runs, and nothing needs a signal
                    # (a cold Julia compiling its first cell is where a forced SIGINT hurts).
                    self._interrupt_pending = False
                    ex.interrupt.reach(InterruptStep.UNSENT)
                    ex.resolve("int", "InterruptException")
                else:
                    await j.send(frame)
                # Shielded: cancelling this task must not cancel the future, which stays
                # the cell's fate while _settle interrupts it.
                result = await asyncio.shield(ex.future)
                if result.status == "interrupted":
                    await ex.stop_children(j)
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
                    self._end_execution(ex)
            if notice:
                result.notice = notice if not result.notice else f"{notice}\n{result.notice}"
            return result

    async def _settle(self, ex: Execution) -> None:
        """Interrupt a cancelled execution and wait (bounded by the escalation, which ends in
        a restart) until it has ended."""
        try:
            self._ladder.ensure(ex.interrupt, self._julia)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(ex.future), settle_wait())
            if (
                ex.future.done()
                and ex.future.exception() is None
                and not ex.future.result().state_kept
            ):
                # The escalation ended in a restart. Nobody reads a cancelled execution's result,
                # so the next execution says that the state was lost.
                self._lost_state = ex.future.result().notice
            j = self._julia
            if (
                j is not None
                and ex.future.done()
                and ex.future.exception() is None
                and ex.future.result().status == "interrupted"
            ):
                await ex.stop_children(j)
        finally:
            self._end_execution(ex)
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
        self._ladder.request(ex.interrupt, self._julia)

    async def restart(self) -> None:
        """Stop Julia and start a fresh one: all state is lost."""
        async with self._start_lock:
            await self._stop_julia(reason="was restarted")
            self._lost_state = None
            await self._spawn()

    async def shutdown(self) -> None:
        """Stop Julia (ask, wait, SIGTERM, SIGKILL, reap) and release everything."""
        self._closed = True
        self._starter.stop(connected=self._julia)
        await self._stop_julia(reason="was shut down")
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

    async def complete(self, code: str, cursor: int) -> dict[str, Any]:
        """REPL completions at ``cursor`` (code points): matches, cursor_start, cursor_end."""
        return await self._query("complete", code, cursor)

    async def inspect(self, code: str, cursor: int) -> dict[str, Any]:
        """The docstring of the name at ``cursor``, as ``?name`` shows it."""
        return await self._query("inspect", code, cursor)

    async def is_complete(self, code: str) -> dict[str, Any]:
        """Whether ``code`` is complete, incomplete (with an indent) or invalid."""
        return await self._query("is_complete", code, 0)

    async def knows_comm_target(self, target: str) -> bool:
        """Whether Julia would take a comm_open to ``target`` (a package defined
        ``register_comm`` for it). Answered while a cell runs, if it yields."""
        return bool((await self._query("comm_target", target, 0)).get("known"))

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

    async def _spawn(self) -> None:
        j, launched = self._starter.adopt(self._settings())
        try:
            conn, decoder, early = await self._starter.handshake(
                j, launched, self.startup_timeout, self._piped
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

    async def _connect(
        self, j: JuliaProcess, conn: socket.socket, decoder: Decoder, early: list[Frame]
    ) -> None:
        """Take Julia's checked connection and wait for its INF frame; then it is self._julia."""
        j.reader, j.writer = await asyncio.open_connection(sock=conn, limit=_READ_CHUNK_BYTES)
        self._julia = j
        self._needs_sync = False  # no SIGINT of ours is in flight to a new Julia
        info_waiter = j.replies.expect(0)
        j.reader_task = asyncio.create_task(self._read_loop(j, decoder, early))
        try:
            await asyncio.wait_for(info_waiter, self.startup_timeout)
        except (TimeoutError, asyncio.TimeoutError):
            await self._stop_julia(reason="did not describe itself")
            msg = f"Julia connected but sent no INF frame; its log is {j.log_path}"
            raise JuliaStartupError(msg) from None
        except JuliaDiedError as exc:
            raise JuliaStartupError(str(exc)) from None

    # ---- the connection ----

    async def _read_loop(self, j: JuliaProcess, decoder: Decoder, early: list[Frame]) -> None:
        assert j.reader is not None
        reason = "closed its connection"
        try:
            for frame in early:  # arrived with the handshake
                await self._route.handle(j, frame)
            while True:
                data = await j.reader.read(_READ_CHUNK_BYTES)
                if not data:
                    decoder.check_eof()
                    break
                frames = decoder.feed(data)
                if frames:
                    j.last_frame_at = asyncio.get_running_loop().time()
                for frame in frames:
                    await self._route.handle(j, frame)
                backpressure = self._route.sink_now().backpressure
                if backpressure is not None and self._route.reading_waits():
                    await backpressure()
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

    def _piped(self, j: JuliaProcess, name: str, data: bytes) -> None:
        """Output read from the pipes; pause them while the consumer catches up."""
        if self._julia is not j:
            j.append_to_log(name, data)  # still starting (or already replaced)
            return
        # Julia is still sending: the escalation waits for its ACK instead of signalling.
        j.last_frame_at = asyncio.get_running_loop().time()
        self._route.output(j, name, data)
        pipes = j.pipes
        backpressure = self._route.sink_now().backpressure
        if backpressure is None or pipes is None or pipes.paused or not self._route.reading_waits():
            return
        pipes.pause()

        async def catch_up() -> None:
            try:
                await backpressure()
            finally:
                pipes.resume()

        task = asyncio.create_task(catch_up())
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _query(self, op: str, code: str, cursor: int) -> dict[str, Any]:
        await self.start()
        j = self._julia
        assert j is not None
        qid = self._new_id()
        query = encode(FrameKind.QRY, qid, op, max(0, cursor), payload=code.encode())
        try:
            result: dict[str, Any] = await j.ask(qid, query, _QUERY_TIMEOUT)
        except (TimeoutError, asyncio.TimeoutError):
            msg = (
                f"Julia did not answer a {op} query within {_QUERY_TIMEOUT:g} s "
                "(a running cell that computes without yielding keeps it busy)"
            )
            raise TimeoutError(msg) from None
        return result

    async def _sync(self) -> None:
        """Round-trip a SYN so that any SIGINT still in flight lands before the next cell."""
        j = self._julia
        assert j is not None
        sid = self._new_id()
        try:
            await j.ask(sid, encode(FrameKind.SYN, sid), _SYNC_TIMEOUT)
        except (TimeoutError, asyncio.TimeoutError):
            log.warning("Julia did not answer a SYN within %g s", _SYNC_TIMEOUT)
        self._needs_sync = False

    def _end_execution(self, ex: Execution) -> None:
        """The one place an execution ends: it stops being current, its escalation and input
        requests stop, and a SIGINT it may have left in flight is synced before the next."""
        if self._current is ex:
            self._current = None
        ex.stop_asking()
        if self._ladder.finish(ex.interrupt):
            self._needs_sync = True

    # ---- death and teardown ----

    async def _on_death(self, j: JuliaProcess, reason: str) -> None:
        """Explain why Julia went away and wake everyone waiting on it."""
        if j.dead:
            return
        j.death = await j.reap_after_death(reason)
        how = j.death.exit_description
        ex = self._current
        restarted = ex is not None and ex.interrupt.restarted  # killed for ignoring interrupts
        if ex is not None and not ex.future.done():
            if restarted:
                ex.future.set_result(
                    ExecutionResult(
                        status="interrupted",
                        text="InterruptException",
                        state_kept=False,
                        interrupt_path=InterruptStep.RESTART.path,
                        notice="Julia did not respond to interrupts and was restarted: variables, "
                        "functions and packages loaded before are gone.",
                    )
                )
            else:
                ex.future.set_exception(j.death)
        j.replies.fail_all(j.death)
        self._julia_ended()
        if self._julia is j:
            self._julia = None
            if restarted:
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
        await j.stop()
        death = JuliaDiedError(f"Julia {reason}")
        j.dead, j.death = True, j.death or death
        ex = self._current
        if ex is not None and not ex.future.done():
            ex.future.set_exception(death)
        j.replies.fail_all(death)
        self._julia_ended()

    def _julia_ended(self) -> None:
        """Tell the stray sink that a Julia process ended: what it had open (comms) is gone."""
        stray = self._route.stray
        if stray.julia_ended is not None:
            try:
                stray.julia_ended()
            except Exception:  # the consumer's bug must not stop the teardown
                log.exception("julia_ended callback failed")
