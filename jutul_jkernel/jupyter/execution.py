"""Execution: an execute_request's cell run in Julia, its output published as it comes.

``do_execute`` runs a cell through ``JuliaSupervisor.execute`` (the main shell) or
``execute_beside`` (a subshell), with an ``OutputSink`` that publishes under the request
(:mod:`jutul_jkernel.jupyter.publish`), and returns the reply. Everything a cell produces is
published before its reply, since clients stop reading IOPub at the cell's idle. A Julia error
is a result: published as ``error`` and replied with ``status="error"``. Output between cells
(a background task printing) goes under the main shell's last cell. All shells share one
execution count, as in ipykernel.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any

from jutul_jkernel.jupyter import stdin
from jutul_jkernel.jupyter.kernel_state import JULIA_READY_WAIT, KernelState
from jutul_jkernel.jupyter.publish import Parent
from jutul_jkernel.jupyter.subshells import Subshell
from jutul_jkernel.supervisor.coalesce import StreamCoalescer
from jutul_jkernel.supervisor.errors import JuliaDiedError, JuliaStartupError
from jutul_jkernel.supervisor.output_sink import CommMessage, Display, OutputSink


class CellExecution(KernelState):
    """execute_request: cells to Julia, their output, results and errors to IOPub."""

    # ipykernel sleeps this long before every execute_reply, against a flush race of its
    # OutStreams; this kernel publishes everything itself before it replies.
    _execute_sleep = 0.0

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
        await self._julia_ready(JULIA_READY_WAIT)

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
