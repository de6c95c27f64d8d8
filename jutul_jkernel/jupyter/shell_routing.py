"""The shell channel: each message to its shell, and a subshell's requests run as tasks.

The main loop reads the shell socket itself (jupyter/app.py; ipykernel's shell-channel thread
is never started) and calls ``shell_main``. A message for the main shell goes to ipykernel's
``shell_main`` and ``dispatch_shell``; a kernel_info_request that comes while a cell runs is
answered beside it. A message for a subshell (messaging 5.5) runs as an asyncio task on the
main loop, in order within its subshell and beside everything else (:mod:`.subshells` holds
the records; the control thread's create, delete and list requests are here too); its cells go
to Julia through ``JuliaSupervisor.execute_beside``. A message for a subshell that does not
exist gets ipykernel's ``UnknownSubshellError`` reply, and a shell request with no handler an
error reply.
"""

from __future__ import annotations

import contextvars
import inspect
from typing import Any

from ipykernel.kernelbase import Kernel
from ipykernel.subshell_manager import UnknownSubshellError

from jutul_jkernel.jupyter.kernel_state import BESIDE_ANOTHER, KernelState
from jutul_jkernel.jupyter.publish import Parent
from jutul_jkernel.jupyter.subshells import Subshell, TooManySubshellsError, error_reply
from jutul_jkernel.supervisor.output_sink import Display, OutputSink

_COMM_MESSAGES = ("comm_open", "comm_msg", "comm_close")


class ShellRouting(KernelState):
    """shell_main and dispatch for the main shell and the subshells, and the subshells' life."""

    def read_shell_in_one_task(self) -> None:
        """Handle each shell message in one task, started when the message is read.

        ipykernel 7 without a shell-channel thread hands the shell stream a coroutine function
        (kernelbase.py ``start``: ``_async_in_context(partial(self.shell_main, None))``), which
        the stream runs as a task whose only work is to start a second one, in a context kept
        for every shell message, and await it: a message reached ``shell_main`` two turns of
        the loop after it was read. Here one task runs ``shell_main`` in that kept context (a
        context of its own, made now, as ipykernel makes its own at the same point), a turn
        sooner. Only where ipykernel 7 set that path up: 6.x queues shell messages its own way.
        """
        stream = self.shell_stream
        if stream is None or getattr(self, "shell_channel_thread", None):
            return
        if not hasattr(Kernel, "shell_main"):
            return
        context = contextvars.copy_context()

        def received(msg: list[Any]) -> None:
            self._main_loop.spawn(lambda: self.shell_main(None, msg), context)

        stream.on_recv(received, copy=False)

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

    async def dispatch_shell(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        # ipykernel 7 passes concurrent=True for a comm message it runs beside the request
        # holding the shell, in a copied context (kernelbase.py, shell_main); 6.x never does.
        concurrent = bool(kwargs.get("concurrent", False))
        BESIDE_ANOTHER.set(concurrent)
        hold = getattr(self.iopub_socket, "hold", None)  # MainLoopIOPub (jupyter/sockets.py)
        if hold is not None and not concurrent:
            hold()  # busy and execute_input leave once Julia has the cell
        await super().dispatch_shell(msg, *args, **kwargs)

    def should_handle(self, stream: Any, msg: dict[str, Any], idents: Any) -> bool:
        """Reply with an error to shell requests this kernel has no handler for."""
        msg_type = msg["header"]["msg_type"]
        if msg_type not in self.shell_handlers and msg_type.endswith("_request"):
            self._reply_unsupported(stream, idents, msg)
            return False
        return True

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
        BESIDE_ANOTHER.set(concurrent)
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
