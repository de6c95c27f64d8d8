"""Comm routing: a frontend's comm messages to Julia in order, Julia's to the frontend, and the
comms open on both sides.

A frontend's comm_open, comm_msg and comm_close each run in Julia as an execution of its own
(``JuliaSupervisor.deliver_comm``), after every comm message received before it; a cell runs
after them all. What Julia's code sends, prints or displays meanwhile goes out with the
running request as its parent. :class:`CommRouter` keeps account of the comms open, which
comm_info_request lists and which are closed when Julia ends. docs/comms.md says what a user
sees.

A comm message that came on a subshell (JupyterLab sends a widget's over one) runs at once
beside everything else (``JuliaSupervisor.deliver_comm_beside``), after the ones before it on
the same subshell only: a slider moved while a cell runs reaches the comm's callback during
the cell.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from typing import Any

from jutul_jkernel.jupyter.publish import Parent, Publisher
from jutul_jkernel.jupyter.threads import MainLoop
from jutul_jkernel.supervisor.coalesce import StreamCoalescer
from jutul_jkernel.supervisor.errors import JuliaDiedError, JuliaStartupError
from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor
from jutul_jkernel.supervisor.output_sink import CommMessage, OutputSink

# A comm_open asks Julia whether its target is known (answered in ~1 ms, while a cell runs too,
# if it yields); past this the comm_open is queued for Julia as any comm message is.
_COMM_TARGET_WAIT = 1.0

# The sink of an execution publishing under a parent, and its coalescer (the kernel's _sink).
SinkFactory = Callable[[Parent], tuple[OutputSink, StreamCoalescer]]


class CommRouter:
    """Routes comm messages between the frontend and Julia (all on the main loop; comm_info
    may come on the control thread)."""

    def __init__(
        self,
        supervisor: JuliaSupervisor,
        iopub: Publisher,
        sink: SinkFactory,
        main_loop: MainLoop,
        julia_ready: Callable[[], Awaitable[None]],
        log: logging.Logger | Any,
    ) -> None:
        self._supervisor = supervisor
        self._iopub = iopub
        self._sink = sink
        self._main_loop = main_loop
        self._julia_ready = julia_ready  # waits (bounded) until Julia started or failed to
        self._log = log
        # The last comm message queued for Julia: each waits for the one before (see
        # received), and a cell for all of them (see delivered).
        self._queue: asyncio.Future[None] | None = None
        self._beside_queues: dict[int, asyncio.Task[None]] = {}  # the same, per subshell
        self._open: dict[str, str] = {}  # comm id -> target name, open on both sides
        self._deliveries: set[asyncio.Task[None]] = set()  # those nobody awaits

    async def received(self, msg: Parent, *, beside_another: bool, shell: int = 0) -> None:
        """Queue a frontend's comm message for Julia, after those before it; wait for it only
        when it has the shell to itself (not ``beside_another`` request). ``shell`` is the
        number of the subshell it came on (0: the main shell); on a subshell it waits only for
        that subshell's earlier comm messages, and runs beside everything else.

        ipykernel 7 runs a comm message that arrives while another request holds the shell
        (a cell, a comm_open waiting for Julia) beside that request, and when the handler
        returns it restores the shell parent it saw when the message came (kernelbase.py,
        shell_main). Every shell message shares that parent, and Julia runs the callback only
        after the cell, so a handler that waited for it put an old parent back under the next
        cell: that cell's idle went out as another's, and JupyterLab kept it at [*] for good.
        Beside another request, then, the handler returns once the message is queued.
        """
        if not shell and not beside_another and (self._queue is None or self._queue.done()):
            # Nothing queued before it: delivered in this task, a turn of the loop sooner than
            # in a task of its own; what comes next waits for ``done``.
            done: asyncio.Future[None] = asyncio.get_running_loop().create_future()
            self._queue = done
            try:
                await self._deliver_after(None, msg)
            finally:
                done.set_result(None)
            return
        before: asyncio.Future[None] | None
        if shell:
            before = self._beside_queues.get(shell)
            delivery = asyncio.ensure_future(self._deliver_after(before, msg, shell))
            self._beside_queues[shell] = delivery
            delivery.add_done_callback(lambda done: self._dequeue(shell, done))
        else:
            before = self._queue
            delivery = asyncio.ensure_future(self._deliver_after(before, msg))
            self._queue = delivery
        if beside_another:
            self._deliveries.add(delivery)
            delivery.add_done_callback(self._delivered_alone)
            return
        await delivery  # ipykernel brackets it with busy and idle

    async def delivered(self) -> None:
        """Wait until every comm message received so far has run in Julia (unbounded, as a
        cell waits for the one before it; an interrupt ends a callback that hangs)."""
        if self._queue is not None and not self._queue.done():
            await asyncio.wait({self._queue})

    def publish(self, message: CommMessage, parent: Parent | None) -> None:
        """Publish a comm message Julia sent, keeping account of the comms open."""
        if message.msg_type == "comm_open":
            self._open[message.comm_id] = str(message.content.get("target_name", ""))
        elif message.msg_type == "comm_close":
            self._open.pop(message.comm_id, None)
        self._iopub.send(
            message.msg_type,
            message.content,
            parent,
            metadata=message.metadata,
            buffers=list(message.buffers),
        )

    def close_all(self, parent: Parent | None) -> None:
        """Julia ended (a death, a restart, shutdown): close every comm it had, so that the
        frontend shows no widget that nothing answers any more."""
        for comm_id in list(self._open):
            self.publish(_closing(comm_id), parent)

    def info(self, target: str | None) -> dict[str, dict[str, str]]:
        """The comms open now (comm_info_reply's ``comms``), those of ``target`` if given."""
        return {
            comm_id: {"target_name": name}
            for comm_id, name in self._open.items()
            if target is None or name == target
        }

    async def _deliver_after(
        self, before: asyncio.Future[None] | None, msg: Parent, shell: int = 0
    ) -> None:
        # A subshell's comm message is no main-shell work that an interrupt waits for.
        with contextlib.nullcontext() if shell else self._main_loop.running():
            # Its outcome is its own handler's to report. Mostly it has long ended, and
            # asyncio.wait would still take a turn of the loop (~30 us a comm message).
            if before is not None and not before.done():
                await asyncio.wait({before})
            await self._deliver(msg, shell)

    def _dequeue(self, shell: int, delivery: asyncio.Task[None]) -> None:
        """A subshell's last comm message ran: its queue is empty."""
        if self._beside_queues.get(shell) is delivery:
            del self._beside_queues[shell]

    def _delivered_alone(self, delivery: asyncio.Task[None]) -> None:
        self._deliveries.discard(delivery)
        exc = None if delivery.cancelled() else delivery.exception()
        if exc is not None:
            self._log.error("a comm message failed", exc_info=exc)

    async def _deliver(self, msg: Parent, shell: int = 0) -> None:
        """Run a frontend's comm message in Julia (JuliaSupervisor.deliver_comm). What its
        callback prints, displays and sends goes out with the message as its parent, as
        ipykernel's comm handlers do; ipykernel brackets it with busy and idle, except for one
        that arrives beside another request (see received)."""
        msg_type = msg.get("header", {}).get("msg_type")
        content = msg.get("content")
        if not isinstance(content, dict) or not isinstance(content.get("comm_id"), str):
            self._log.warning("dropped a %s without a comm_id", msg_type)
            return
        metadata = msg.get("metadata")
        message = CommMessage(
            msg_type,
            content,
            metadata if isinstance(metadata, dict) else {},
            tuple(bytes(b) for b in msg.get("buffers") or ()),
        )
        if msg_type == "comm_open":
            if not await self._target_may_be_known(content.get("target_name")):
                # As ipykernel does for a target it does not know, and at once even while a
                # cell runs: a widget manager opening its control comm is not kept waiting.
                self.publish(_closing(message.comm_id), msg)
                return
            self._open[message.comm_id] = str(content.get("target_name", ""))
        elif msg_type == "comm_close":
            self._open.pop(message.comm_id, None)
        sink, out = self._sink(msg)
        try:
            await self._julia_ready()
            if shell:
                result = await self._supervisor.deliver_comm_beside(message, sink, shell=shell)
            else:
                result = await self._supervisor.deliver_comm(message, sink)
        except (JuliaDiedError, JuliaStartupError) as exc:
            out.flush(final=True)
            if msg_type == "comm_open":  # no Julia took it: the frontend's side stays alone
                self.publish(_closing(message.comm_id), msg)
            self._iopub.stream("stderr", f"[jutul-jkernel] {msg_type} not handled: {exc}\n", msg)
            return
        finally:
            out.flush(final=True)
        if result.notice:
            self._iopub.stream("stderr", f"[jutul-jkernel] {result.notice}\n", msg)
        if result.status != "ok":  # interrupted: the callback stopped, the state is kept
            self._iopub.stream("stderr", "\n".join(result.error_info().traceback) + "\n", msg)

    async def _target_may_be_known(self, target: object) -> bool:
        """False only when Julia says no code takes comms to ``target``; without an answer
        within _COMM_TARGET_WAIT (Julia computing without yielding), the comm_open goes to
        Julia, which decides once the cell has ended."""
        if not isinstance(target, str) or not target:
            return False
        if not self._supervisor.alive:
            return True  # the delivery starts Julia, or says why it cannot
        try:
            # Asked at once (as do_is_complete asks), not from a task of asyncio.wait_for's.
            return await self._supervisor.knows_comm_target(target, timeout=_COMM_TARGET_WAIT)
        except (JuliaDiedError, JuliaStartupError, TimeoutError, asyncio.TimeoutError):
            return True


def _closing(comm_id: str) -> CommMessage:
    """The comm_close that closes ``comm_id`` on the frontend's side."""
    return CommMessage("comm_close", {"comm_id": comm_id, "data": {}})
