"""The control channel and the kernel's signals: interrupts and shutdown.

ipykernel facts this relies on (checked with ipykernel 7.4): interrupt_request and
shutdown_request run on the control thread while do_execute awaits on the main loop, so they
hand work to the main loop thread-safely (:mod:`jutul_jkernel.jupyter.threads` says which
thread runs what); the stock interrupt would SIGINT our own process group, and the stock
pre-handler hook turns SIGINT into a KeyboardInterrupt that kills the asyncio loop, so both
are replaced. A SIGINT (signal mode, Ctrl-C on a console) interrupts the cell as the request
does; a SIGTERM takes Julia along. Interrupts reach the main shell only, as in ipykernel.
"""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from typing import Any

from jutul_jkernel.jupyter.kernel_state import KernelState
from jutul_jkernel.jupyter.publish import Parent
from jutul_jkernel.supervisor.interrupts import settle_wait

# interrupt_request returns (and ipykernel publishes its `idle`) only once the interrupted cell
# has published its outcome, however long that takes within the supervisor's escalation, which
# ends every cell (by a restart if nothing else works): a fixed 10 s was outlasted once by a
# cold error path under load. Another control request ends the wait at once (see
# dispatch_control), so neither a shutdown nor a second interrupt queues behind it.
_INTERRUPT_SETTLE_WAIT = settle_wait()
# jupyter_client gives a kernel 2.5 s after shutdown_request before SIGTERM.
_SHUTDOWN_BUDGET = 2.0

# Control requests answered with an error reply (JuliaKernel.__init__ registers them).
UNSUPPORTED_CONTROL = ("debug_request",)


class ControlRequests(KernelState):
    """interrupt_request and shutdown (ipykernel's control thread), SIGINT and SIGTERM."""

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
    # later one behind it: these two keep count (threads.ControlBacklog).
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

    async def _unsupported_request(self, stream: Any, ident: Any, parent: Parent) -> None:
        self._reply_unsupported(stream, ident, parent)

    # ---- signals ----

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
