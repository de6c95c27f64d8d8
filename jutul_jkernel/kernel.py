"""The Jupyter kernel "Julia (supervised)": Jupyter messages in, supervisor calls out.

An ipykernel ``Kernel`` subclass that never touches pids or sockets itself: it maps
execute / complete / inspect / is_complete / history / interrupt / shutdown requests onto a
:class:`~jutul_jkernel.supervisor.JuliaSupervisor` and publishes what comes back on IOPub with
the request as parent. Everything a cell produces is published before its reply.

ipykernel facts this relies on (checked with ipykernel 7.4): interrupt_request and
shutdown_request run on the control thread while do_execute awaits on the main loop, so they
hand work to the main loop thread-safely; the stock interrupt would SIGINT our own process
group, and the stock pre-handler hook turns SIGINT into a KeyboardInterrupt that kills the
asyncio loop, so both are replaced. Everything of a cell is published before its reply, since
clients stop reading IOPub at the cell's idle.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import fnmatch
import json
import logging
import os
import re
import signal
import sys
from collections import deque
from collections.abc import Awaitable, Coroutine, Iterator
from contextvars import ContextVar
from typing import Any, ClassVar

import zmq
from ipykernel._version import kernel_protocol_version
from ipykernel.kernelbase import Kernel
from jupyter_client.session import Session
from traitlets import Any as AnyTrait
from traitlets import Dict as DictTrait

from . import __version__, settings
from .errors import JuliaDiedError, JuliaStartupError
from .escalation import settle_wait
from .kernel_supervisor import supervisor_from_env
from .results import ExecutionResult
from .sink import CommMessage, Display, OutputSink
from .streams import StreamCoalescer
from .supervisor import JuliaSupervisor

# A kernel_info_request waits this long for Julia to report its version.
_KERNEL_INFO_WAIT = 10.0
# jupyter console waits 1 s for an is_complete_reply and, on the first miss, stops asking for
# the rest of the session (multi-line input then breaks). Julia answers in milliseconds, but
# not while it compiles (a cold start on a loaded machine): past this we answer "unknown",
# and the console runs the input as typed. A client that waits longer (console's
# kernel_is_complete_timeout) can be matched with JUTUL_JKERNEL_IS_COMPLETE_WAIT (seconds).
_IS_COMPLETE_WAIT = 0.8
# interrupt_request returns (and ipykernel publishes its `idle`) only once the interrupted cell
# has published its outcome, however long that takes within the supervisor's escalation, which
# ends every cell (by a restart if nothing else works): a fixed 10 s was outlasted once by a
# cold error path under load. Another control request ends the wait at once (see
# dispatch_control), so neither a shutdown nor a second interrupt queues behind it.
_INTERRUPT_SETTLE_WAIT = settle_wait()
_CONTROL_QUEUE_POLL = 0.02
# A comm_open asks Julia whether its target is known (answered in ~1 ms, while a cell runs too,
# if it yields); past this the comm_open is queued for Julia as any comm message is.
_COMM_TARGET_WAIT = 1.0
# Whether the shell message being handled is one ipykernel 7 dispatches beside the request
# that holds the shell (a comm message arriving while a cell runs): see _comm_received.
_BESIDE_ANOTHER: ContextVar[bool] = ContextVar("jutul_jkernel_beside_another", default=False)
# jupyter_client gives a kernel 2.5 s after shutdown_request before SIGTERM.
_SHUTDOWN_BUDGET = 2.0
# How often a pending input_request checks the stdin socket for the frontend's reply.
_INPUT_POLL = 0.02
# ipykernel's IOPub thread queues every message it is given, without limit. After this many
# bytes published we wait until that thread has caught up, so a cell printing gigabytes makes
# Julia's writes block rather than this process's memory grow.
_IOPUB_SYNC_BYTES = 1024 * 1024
_IOPUB_SYNC_TIMEOUT = 10.0
# MIME types whose bundle value is JSON itself, not text: nbformat's v4 schema
# (``"^application/(.*\\+)?json$"`` in mimebundle's patternProperties) stores them as JSON.
# Julia sends them as the text `show` wrote (application/json, and what
# IJulia.register_jsonmime adds, such as Vega-Lite's application/vnd.vegalite.v5+json).
_JSON_MIME = re.compile(r"application/(.*\+)?json")
# Cells kept for history_request: what jupyter console asks for (tail, n=1000). Unbounded, a
# long-running kernel's memory would grow with every cell.
_HISTORY_LIMIT = 1000
_HISTORY_OUTPUT_CHARS = 4096

_UNSUPPORTED_CONTROL = (
    "debug_request",
    "create_subshell_request",
    "delete_subshell_request",
    "list_subshell_request",
)


class JuliaKernel(Kernel):
    """Jupyter kernel that runs cells in a supervised Julia process."""

    implementation = "jutul-jkernel"
    implementation_version = __version__
    language = "julia"
    help_links = [  # noqa: RUF012 - ipykernel reads this class attribute
        {"text": "Julia documentation", "url": "https://docs.julialang.org/"},
        {"text": "Julia discourse", "url": "https://discourse.julialang.org/"},
    ]
    # ipykernel sleeps this long before every execute_reply, against a flush race of its
    # OutStreams; this kernel publishes everything itself before it replies.
    _execute_sleep = 0.0
    # Comm messages have no reply, so ipykernel's base class registers no handler for them and
    # drops them; these three get one each.
    msg_types = [*Kernel.msg_types, "comm_open", "comm_msg", "comm_close"]  # noqa: RUF012
    # IPKernelApp passes these to every kernel; declared so traitlets accepts them.
    user_ns = DictTrait(allow_none=True)
    debugpy_stream = AnyTrait(allow_none=True)
    # `python -m jutul_jkernel` builds the supervisor, and launches Julia, before it imports
    # ipykernel: Julia boots during those imports. The next kernel made takes it from here.
    prepared_supervisor: ClassVar[JuliaSupervisor | None] = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        supervisor, JuliaKernel.prepared_supervisor = JuliaKernel.prepared_supervisor, None
        # A private Xvfb comes with Julia when the kernelspec asks for one (install --xvfb).
        self.supervisor: JuliaSupervisor = supervisor or supervisor_from_env()
        self.supervisor.route_stray_output(
            OutputSink(
                stream=self._stray_output,
                display=self._stray_display,
                backpressure=self._iopub_backpressure,
                comm=lambda sent: self._publish_comm(sent, self._last_parent),
                julia_ended=self._close_all_comms,
            )
        )
        self._unsynced_bytes = 0
        try:
            self._is_complete_wait = settings.env_seconds(
                settings.IS_COMPLETE_WAIT, _IS_COMPLETE_WAIT
            )
        except ValueError as exc:  # a bad value is logged, not fatal
            self.log.warning("%s; using %g", exc, _IS_COMPLETE_WAIT)
            self._is_complete_wait = _IS_COMPLETE_WAIT
        self._loop: asyncio.AbstractEventLoop | None = None
        self._julia_start: asyncio.Task[None] | None = None
        self._history: deque[tuple[int, int, str, str | None]] = deque(maxlen=_HISTORY_LIMIT)
        self._stored = 0  # executions that stored history: see execution_count
        self._last_parent: dict[str, Any] | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        # Set while no cell or comm callback runs or waits to, on the main loop (created there:
        # see _start_julia); _running counts them.
        self._no_cell: asyncio.Event | None = None
        self._running = 0
        # The last comm message queued for Julia: each waits for the one before (see
        # _comm_received), and a cell for all of them.
        self._comm_queue: asyncio.Task[None] | None = None
        self._open_comms: dict[str, str] = {}  # comm id -> target name, open on both sides
        self._control_received = 0  # control messages received (control thread only)
        self._control_started = 0  # control messages whose handling began
        for msg_type in _UNSUPPORTED_CONTROL:
            self.control_handlers[msg_type] = self._unsupported_request

    @property
    def _sess(self) -> Session:
        assert self.session is not None, "the kernel app sets a session before any message"
        return self.session

    # ---- lifecycle ----

    def start(self) -> None:
        """Register handlers, then start Julia in the background on the main loop."""
        super().start()
        self.io_loop.add_callback(self._start_julia)
        signal.signal(signal.SIGINT, self._on_sigint)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        atexit.register(self.supervisor.kill_now)

    async def _start_julia(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._no_cell = asyncio.Event()
        self._no_cell.set()
        self._julia_start = asyncio.ensure_future(self._start_quietly())

    async def _start_quietly(self) -> None:
        try:
            await self.supervisor.start()
        except JuliaStartupError as exc:
            if self.supervisor.shut_down:  # a shutdown or restart came first: nothing failed
                self.log.debug("Julia's start ended by the shutdown: %s", exc)
                return
            # Reported to the user by the first cell, which tries again.
            self.log.error("Julia did not start: %s", exc)

    async def _julia_ready(self, timeout: float) -> None:
        """Wait (bounded) until Julia started or failed to; callable from any thread's loop."""
        if self._julia_start is not None:
            await self._wait_on_main_loop(asyncio.shield(self._julia_start), timeout)

    async def _cell_settled(self, timeout: float) -> bool:
        """Wait (bounded) until no cell runs; callable from any thread's loop. Whether none
        runs now."""
        no_cell = self._no_cell
        if no_cell is not None and not no_cell.is_set():
            await self._wait_on_main_loop(no_cell.wait(), timeout)
        return no_cell is None or no_cell.is_set()

    @contextlib.contextmanager
    def _cell_running(self) -> Iterator[None]:
        """Mark a cell or a comm callback as running (or waiting to) until the block ends."""
        self._running += 1
        if self._no_cell is not None:
            self._no_cell.clear()
        try:
            yield
        finally:
            self._running -= 1
            if self._running == 0 and self._no_cell is not None:
                self._no_cell.set()

    async def _wait_on_main_loop(self, awaitable: Awaitable[Any], timeout: float) -> None:
        """Await ``awaitable`` on the main loop for at most ``timeout`` seconds, from any loop.

        The control thread has a loop of its own; the main loop's futures and events belong to
        the main loop and must be awaited there.
        """
        if self._loop is None:
            return

        async def bounded() -> None:
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(awaitable, timeout)

        if asyncio.get_running_loop() is self._loop:
            await bounded()
            return
        future = asyncio.run_coroutine_threadsafe(bounded(), self._loop)
        with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
            await asyncio.wait_for(asyncio.wrap_future(future), timeout + 1)

    def pre_handler_hook(self) -> None:
        """Keep our SIGINT handler: ipykernel's would raise KeyboardInterrupt in the loop."""

    def post_handler_hook(self) -> None:
        """Nothing to restore (see pre_handler_hook)."""

    def _on_sigint(self, signum: int, frame: object) -> None:
        # A client in signal mode (or Ctrl-C on a console) means "interrupt the cell".
        self._interrupt_threadsafe()

    def _on_sigterm(self, signum: int, frame: object) -> None:
        # jupyter_client SIGTERMs a kernel that did not stop in time: take Julia along, then
        # die by SIGTERM as expected.
        self.supervisor.kill_now()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    def _interrupt_threadsafe(self) -> None:
        if self._loop is not None:
            self._loop.call_soon_threadsafe(self._spawn, self.supervisor.interrupt())

    def _spawn(self, coro: Coroutine[Any, Any, Any]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def interrupt_request(self, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
        """Interrupt the running cell (escalating in the supervisor); reply at once.

        The handler returns only once the interrupted cell has published its outcome (bounded),
        because ipykernel publishes this request's `idle` when it returns, and jupyter_console
        stops reading a cell's IOPub at the first `idle` of its session, whichever request it
        belongs to. It then reads the execute_reply, which travels on another socket and can
        overtake the cell's error: Ctrl-C printed a new prompt and no InterruptException. With
        the wait, the cell's error is queued on IOPub before this `idle`, and IOPub keeps order.
        """
        self._interrupt_threadsafe()
        self._sess.send(stream, "interrupt_reply", {"status": "ok"}, parent, ident=ident)
        settled = asyncio.ensure_future(self._cell_settled(_INTERRUPT_SETTLE_WAIT))
        queued = asyncio.ensure_future(self._control_request_queued())
        try:
            await asyncio.wait({settled, queued}, return_when=asyncio.FIRST_COMPLETED)
            if not settled.done() or not settled.result():
                # A console then shows a prompt before the cell's error.
                self.log.warning(
                    "the interrupted cell had not ended when %s; its idle goes out first",
                    "another control request came" if queued.done() else "the wait ran out",
                )
        finally:
            queued.cancel()
            settled.cancel()

    # ipykernel handles control messages one at a time (a lock in 7.x, a queue in 6.x), so a
    # handler that waits holds every later one behind it. These two count them, so that
    # interrupt_request's wait for its cell ends as soon as another is queued.
    def dispatch_control(self, msg: Any) -> Any:
        self._control_received += 1
        return super().dispatch_control(msg)

    async def dispatch_shell(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        # ipykernel 7 passes concurrent=True for a comm message it runs beside the request
        # holding the shell, in a copied context (kernelbase.py, shell_main); 6.x never does.
        _BESIDE_ANOTHER.set(bool(kwargs.get("concurrent", False)))
        await super().dispatch_shell(msg, *args, **kwargs)

    async def process_control(self, msg: Any) -> None:
        self._control_started += 1
        await super().process_control(msg)

    async def _control_request_queued(self) -> None:
        while self._control_received <= self._control_started:
            await asyncio.sleep(_CONTROL_QUEUE_POLL)

    async def do_shutdown(self, restart: bool) -> dict[str, Any]:
        """Stop Julia within jupyter_client's patience, whether or not a restart follows."""
        for out in (sys.stdout, sys.stderr):
            if hasattr(out, "flush_timeout"):
                out.flush_timeout = 1.0  # ipykernel's 10 s default would outlast our budget
        if self._loop is not None:
            future = asyncio.run_coroutine_threadsafe(self.supervisor.shutdown(), self._loop)
            try:
                await asyncio.wait_for(asyncio.wrap_future(future), _SHUTDOWN_BUDGET)
            except (asyncio.TimeoutError, TimeoutError):
                self.log.warning("Julia did not stop within %.1f s; killing it", _SHUTDOWN_BUDGET)
                self.supervisor.kill_now()
        else:
            self.supervisor.kill_now()
        return {"status": "ok", "restart": restart}

    # ---- kernel_info ----

    @property
    def language_info(self) -> dict[str, Any]:  # type: ignore[override]
        return {
            "name": "julia",
            "version": self.supervisor.julia_version or "unknown",
            "mimetype": "application/julia",
            "file_extension": ".jl",
            "pygments_lexer": "julia",
            "codemirror_mode": "julia",
        }

    @property
    def banner(self) -> str:  # type: ignore[override]
        version = self.supervisor.julia_version or "(not started)"
        # The binary Julia reports, not the command the spec names: with juliaup's launcher
        # (`julia +1.10`) this says which Julia the channel chose.
        path = self.supervisor.julia_path
        where = f" ({path})" if path else ""
        return (
            f"Julia {version}{where}, supervised by jutul-jkernel {__version__}.\n"
            "Interrupts keep your variables; if Julia crashes the cell says why and the next "
            "cell starts a fresh Julia."
        )

    @property
    def kernel_info(self) -> dict[str, Any]:
        # Built here rather than by ipykernel, whose version imports its debugger (50-140 ms at
        # start-up) to list features this kernel would then have to remove: neither kernel
        # subshells nor the debugger is implemented, so none is advertised.
        return {
            "protocol_version": kernel_protocol_version,
            "implementation": self.implementation,
            "implementation_version": self.implementation_version,
            "language_info": self.language_info,
            "banner": self.banner,
            "help_links": self.help_links,
            "supported_features": [],
        }

    async def kernel_info_request(self, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
        """Answer once Julia has reported its version (or could not start)."""
        await self._julia_ready(_KERNEL_INFO_WAIT)
        await super().kernel_info_request(stream, ident, parent)

    async def _unsupported_request(self, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
        self._reply_unsupported(stream, ident, parent)

    def _reply_unsupported(self, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
        msg_type = parent["header"]["msg_type"]
        reply_type = msg_type.rsplit("_", 1)[0] + "_reply"
        content = {
            "status": "error",
            "ename": "NotImplementedError",
            "evalue": f"jutul-jkernel does not support {msg_type}",
            "traceback": [],
        }
        self._sess.send(stream, reply_type, content, parent, ident=ident)

    def should_handle(self, stream: Any, msg: dict[str, Any], idents: Any) -> bool:
        """Reply with an error to shell requests this kernel has no handler for."""
        msg_type = msg["header"]["msg_type"]
        if msg_type not in self.shell_handlers and msg_type.endswith("_request"):
            self._reply_unsupported(stream, idents, msg)
            return False
        return True

    # ---- comms ----

    async def comm_open(self, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
        """A frontend opens a comm: Julia's ``register_comm`` for the target accepts it, or
        Julia closes it (a target nobody registered), as ipykernel does."""
        await self._comm_received(parent)

    async def comm_msg(self, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
        """A message to an open comm: its ``on_msg`` runs in Julia."""
        await self._comm_received(parent)

    async def comm_close(self, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
        """The frontend closes a comm: its ``on_close`` runs in Julia."""
        await self._comm_received(parent)

    async def _comm_received(self, msg: dict[str, Any]) -> None:
        """Queue a comm message for Julia, after those before it; wait for it only when it
        has the shell to itself.

        ipykernel 7 runs a comm message that arrives while another request holds the shell
        (a cell, a comm_open waiting for Julia) beside that request, and when the handler
        returns it restores the shell parent it saw when the message came (kernelbase.py,
        shell_main). Every shell message shares that parent, and Julia runs the callback only
        after the cell, so a handler that waited for it put an old parent back under the next
        cell: that cell's idle went out as another's, and JupyterLab kept it at [*] for good.
        Beside another request, then, the handler returns once the message is queued.
        """
        before = self._comm_queue
        delivery = asyncio.ensure_future(self._deliver_comm_after(before, msg))
        self._comm_queue = delivery
        if _BESIDE_ANOTHER.get():
            self._tasks.add(delivery)
            delivery.add_done_callback(self._comm_delivered)
            return
        await delivery  # ipykernel brackets it with busy and idle

    async def _deliver_comm_after(
        self, before: asyncio.Task[None] | None, msg: dict[str, Any]
    ) -> None:
        with self._cell_running():
            if before is not None:
                await asyncio.wait({before})  # its outcome is its own handler's to report
            await self._deliver_comm(msg)

    def _comm_delivered(self, delivery: asyncio.Task[None]) -> None:
        self._tasks.discard(delivery)
        exc = None if delivery.cancelled() else delivery.exception()
        if exc is not None:
            self.log.error("a comm message failed", exc_info=exc)

    async def _comms_delivered(self) -> None:
        """Wait until every comm message received so far has run in Julia (unbounded, as a
        cell waits for the one before it; an interrupt ends a callback that hangs)."""
        if self._comm_queue is not None and not self._comm_queue.done():
            await asyncio.wait({self._comm_queue})

    async def _deliver_comm(self, msg: dict[str, Any]) -> None:
        """Run a frontend's comm message in Julia (JuliaSupervisor.deliver_comm). What its
        callback prints, displays and sends goes out with the message as its parent, as
        ipykernel's comm handlers do; ipykernel brackets it with busy and idle, except for one
        that arrives beside another request (see _comm_received)."""
        msg_type = msg.get("header", {}).get("msg_type")
        content = msg.get("content")
        if not isinstance(content, dict) or not isinstance(content.get("comm_id"), str):
            self.log.warning("dropped a %s without a comm_id", msg_type)
            return
        metadata = msg.get("metadata")
        message = CommMessage(
            msg_type,
            content,
            metadata if isinstance(metadata, dict) else {},
            tuple(bytes(b) for b in msg.get("buffers") or ()),
        )
        if msg_type == "comm_open":
            if not await self._comm_target_may_be_known(content.get("target_name")):
                # As ipykernel does for a target it does not know, and at once even while a
                # cell runs: a widget manager opening its control comm is not kept waiting.
                self._publish_comm(
                    CommMessage("comm_close", {"comm_id": message.comm_id, "data": {}}), msg
                )
                return
            self._open_comms[message.comm_id] = str(content.get("target_name", ""))
        elif msg_type == "comm_close":
            self._open_comms.pop(message.comm_id, None)
        out = StreamCoalescer(lambda name, text: self._publish_stream(name, text, msg))

        def on_display(shown: Display) -> None:
            out.flush()
            self._publish_display(shown, msg)

        def on_comm(sent: CommMessage) -> None:
            out.flush()
            self._publish_comm(sent, msg)

        sink = OutputSink(
            stream=out.write,
            display=on_display,
            comm=on_comm,
            backpressure=self._iopub_backpressure,
        )
        try:
            await self._julia_ready(_KERNEL_INFO_WAIT)
            result = await self.supervisor.deliver_comm(message, sink)
        except (JuliaDiedError, JuliaStartupError) as exc:
            out.flush(final=True)
            if msg_type == "comm_open":  # no Julia took it: the frontend's side stays alone
                self._publish_comm(
                    CommMessage("comm_close", {"comm_id": message.comm_id, "data": {}}), msg
                )
            self._publish_stream("stderr", f"[jutul-jkernel] {msg_type} not handled: {exc}\n", msg)
            return
        finally:
            out.flush(final=True)
        if result.notice:
            self._publish_stream("stderr", f"[jutul-jkernel] {result.notice}\n", msg)
        if result.status != "ok":  # interrupted: the callback stopped, the state is kept
            self._publish_stream("stderr", "\n".join(result.error_info().traceback) + "\n", msg)

    async def _comm_target_may_be_known(self, target: object) -> bool:
        """False only when Julia says no code takes comms to ``target``; without an answer
        within _COMM_TARGET_WAIT (Julia computing without yielding), the comm_open goes to
        Julia, which decides once the cell has ended."""
        if not isinstance(target, str) or not target:
            return False
        if not self.supervisor.alive:
            return True  # the delivery starts Julia, or says why it cannot
        try:
            return await asyncio.wait_for(
                self.supervisor.knows_comm_target(target), _COMM_TARGET_WAIT
            )
        except (JuliaDiedError, JuliaStartupError, TimeoutError, asyncio.TimeoutError):
            return True

    def _publish_comm(self, message: CommMessage, parent: dict[str, Any] | None) -> None:
        """Publish a comm message Julia sent, keeping account of the comms open."""
        if message.msg_type == "comm_open":
            self._open_comms[message.comm_id] = str(message.content.get("target_name", ""))
        elif message.msg_type == "comm_close":
            self._open_comms.pop(message.comm_id, None)
        self._sess.send(
            self.iopub_socket,
            message.msg_type,
            message.content,
            parent=parent,
            metadata=message.metadata,
            buffers=list(message.buffers),
            ident=self._topic(message.msg_type),
        )

    def _close_all_comms(self) -> None:
        """Julia ended (a death, a restart, shutdown): close every comm it had, so that the
        frontend shows no widget that nothing answers any more."""
        for comm_id in list(self._open_comms):
            self._publish_comm(
                CommMessage("comm_close", {"comm_id": comm_id, "data": {}}), self._last_parent
            )

    async def comm_info_request(self, stream: Any, ident: Any, parent: dict[str, Any]) -> None:
        """The comms open now, those of one target if the request names it."""
        target = parent.get("content", {}).get("target_name")
        comms = {
            comm_id: {"target_name": name}
            for comm_id, name in self._open_comms.items()
            if target is None or name == target
        }
        self._sess.send(
            stream, "comm_info_reply", {"status": "ok", "comms": comms}, parent, ident=ident
        )

    # ---- execution ----

    # Only executions that store history are counted (messaging spec, execute_request), as
    # ipykernel's IPythonKernel does: a tool's `store_history: false` request takes no number,
    # and leaves In, Out and ans alone. Kernel.execute_request adds one before each non-silent
    # request and publishes the sum on execute_input; like IPythonKernel (ipkernel.py
    # `execution_count`), that is the number the next cell that stores history gets, and the
    # increment is ignored.
    @property
    def execution_count(self) -> int:
        return self._stored + 1

    @execution_count.setter
    def execution_count(self, value: int) -> None:
        pass

    async def do_execute(
        self,
        code: str,
        silent: bool,
        store_history: bool = True,
        user_expressions: dict[str, str] | None = None,
        allow_stdin: bool = False,
        *,
        cell_meta: dict[str, Any] | None = None,
        cell_id: str | None = None,
    ) -> dict[str, Any]:
        """Run a cell in Julia, publishing its output, displays and result as they come."""
        # Everything of the cell is queued on IOPub when the block ends (see interrupt_request).
        with self._cell_running():
            return await self._execute(code, silent, store_history, user_expressions, allow_stdin)

    async def _execute(
        self,
        code: str,
        silent: bool,
        store_history: bool,
        user_expressions: dict[str, str] | None,
        allow_stdin: bool,
    ) -> dict[str, Any]:
        parent = self.get_parent("shell")
        ident = self._get_shell_context_var(self._shell_parent_ident)
        self._last_parent = parent
        # A request that stores no history replies with the last stored count (IPythonKernel).
        stores = store_history and not silent
        if stores:
            self._stored += 1
        count = self._stored
        await self._comms_delivered()  # those received before the cell run before it
        await self._julia_ready(_KERNEL_INFO_WAIT)

        if code.strip() in ("exit", "quit"):
            # A bare word would just show the function; consoles leave on this payload, as
            # with IPython. exit() keeps its Julia meaning (the next cell restarts Julia).
            return {
                "status": "ok",
                "execution_count": count,
                "user_expressions": {},
                "payload": [{"source": "ask_exit", "keepkernel": False}],
            }

        out = StreamCoalescer(lambda name, text: self._publish_stream(name, text, parent))

        def on_display(shown: Display) -> None:
            if silent:
                return
            out.flush()
            self._publish_display(shown, parent)

        def on_comm(sent: CommMessage) -> None:  # even when silent: a widget needs its model
            out.flush()
            self._publish_comm(sent, parent)

        async def on_input(prompt: str, password: bool) -> str:
            out.flush()
            return await self._ask_input(prompt, password, parent, ident)

        try:
            sink = OutputSink(
                stream=None if silent else out.write,
                display=on_display,
                comm=on_comm,
                input=on_input if allow_stdin else None,
                backpressure=self._iopub_backpressure,
            )
            # Only a named execution becomes In[n], Out[n] and ans (supervisor.execute).
            result = await self.supervisor.execute(
                code, sink, name=f"In[{count}]" if stores else None
            )
        except (JuliaDiedError, JuliaStartupError) as exc:
            out.flush(final=True)
            return self._error_reply(
                exc.ename, str(exc), str(exc).splitlines(), parent, count, silent
            )
        out.flush(final=True)
        if result.notice and not silent:
            self._publish_stream("stderr", f"[jutul-jkernel] {result.notice}\n", parent)
        if stores:
            shown = result.text[:_HISTORY_OUTPUT_CHARS] if result.status == "ok" else None
            self._history.append((1, count, code, shown))

        if result.status != "ok":
            err = result.error_info()
            return self._error_reply(err.ename, err.evalue, err.traceback, parent, count, silent)

        if not silent and (result.text or result.data):
            self._sess.send(
                self.iopub_socket,
                "execute_result",
                {"execution_count": count, "data": _bundle(result, self.log), "metadata": {}},
                parent=parent,
                ident=self._topic("execute_result"),
            )
        reply: dict[str, Any] = {
            "status": "ok",
            "execution_count": count,
            "payload": result.payload,
            "user_expressions": {},
        }
        if user_expressions:
            reply["user_expressions"] = await self._user_expressions(user_expressions)
        return reply

    def _error_reply(
        self,
        ename: str,
        evalue: str,
        traceback: list[str],
        parent: dict[str, Any],
        count: int,
        silent: bool,
    ) -> dict[str, Any]:
        content = {"ename": ename, "evalue": evalue, "traceback": traceback}
        if not silent:
            self._sess.send(
                self.iopub_socket, "error", content, parent=parent, ident=self._topic("error")
            )
        return {"status": "error", "execution_count": count, **content}

    async def _user_expressions(self, expressions: dict[str, str]) -> dict[str, Any]:
        answers: dict[str, Any] = {}
        for name, expr in expressions.items():
            try:
                r = await self.supervisor.execute(expr)
            except (JuliaDiedError, JuliaStartupError) as exc:
                answers[name] = {
                    "status": "error",
                    "ename": exc.ename,
                    "evalue": str(exc),
                    "traceback": [],
                }
                continue
            if r.status == "ok":
                answers[name] = {"status": "ok", "data": _bundle(r, self.log), "metadata": {}}
            else:
                err = r.error_info()
                answers[name] = {
                    "status": "error",
                    "ename": err.ename,
                    "evalue": err.evalue,
                    "traceback": err.traceback,
                }
        return answers

    # ---- publishing ----

    async def _iopub_backpressure(self) -> None:
        """Wait for the IOPub thread to send its backlog once enough output was queued."""
        if self._unsynced_bytes < _IOPUB_SYNC_BYTES or self.iopub_thread is None:
            return
        self._unsynced_bytes = 0
        loop = asyncio.get_running_loop()
        caught_up: asyncio.Future[None] = loop.create_future()

        def resolve() -> None:
            if not caught_up.done():
                caught_up.set_result(None)

        def done() -> None:  # runs on the IOPub thread after everything queued before it
            loop.call_soon_threadsafe(resolve)

        self.iopub_thread.schedule(done)
        try:
            await asyncio.wait_for(caught_up, _IOPUB_SYNC_TIMEOUT)
        except (asyncio.TimeoutError, TimeoutError):
            self.log.warning("the IOPub thread is %.0f s behind", _IOPUB_SYNC_TIMEOUT)

    def _publish_stream(self, name: str, text: str, parent: dict[str, Any] | None) -> None:
        self._unsynced_bytes += len(text)
        self._sess.send(
            self.iopub_socket,
            "stream",
            {"name": name, "text": text},
            parent=parent,
            ident=self._topic(f"stream.{name}"),
        )

    def _publish_display(self, shown: Display, parent: dict[str, Any]) -> None:
        content = shown.content()
        if "data" in content:
            content["data"] = _decode_json_values(shown.data, self.log)
        self._sess.send(
            self.iopub_socket, shown.kind, content, parent=parent, ident=self._topic(shown.kind)
        )

    def _stray_output(self, stream: str, data: bytes) -> None:
        """Output between cells (a background task printing) goes to the last cell."""
        self._publish_stream(stream, data.decode("utf-8", "replace"), self._last_parent)

    def _stray_display(self, shown: Display) -> None:
        """A display between cells (a background task) goes to the last cell, as its output."""
        if self._last_parent is not None:
            self._publish_display(shown, self._last_parent)

    # ---- stdin ----

    async def _ask_input(
        self, prompt: str, password: bool, parent: dict[str, Any], ident: Any
    ) -> str:
        """Send input_request on the stdin channel and wait (cancellably) for the reply."""
        sock = self.stdin_socket
        while True:  # drop stale replies, e.g. to a request whose cell was interrupted
            try:
                sock.recv_multipart(zmq.NOBLOCK)
            except zmq.Again:
                break
        self._sess.send(
            sock, "input_request", {"prompt": prompt, "password": password}, parent, ident=ident
        )
        while True:
            if sock.poll(0):
                _, reply = self._sess.recv(sock, mode=zmq.NOBLOCK)
                if reply is not None:
                    value = reply["content"]["value"]
                    return str(value)
            await asyncio.sleep(_INPUT_POLL)

    # ---- completion, inspection, history ----

    async def do_complete(self, code: str, cursor_pos: int | None) -> dict[str, Any]:
        """Handle a completion request with the REPL's completions."""
        cursor = len(code) if cursor_pos is None else cursor_pos
        try:
            c = await self.supervisor.complete(code, cursor)
        except (JuliaDiedError, JuliaStartupError, TimeoutError) as exc:
            return _query_failed(exc)
        return {
            "status": "ok",
            "matches": c.get("matches", []),
            "cursor_start": c.get("cursor_start", cursor),
            "cursor_end": c.get("cursor_end", cursor),
            "metadata": {},
        }

    async def do_inspect(
        self,
        code: str,
        cursor_pos: int,
        detail_level: int = 0,
        omit_sections: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """Handle an inspect request with the docstring `?name` would show."""
        try:
            doc = await self.supervisor.inspect(code, cursor_pos)
        except (JuliaDiedError, JuliaStartupError, TimeoutError) as exc:
            return _query_failed(exc)
        found = bool(doc.get("found"))
        return {
            "status": "ok",
            "found": found,
            "data": doc.get("data", {}) if found else {},
            "metadata": {},
        }

    async def do_is_complete(self, code: str) -> dict[str, Any]:
        """Handle an is_complete request by parsing the code in Julia."""
        try:
            answer = await asyncio.wait_for(
                self.supervisor.is_complete(code), self._is_complete_wait
            )
        except (JuliaDiedError, JuliaStartupError, TimeoutError, asyncio.TimeoutError):
            return {"status": "unknown"}
        reply = {"status": answer.get("status", "unknown")}
        if reply["status"] == "incomplete":
            reply["indent"] = answer.get("indent", "")
        return reply

    async def do_history(
        self,
        hist_access_type: str,
        output: bool,
        raw: bool,
        session: int | None = None,
        start: int | None = None,
        stop: int | None = None,
        n: int | None = None,
        pattern: str | None = None,
        unique: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Handle a history request over this session's cells: tail, range or search."""
        entries = list(self._history)
        if hist_access_type == "tail":
            selected = entries[-n:] if n else entries
        elif hist_access_type == "range":
            lo = start or 0
            hi = stop if stop is not None else sys.maxsize
            selected = [e for e in entries if session in (None, 0, e[0]) and lo <= e[1] < hi]
        elif hist_access_type == "search":
            matcher = pattern or "*"
            selected = [e for e in entries if fnmatch.fnmatchcase(e[2], matcher)]
            if unique:
                seen: set[str] = set()
                deduped = []
                for e in reversed(selected):
                    if e[2] not in seen:
                        seen.add(e[2])
                        deduped.append(e)
                selected = list(reversed(deduped))
            if n:
                selected = selected[-n:]
        else:
            return {
                "status": "error",
                "ename": "ValueError",
                "evalue": f"unknown hist_access_type {hist_access_type!r}",
                "traceback": [],
                "history": [],
            }
        history = [(s, line, (code, out) if output else code) for s, line, code, out in selected]
        return {"status": "ok", "history": history}


def _query_failed(exc: Exception) -> dict[str, Any]:
    """The error reply of a completion or inspection that Julia could not answer."""
    return {"status": "error", "ename": type(exc).__name__, "evalue": str(exc), "traceback": []}


def _bundle(result: ExecutionResult, log: logging.Logger | Any) -> dict[str, Any]:
    data = dict(result.data) if result.data else {"text/plain": result.text}
    return _decode_json_values(data, log)


def _decode_json_values(data: dict[str, Any], log: logging.Logger | Any) -> dict[str, Any]:
    """JSON types travel as the text Julia's show wrote; Jupyter wants the object."""
    decoded = dict(data)
    for mime, value in data.items():
        if isinstance(value, str) and _JSON_MIME.fullmatch(mime):
            try:
                decoded[mime] = json.loads(value)
            except ValueError:
                log.warning("dropped %s output that is not valid JSON", mime)
                del decoded[mime]
    return decoded
