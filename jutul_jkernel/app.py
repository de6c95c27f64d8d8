"""The kernel application: ipykernel's IPKernelApp, with a bounded wait for its control thread."""

from __future__ import annotations

from ipykernel.kernelapp import IPKernelApp

# How long close() waits for the control thread to finish the request it is handling. It
# normally stops in milliseconds; jupyter_client kills a kernel that is not gone 5 s after its
# shutdown_reply.
_CONTROL_STOP_WAIT = 1.0


class JuliaKernelApp(IPKernelApp):  # type: ignore[misc]
    """IPKernelApp whose close() never waits for the control thread without a bound.

    After a shutdown_request, ipykernel 7.4's close() joins the control thread with no timeout.
    In 3 of 25 shutdowns of a kernel whose Julia was spinning, at load 2, that thread was still
    publishing the request's ``idle`` status: py-spy showed it blocked in the zmq send of
    ``IOPubThread.schedule``, and the IOPub thread already gone (why it ended first is not
    known). The kernel process then never exited, and jupyter_client had to kill it. The control
    thread is a daemon thread: once the wait is over, it no longer holds the process.
    """

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
