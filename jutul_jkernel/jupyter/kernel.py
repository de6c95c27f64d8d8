"""The Jupyter kernel "Julia (supervised)": Jupyter messages in, supervisor calls out.

An ipykernel ``Kernel`` subclass that never touches pids or sockets itself: it maps
execute / complete / inspect / is_complete / history / interrupt / shutdown requests onto a
:class:`~jutul_jkernel.supervisor.JuliaSupervisor` and publishes what comes back on IOPub with
the request as parent (:mod:`jutul_jkernel.jupyter.publish`); comm messages go through
:mod:`jutul_jkernel.jupyter.comms`. Everything a cell produces is published before its reply.

ipykernel facts this relies on (checked with ipykernel 7.4): interrupt_request and shutdown_request
run on the control thread while do_execute awaits on the main loop, so they hand work to the main
loop thread-safely (:mod:`jutul_jkernel.jupyter.threads` says which thread runs what); the stock
interrupt would SIGINT our own process group, and the stock pre-handler hook turns SIGINT into a
KeyboardInterrupt that kills the asyncio loop, so both are replaced. Everything of a cell is
published before its reply, since clients stop reading IOPub at the cell's idle.

Subshells (messaging 5.5): a request that names a subshell runs beside the main shell's, as an
asyncio task on the main loop, in order within its subshell (:mod:`.subshells`); its cells go to
Julia through ``JuliaSupervisor.execute_beside``. Interrupts reach the main shell only, and all
shells share one execution count, as in ipykernel.
"""

from __future__ import annotations

import asyncio
import atexit
import inspect
import os
import signal
import sys
from collections.abc import Awaitable, Callable
from contextvars import ContextVar
from typing import Any, ClassVar

from ipykernel._version import kernel_protocol_version
from ipykernel.kernelbase import Kernel
from ipykernel.subshell_manager import UnknownSubshellError
from jupyter_client.session import Session
from traitlets import Any as AnyTrait
from traitlets import Dict as DictTrait

from jutul_jkernel import __version__, settings
from jutul_jkernel.jupyter import stdin
from jutul_jkernel.jupyter.comms import CommRouter
from jutul_jkernel.jupyter.history import History
from jutul_jkernel.jupyter.publish import Parent, Publisher
from jutul_jkernel.jupyter.subshells import (
    Subshell,
    Subshells,
    TooManySubshellsError,
    error_reply,
)
from jutul_jkernel.jupyter.threads import ControlBacklog, MainLoop
from jutul_jkernel.supervisor.coalesce import StreamCoalescer
from jutul_jkernel.supervisor.errors import JuliaDiedError, JuliaStartupError
from jutul_jkernel.supervisor.from_env import supervisor_from_env
from jutul_jkernel.supervisor.interrupts import settle_wait
from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor
from jutul_jkernel.supervisor.output_sink import CommMessage, Display, OutputSink

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
# Whether the shell message being handled is one ipykernel 7 dispatches beside the request
# that holds the shell (a comm message arriving while a cell runs): see CommRouter.received.
_BESIDE_ANOTHER: ContextVar[bool] = ContextVar("jutul_jkernel_beside_another", default=False)
# jupyter_client gives a kernel 2.5 s after shutdown_request before SIGTERM.
_SHUTDOWN_BUDGET = 2.0

_UNSUPPORTED_CONTROL = ("debug_request",)
_COMM_MESSAGES = ("comm_open", "comm_msg", "comm_close")


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
        self._main_loop = MainLoop()  # see jupyter/threads.py: which thread runs what
        self._control_backlog = ControlBacklog()
        self._iopub = Publisher(self.session, self.iopub_socket, self._topic, self.log)
        self._comms = CommRouter(
            self.supervisor,
            self._iopub,
            self._sink,
            self._main_loop,
            lambda: self._julia_ready(_KERNEL_INFO_WAIT),
            self.log,
        )
        self.supervisor.route_stray_output(
            OutputSink(
                stream=self._stray_output,
                display=self._stray_display,
                backpressure=self._iopub.backpressure,
                comm=lambda sent: self._comms.publish(sent, self._last_parent),
                julia_ended=lambda: self._comms.close_all(self._last_parent),
            )
        )
        try:
            self._is_complete_wait = settings.env_seconds(
                settings.IS_COMPLETE_WAIT, _IS_COMPLETE_WAIT
            )
        except ValueError as exc:  # a bad value is logged, not fatal
            self.log.warning("%s; using %g", exc, _IS_COMPLETE_WAIT)
            self._is_complete_wait = _IS_COMPLETE_WAIT
        self._julia_start: asyncio.Task[None] | None = None
        self._history = History()
        self._stored = 0  # executions that stored history: see execution_count
        self._last_parent: Parent | None = None
        self._subshells = Subshells()  # jupyter/subshells.py
        for msg_type in _UNSUPPORTED_CONTROL:
            self.control_handlers[msg_type] = self._unsupported_request

    @property
    def _sess(self) -> Session:
        assert self.session is not None, "the kernel app sets a session before any message"
        return self.session

    # ---- lifecycle and interrupts ----

    def start(self) -> None:
        """Register handlers, then start Julia in the background on the main loop."""
        super().start()
        self.io_loop.add_callback(self._start_julia)
        signal.signal(signal.SIGINT, self._on_sigint)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        atexit.register(self.supervisor.kill_now)

    async def _start_julia(self) -> None:
        self._main_loop.bind()
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
        start = self._julia_start
        # Once started, no hop through the main loop (~46 us a cell). done() only reads the
        # task's state, which is safe from the control thread.
        if start is not None and not start.done():
            await self._main_loop.run(lambda: asyncio.shield(start), timeout)

    def pre_handler_hook(self) -> None:
        """Keep our SIGINT handler: ipykernel's would raise KeyboardInterrupt in the loop."""

    def post_handler_hook(self) -> None:
        """Nothing to restore (see pre_handler_hook)."""

    def _on_sigint(self, signum: int, frame: object) -> None:
        # A client in signal mode (or Ctrl-C on a console) means "interrupt the cell".
        self._main_loop.spawn_threadsafe(self.supervisor.interrupt)

    def _on_sigterm(self, signum: int, frame: object) -> None:
        # jupyter_client SIGTERMs a kernel that did not stop in time: take Julia along, then
        # die by SIGTERM as expected.
        self.supervisor.kill_now()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    async def interrupt_request(self, stream: Any, ident: Any, parent: Parent) -> None:
        """Interrupt the running cell (escalating in the supervisor); reply at once.

        The handler returns only once the interrupted cell has published its outcome (bounded),
        because ipykernel publishes this request's `idle` when it returns, and jupyter_console
        stops reading a cell's IOPub at the first `idle` of its session, whichever request it
        belongs to. It then reads the execute_reply, which travels on another socket and can
        overtake the cell's error: Ctrl-C printed a new prompt and no InterruptException. With
        the wait, the cell's error is queued on IOPub before this `idle`, and IOPub keeps order.
        """
        self._main_loop.spawn_threadsafe(self.supervisor.interrupt)
        self._sess.send(stream, "interrupt_reply", {"status": "ok"}, parent, ident=ident)
        settled = asyncio.ensure_future(self._main_loop.idle(_INTERRUPT_SETTLE_WAIT))
        queued = asyncio.ensure_future(self._control_backlog.another_queued())
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

    # ipykernel handles control messages one at a time, so a handler that waits holds every
    # later one behind it: these two keep count (loops.ControlBacklog).
    def dispatch_control(self, msg: Any) -> Any:
        self._control_backlog.received()
        return super().dispatch_control(msg)

    async def process_control(self, msg: Any) -> None:
        self._control_backlog.started()
        await super().process_control(msg)

    async def do_shutdown(self, restart: bool) -> dict[str, Any]:
        """Stop Julia within jupyter_client's patience, whether or not a restart follows."""
        for out in (sys.stdout, sys.stderr):
            if hasattr(out, "flush_timeout"):
                out.flush_timeout = 1.0  # ipykernel's 10 s default would outlast our budget
        if not await self._main_loop.run(self.supervisor.shutdown, _SHUTDOWN_BUDGET):
            if self._main_loop.loop is not None:
                self.log.warning("Julia did not stop within %.1f s; killing it", _SHUTDOWN_BUDGET)
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
        # start-up) to list features this kernel would then have to remove: the debugger is
        # not implemented.
        return {
            "protocol_version": kernel_protocol_version,
            "implementation": self.implementation,
            "implementation_version": self.implementation_version,
            "language_info": self.language_info,
            "banner": self.banner,
            "help_links": self.help_links,
            "supported_features": ["kernel subshells"],
        }

    async def kernel_info_request(self, stream: Any, ident: Any, parent: Parent) -> None:
        """Answer once Julia has reported its version (or could not start)."""
        await self._julia_ready(_KERNEL_INFO_WAIT)
        await super().kernel_info_request(stream, ident, parent)

    async def _unsupported_request(self, stream: Any, ident: Any, parent: Parent) -> None:
        self._reply_unsupported(stream, ident, parent)

    def _reply_unsupported(self, stream: Any, ident: Any, parent: Parent) -> None:
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

    # ---- the shell channel ----

    async def shell_main(self, subshell_id: str | None, msg: Any) -> None:
        """Handle one shell message, read by the main loop itself (jupyter/app.py).

        A message addressed to a subshell runs as a task of its own (``_subshell_main``), in
        a copy of this context, so that its parent is its own: it waits only for the requests
        before it on its subshell. One addressed to a subshell that does not exist gets
        ipykernel's reply for that (busy, an ``UnknownSubshellError`` reply, idle).
        """
        requested = self._subshell_id_of(msg)
        if requested is None:
            if self._main_asyncio_lock.locked() and self._is_kernel_info(msg):
                # A new connection asks this before it can make a subshell (JupyterLab's
                # subshell console waits for it): answered beside the running cell, as on the
                # control channel, and with its own busy and idle.
                self._main_loop.spawn(lambda: self.dispatch_shell(msg, None))
                return
            await super().shell_main(subshell_id, msg)
            return
        subshell = self._subshells.get(requested)
        if subshell is None:
            self._reply_unknown_subshell(msg, requested)
            return
        subshell.received += 1
        number = subshell.received
        self._main_loop.spawn(lambda: self._subshell_main(subshell, msg, number))

    def _subshell_id_of(self, msg: Any) -> str | None:
        """The ``subshell_id`` in a shell message's header, read without its content.

        Most messages are the main shell's, and their header is not parsed here (dispatch_shell
        parses it anyway): bytes that hold neither the key nor a JSON escape (the one way to
        spell the key otherwise) cannot name a subshell. Parsing every header took ~40 us of a
        message's time in the kernel."""
        try:
            _, parts = self._sess.feed_identities(msg, copy=False)
            raw = parts[1].bytes if hasattr(parts[1], "bytes") else parts[1]
            if b"subshell_id" not in raw and b"\\u" not in raw:
                return None
            header = self._sess.unpack(raw)
        except Exception:  # dispatch_shell reports an invalid message
            return None
        sid = header.get("subshell_id") if isinstance(header, dict) else None
        return sid if isinstance(sid, str) else None

    # ---- comms (routed by comms.CommRouter) ----

    async def dispatch_shell(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        # ipykernel 7 passes concurrent=True for a comm message it runs beside the request
        # holding the shell, in a copied context (kernelbase.py, shell_main); 6.x never does.
        _BESIDE_ANOTHER.set(bool(kwargs.get("concurrent", False)))
        await super().dispatch_shell(msg, *args, **kwargs)

    async def comm_open(self, stream: Any, ident: Any, parent: Parent) -> None:
        """A frontend opens a comm: Julia's ``register_comm`` for the target accepts it, or
        Julia closes it (a target nobody registered), as ipykernel does."""
        await self._comm_received(parent)

    async def comm_msg(self, stream: Any, ident: Any, parent: Parent) -> None:
        """A message to an open comm: its ``on_msg`` runs in Julia."""
        await self._comm_received(parent)

    async def comm_close(self, stream: Any, ident: Any, parent: Parent) -> None:
        """The frontend closes a comm: its ``on_close`` runs in Julia."""
        await self._comm_received(parent)

    async def _comm_received(self, msg: Parent) -> None:
        subshell = self._subshell_for(msg)
        await self._comms.received(
            msg,
            beside_another=_BESIDE_ANOTHER.get(),
            shell=subshell.number if subshell is not None else 0,
        )

    async def comm_info_request(self, stream: Any, ident: Any, parent: Parent) -> None:
        """The comms open now, those of one target if the request names it."""
        comms = self._comms.info(parent.get("content", {}).get("target_name"))
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
        subshell = self._subshell_for(self.get_parent("shell"))
        if subshell is not None:  # beside the main shell, which an interrupt does not wait for
            return await self._execute(
                code, silent, store_history, user_expressions, allow_stdin, subshell
            )
        # Everything of the cell is queued on IOPub when the block ends (see interrupt_request).
        with self._main_loop.running():
            return await self._execute(code, silent, store_history, user_expressions, allow_stdin)

    async def _execute(
        self,
        code: str,
        silent: bool,
        store_history: bool,
        user_expressions: dict[str, str] | None,
        allow_stdin: bool,
        subshell: Subshell | None = None,
    ) -> dict[str, Any]:
        parent = self.get_parent("shell")
        ident = self._get_shell_context_var(self._shell_parent_ident)
        if subshell is None:
            self._last_parent = parent
        else:
            subshell.last_parent = parent
        # A request that stores no history replies with the last stored count (IPythonKernel).
        stores = store_history and not silent
        if stores:
            self._stored += 1
        count = self._stored
        if subshell is None:
            await self._comms.delivered()  # those received before the cell run before it
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

        async def ask_input(prompt: str, password: bool) -> str:
            return await stdin.ask(self._sess, self.stdin_socket, prompt, password, parent, ident)

        # In a subshell Julia itself says that stdin is not available.
        asks = allow_stdin and subshell is None
        sink, out = self._sink(parent, silent=silent, ask_input=ask_input if asks else None)
        name = f"In[{count}]" if stores else None
        try:
            # Only a named execution becomes In[n], Out[n] and ans (supervisor.execute).
            if subshell is None:
                result = await self.supervisor.execute(code, sink, name=name)
            else:
                result = await self.supervisor.execute_beside(
                    code, sink, shell=subshell.number, name=name
                )
        except (JuliaDiedError, JuliaStartupError) as exc:
            out.flush(final=True)
            return self._error_reply(
                exc.ename, str(exc), str(exc).splitlines(), parent, count, silent
            )
        out.flush(final=True)
        if result.notice and not silent:
            self._iopub.stream("stderr", f"[jutul-jkernel] {result.notice}\n", parent)
        if stores:
            self._history.add(count, code, result)

        if result.status != "ok":
            err = result.error_info()
            return self._error_reply(err.ename, err.evalue, err.traceback, parent, count, silent)

        if not silent and (result.text or result.data):
            self._iopub.execute_result(count, result, parent)
        reply: dict[str, Any] = {
            "status": "ok",
            "execution_count": count,
            "payload": result.payload,
            "user_expressions": {},
        }
        if user_expressions:
            reply["user_expressions"] = await self._user_expressions(user_expressions, subshell)
        return reply

    def _sink(
        self,
        parent: Parent,
        *,
        silent: bool = False,
        ask_input: Callable[[str, bool], Awaitable[str]] | None = None,
    ) -> tuple[OutputSink, StreamCoalescer]:
        """The sink of one execution, a cell or a comm message's callback, publishing under
        ``parent``, and its coalescer, which the caller flushes (final) when it ends.

        Output is published in the order Julia wrote it: the coalesced streams are flushed
        before a display, a comm message or an input request. A silent execution publishes
        neither streams nor displays, but its comm messages all the same (a widget needs its
        model); without ``ask_input``, readline raises an error in Julia.
        """
        out = StreamCoalescer(lambda name, text: self._iopub.stream(name, text, parent))

        def on_display(shown: Display) -> None:
            if silent:
                return
            out.flush()
            self._iopub.display(shown, parent)

        def on_comm(sent: CommMessage) -> None:
            out.flush()
            self._comms.publish(sent, parent)

        async def on_input(prompt: str, password: bool) -> str:
            assert ask_input is not None
            out.flush()
            return await ask_input(prompt, password)

        sink = OutputSink(
            stream=None if silent else out.write,
            display=on_display,
            comm=on_comm,
            input=None if ask_input is None else on_input,
            backpressure=self._iopub.backpressure,
        )
        return sink, out

    def _error_reply(
        self,
        ename: str,
        evalue: str,
        traceback: list[str],
        parent: Parent,
        count: int,
        silent: bool,
    ) -> dict[str, Any]:
        content = {"ename": ename, "evalue": evalue, "traceback": traceback}
        if not silent:
            self._iopub.send("error", content, parent)
        return {"status": "error", "execution_count": count, **content}

    async def _user_expressions(
        self, expressions: dict[str, str], subshell: Subshell | None = None
    ) -> dict[str, Any]:
        answers: dict[str, Any] = {}
        for name, expr in expressions.items():
            try:
                if subshell is None:
                    r = await self.supervisor.execute(expr)
                else:
                    r = await self.supervisor.execute_beside(expr, shell=subshell.number)
            except (JuliaDiedError, JuliaStartupError) as exc:
                answers[name] = {
                    "status": "error",
                    "ename": exc.ename,
                    "evalue": str(exc),
                    "traceback": [],
                }
                continue
            if r.status == "ok":
                answers[name] = {"status": "ok", "data": self._iopub.bundle(r), "metadata": {}}
            else:
                err = r.error_info()
                answers[name] = {
                    "status": "error",
                    "ename": err.ename,
                    "evalue": err.evalue,
                    "traceback": err.traceback,
                }
        return answers

    # ---- output between executions ----

    def _stray_output(self, stream: str, data: bytes) -> None:
        """Output between cells (a background task printing) goes to the last cell."""
        self._iopub.stream(stream, data.decode("utf-8", "replace"), self._last_parent)

    def _stray_display(self, shown: Display) -> None:
        """A display between cells (a background task) goes to the last cell, as its output."""
        if self._last_parent is not None:
            self._iopub.display(shown, self._last_parent)

    # ---- subshells (jupyter/subshells.py) ----

    async def create_subshell_request(self, stream: Any, ident: Any, parent: Parent) -> None:
        """A new subshell (on the control thread): its id, or why there is none."""
        try:
            content = {"status": "ok", "subshell_id": self._subshells.create().id}
        except TooManySubshellsError as exc:
            content = error_reply(exc)
        self._sess.send(stream, "create_subshell_reply", content, parent, ident=ident)

    async def delete_subshell_request(self, stream: Any, ident: Any, parent: Parent) -> None:
        """Delete a subshell now (on the control thread); the main loop then ends its running
        request and answers those queued behind it (``_retire``)."""
        subshell_id = parent.get("content", {}).get("subshell_id")
        try:
            subshell = self._subshells.delete(str(subshell_id))
        except UnknownSubshellError as exc:
            content = error_reply(exc)
        else:
            content = {"status": "ok"}
            self._main_loop.spawn_threadsafe(lambda: self._retire(subshell))
        self._sess.send(stream, "delete_subshell_reply", content, parent, ident=ident)

    async def list_subshell_request(self, stream: Any, ident: Any, parent: Parent) -> None:
        """The subshells' ids, under the singular key (JEP 91); the main shell is not one."""
        content = {"status": "ok", "subshell_id": self._subshells.ids()}
        self._sess.send(stream, "list_subshell_reply", content, parent, ident=ident)

    def _subshell_for(self, msg: Parent) -> Subshell | None:
        """The subshell a (deserialized) message names, or None for the main shell."""
        subshell_id = msg.get("header", {}).get("subshell_id")
        return None if subshell_id is None else self._subshells.get(subshell_id)

    async def _subshell_main(self, subshell: Subshell, msg: list[Any], number: int) -> None:
        """ipykernel's shell_main for one subshell: its requests one at a time, in order, but
        a comm message that comes while another request holds it, which is dispatched at once
        beside it (as ipykernel does: a running cell may wait for a widget)."""
        self._route_subshell_output(subshell)
        if subshell.lock.locked() and not subshell.deleted and self._is_comm(msg):
            await self._dispatch_subshell(subshell, msg, number, concurrent=True)
            return
        async with subshell.lock:
            if subshell.deleted:
                self._reply_unknown_subshell(msg, subshell.id)
            else:
                await self._dispatch_subshell(subshell, msg, number)

    async def _dispatch_subshell(
        self, subshell: Subshell, msg: list[Any], number: int, *, concurrent: bool = False
    ) -> None:
        """ipykernel's dispatch_shell for a subshell's message (``Kernel.dispatch_shell``, whose
        own stop_on_error and reply socket are the shell-channel thread's, which this kernel
        has not): the request as parent, busy, the handler, idle; an execute_request received
        before an error reply of its subshell is aborted."""
        idents, parts = self._sess.feed_identities(msg, copy=False)
        try:
            request = self._sess.deserialize(parts, content=True, copy=False)
        except Exception:
            self.log.error("Invalid Message", exc_info=True)
            return
        self.set_parent(idents, request, channel="shell")
        _BESIDE_ANOTHER.set(concurrent)
        if not concurrent:
            self._publish_status("busy", "shell")
        msg_type = request["header"]["msg_type"]
        stream = self.shell_stream
        if msg_type == "execute_request" and number <= subshell.abort_up_to:
            self._send_abort_reply(stream, request, idents)
        elif self.should_handle(stream, request, idents):
            handler = self.shell_handlers.get(msg_type)
            if handler is None:
                self.log.warning("Unknown message type: %r", msg_type)
            else:
                try:
                    result = handler(stream, idents, request)
                    if inspect.isawaitable(result):
                        await result
                except Exception:
                    self.log.error("Exception in message handler:", exc_info=True)
        if not concurrent:
            self._publish_status("idle", "shell")

    def _abort_queues(self, subshell_id: str | None = None) -> None:
        """stop_on_error: a subshell's error reply aborts the execute requests received for it
        so far (ipykernel aborts what is queued in the subshell's socket); the main shell's as
        ipykernel does."""
        if subshell_id is None:
            super()._abort_queues(subshell_id)
            return
        subshell = self._subshells.get(subshell_id)
        if subshell is not None:
            subshell.abort_up_to = subshell.received

    async def _retire(self, subshell: Subshell) -> None:
        """A deleted subshell: its running request ends now (an error that says so), and those
        queued behind it get the unknown-id error (``_subshell_main``)."""
        reason = f"subshell {subshell.id!r} was deleted while this request ran"
        self.supervisor.abandon_shell(subshell.number, reason)
        self.supervisor.route_shell_output(subshell.number, None)

    def _route_subshell_output(self, subshell: Subshell) -> None:
        """What a subshell's tasks print or display after its request ended goes under its
        last request (the main shell's last, if it had none)."""
        if subshell.routed:
            return
        subshell.routed = True

        def parent() -> Parent | None:
            return subshell.last_parent or self._last_parent

        def on_display(shown: Display) -> None:
            if parent() is not None:
                self._iopub.display(shown, parent())

        self.supervisor.route_shell_output(
            subshell.number,
            OutputSink(
                stream=lambda name, data: self._iopub.stream(
                    name, data.decode("utf-8", "replace"), parent()
                ),
                display=on_display,
                backpressure=self._iopub.backpressure,
                comm=lambda sent: self._comms.publish(sent, parent()),
            ),
        )

    def _is_comm(self, msg: list[Any]) -> bool:
        return self._msg_type_of(msg) in _COMM_MESSAGES

    def _is_kernel_info(self, msg: list[Any]) -> bool:
        return self._msg_type_of(msg) == "kernel_info_request"

    def _msg_type_of(self, msg: list[Any]) -> str | None:
        try:
            _, parts = self._sess.feed_identities(msg, copy=False)
            header = self._sess.deserialize(parts, content=False, copy=False)["header"]
        except Exception:  # dispatch_shell reports an invalid message
            return None
        msg_type = header.get("msg_type")
        return msg_type if isinstance(msg_type, str) else None

    def _reply_unknown_subshell(self, msg: list[Any], subshell_id: str) -> None:
        """ipykernel's reply for a subshell that is not there (busy, an UnknownSubshellError
        reply, idle: ``Kernel._send_unknown_subshell_reply``)."""
        idents, parts = self._sess.feed_identities(msg, copy=False)
        try:
            request = self._sess.deserialize(parts, content=False, copy=False)
        except Exception:  # ipykernel logs and drops an invalid message the same way
            self.log.error("Invalid message", exc_info=True)
            return
        self._send_unknown_subshell_reply(idents, request, UnknownSubshellError(subshell_id))

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
        return self._history.reply(
            hist_access_type, output, session, start, stop, n, pattern, unique
        )


def _query_failed(exc: Exception) -> dict[str, Any]:
    """The error reply of a completion or inspection that Julia could not answer."""
    return {"status": "error", "ename": type(exc).__name__, "evalue": str(exc), "traceback": []}
