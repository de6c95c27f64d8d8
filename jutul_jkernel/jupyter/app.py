"""The kernel application: ipykernel's IPKernelApp with the shell and IOPub sockets on the main
loop, no IOPub pipe (so no TCP port beyond the connection file's five), and a bounded wait for
its control thread."""

from __future__ import annotations

from typing import Any

import zmq
from ipykernel.kernelapp import IPKernelApp

from jutul_jkernel.jupyter.session import KernelSession
from jutul_jkernel.jupyter.sockets import IOPUB_QUEUE_MESSAGES, MainLoopIOPub, SendNowStream

# How long close() waits for the control thread to finish the request it is handling. It
# normally stops in milliseconds; jupyter_client kills a kernel that is not gone 5 s after its
# shutdown_reply.
_CONTROL_STOP_WAIT = 1.0


class JuliaKernelApp(IPKernelApp):
    """IPKernelApp with the shell and IOPub sockets on the main loop, no TCP port beyond the
    five of its connection file, and a close() that never waits for the control thread without
    a bound.

    ipykernel 7 reads the shell socket in a thread of its own and hands each message to the main
    loop over an in-process socket pair, and sends every IOPub message from another thread; the
    replies go back the same ways. Every cell of this kernel runs on the main loop (the Julia
    process is driven from there), so those hops were the largest part of a trivial cell's round
    trip: here the main loop reads the shell socket itself (ipykernel's path without a
    shell-channel thread), sends its replies at once and publishes directly
    (:mod:`jutul_jkernel.jupyter.sockets`).

    After a shutdown_request, ipykernel 7.4's close() joins the control thread with no timeout;
    a control thread still publishing when the process exits would hold it. The control thread is
    a daemon thread: once the bounded wait is over, it no longer holds the process.
    """

    def _session_default(self) -> KernelSession:
        """jupyter_client's Session with a shorter path for each message (jupyter/session.py)."""
        return KernelSession(parent=self)

    def init_sockets(self) -> None:
        """ipykernel's sockets and threads, without the shell-channel thread."""
        super().init_sockets()
        self.shell_channel_thread = None

    def init_iopub(self, context: zmq.Context[Any]) -> None:
        """ipykernel's XPUB socket, bound as ipykernel binds it, sent on from the main loop.

        No IOPub pipe either: it carries the output of forked Python children written through
        OutStream, and this kernel has no OutStream (``__main__.app_options``); setting it up
        would bind a random TCP port on 127.0.0.1 before the heartbeat's port is bound, and
        kernels starting together then take each other's connection-file ports now and then
        (jupyter_client#487; supervisor/rendezvous.py).
        """
        socket = context.socket(zmq.XPUB)
        socket.linger = 1000
        socket.sndhwm = IOPUB_QUEUE_MESSAGES
        self._apply_curve_server_options(socket)
        self.iopub_port = self._bind_socket(socket, self.iopub_port)
        self.log.debug("iopub PUB Channel on port: %i", self.iopub_port)
        self.configure_tornado_logger()
        self.iopub_thread = MainLoopIOPub(socket, self.session)
        self.iopub_socket = self.iopub_thread.background_socket

    def init_kernel(self) -> None:
        """ipykernel's kernel, whose shell stream sends at once (SendNowStream adds no state to
        the ZMQStream that ipykernel made and registered with the loop, only that method)."""
        super().init_kernel()
        self.kernel.shell_stream.__class__ = SendNowStream
        self.kernel.shell_stream.before_send = self.iopub_thread.release

    def _configure_logging(self) -> None:
        """traitlets' logging set-up, then the app's logger at its handlers' lowest level.

        traitlets puts this logger at DEBUG and lets each handler drop what is below its own
        level (config/application.py, ``get_default_logging_config``), so that a handler added
        through ``logging_config`` can be more verbose. ipykernel logs each message it handles
        at DEBUG, four times a cell (kernelbase.py ``dispatch_shell``, ``execute_request``),
        and each call then built a record that the WARN handler dropped: ~5-10 µs apiece, a
        few percent of a trivial cell's round trip. At its handlers' lowest level the logger
        drops those calls at once and still passes every record a handler would emit
        (``--debug`` lowers the handler, and this runs again).
        """
        super()._configure_logging()
        levels = [h.level for h in self.log.handlers]
        if levels and not self.log.propagate:  # else other handlers may want every record
            self.log.setLevel(max(min(levels), 1))  # NOTSET (0) would mean the root's level

    def close(self) -> None:
        control = self.control_thread
        if control is not None and control.is_alive():
            control.stop()
            control.join(_CONTROL_STOP_WAIT)
            if control.is_alive():
                self.log.warning(
                    "the control thread did not stop within %.0f s; exiting without it",
                    _CONTROL_STOP_WAIT,
                )
                self.control_thread = None  # IPKernelApp.close would join it forever
        super().close()
