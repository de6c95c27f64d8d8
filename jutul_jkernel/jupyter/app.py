"""The kernel application: ipykernel's IPKernelApp, with a bounded wait for its control thread
and no IOPub pipe (so no TCP port beyond the connection file's five)."""

from __future__ import annotations

from typing import Any

from ipykernel import kernelapp
from ipykernel.iostream import IOPubThread
from ipykernel.kernelapp import IPKernelApp

# How long close() waits for the control thread to finish the request it is handling. It
# normally stops in milliseconds; jupyter_client kills a kernel that is not gone 5 s after its
# shutdown_reply.
_CONTROL_STOP_WAIT = 1.0


class _IOPubThreadWithoutPipe(IOPubThread):
    """ipykernel's IOPub thread, never with the pipe that init_iopub asks for."""

    def __init__(self, socket: Any, pipe: bool = False, **kwargs: Any) -> None:
        super().__init__(socket, pipe=False, **kwargs)


class JuliaKernelApp(IPKernelApp):
    """IPKernelApp whose close() never waits for the control thread without a bound, and
    which binds no TCP port but the five of its connection file.

    After a shutdown_request, ipykernel 7.4's close() joins the control thread with no timeout.
    In 3 of 25 shutdowns of a kernel whose Julia was spinning, at load 2, that thread was still
    publishing the request's ``idle`` status: py-spy showed it blocked in the zmq send of
    ``IOPubThread.schedule``, and the IOPub thread already gone: ``atexit`` runs hooks last in,
    first out, and ipykernel registers the IOPub thread's stop (iostream.py ``IOPubThread.start``)
    after the app's close (kernelapp.py ``init_sockets``). The kernel process then never exited,
    and jupyter_client had to kill it. The control
    thread is a daemon thread: once the wait is over, it no longer holds the process.
    """

    def init_iopub(self, context: Any) -> None:
        """ipykernel's init_iopub, with an IOPub thread that has no pipe.

        The pipe carries the output of forked Python children written through OutStream; this kernel
        has no OutStream (``__main__.app_options``), so nothing would ever use it. Yet setting it up
        binds a random TCP port on 127.0.0.1, and before the heartbeat's port is bound: kernels
        starting together then take each other's connection-file ports now and then, and the loser
        dies with "Address already in use" (jupyter_client#487; supervisor/rendezvous.py has the
        whole story). init_iopub names the class through its module, so the class is swapped there
        for the length of the call.
        """
        original = kernelapp.IOPubThread  # type: ignore[attr-defined]
        kernelapp.IOPubThread = _IOPubThreadWithoutPipe  # type: ignore[attr-defined,assignment]
        try:
            super().init_iopub(context)
        finally:
            kernelapp.IOPubThread = original  # type: ignore[attr-defined]

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
