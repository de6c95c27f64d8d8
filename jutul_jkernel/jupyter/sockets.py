"""The shell and IOPub sockets, owned by the main loop: messages go out when they are made.

**IOPub.**
ipykernel hands every IOPub message to a thread of its own (``IOPubThread``), which sends it
after a wake-up of that thread's event loop: one thread hop per message, four or more per
cell (busy, execute_input, the result, idle). This kernel makes its messages on the main loop,
so :class:`MainLoopIOPub` sends them there at once, on the XPUB socket itself, and answers each
new subscription with ``iopub_welcome`` as ipykernel does (iostream.py
``_handle_subscription``). Only another thread's message (the control thread's busy and idle)
takes a hop, onto the main loop, so one thread alone ever uses the socket. Once the main loop
has stopped (the kernel is exiting), a message is sent from the thread that makes it: the main
thread no longer sends.

It stands where ipykernel expects its IOPub thread (``IPKernelApp.iopub_thread``, the kernel's
``iopub_thread``) and its ``BackgroundSocket`` (``iopub_socket``): ``send_multipart``,
``schedule``, ``stop`` and ``close``.

**Shell.** The main loop reads the shell socket through a ``ZMQStream`` (jupyter/app.py), which
queues what is sent on it and sends it on a later turn of the loop, or when ipykernel flushes
it after the request. :class:`SendNowStream` sends a reply at once instead: the reply of a cell
leaves as soon as it is made, one turn of the loop earlier.

Both send a message's parts with :func:`send_parts`: pyzmq's ``send_multipart`` checks every
part before it sends any, which took three times as long as sending the parts one by one
(24 µs against 8 µs for a status message of seven parts, pyzmq 27.3 on this machine).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import zmq
from jupyter_client.session import Session
from tornado import ioloop
from zmq.eventloop.zmqstream import ZMQStream

_SUBSCRIBE = 1  # the first byte of an XPUB subscription event; 0 is an unsubscription


def send_parts(socket: zmq.Socket[bytes], parts: list[Any], copy: bool = True) -> None:
    """Send one multipart message: every part but the last with SNDMORE."""
    last = len(parts) - 1
    for i, part in enumerate(parts):
        socket.send(part, zmq.SNDMORE if i < last else 0, copy=copy)


class SendNowStream(ZMQStream):
    """The shell socket's stream: it reads on the main loop as any ZMQStream, and sends there
    at once (a ROUTER socket never blocks a send)."""

    def send_multipart(
        self,
        msg: Sequence[Any],
        flags: int = 0,
        copy: bool = True,
        track: bool = False,
        callback: Any = None,
        **kwargs: Any,
    ) -> None:
        if flags or track or callback is not None or kwargs:
            super().send_multipart(msg, flags, copy, track, callback, **kwargs)
        else:
            send_parts(self.socket, list(msg), copy)


class MainLoopIOPub:
    """ipykernel's IOPub thread and background socket in one, on the main loop."""

    def __init__(self, socket: zmq.Socket[bytes], session: Session) -> None:
        self.socket: zmq.Socket[bytes] | None = socket
        self.session = session
        self.background_socket = self  # what ipykernel calls the kernel's iopub_socket
        self.io_loop = ioloop.IOLoop.current()
        self._owner = threading.current_thread()
        self._subscriptions = ZMQStream(socket, self.io_loop)
        self._subscriptions.on_recv(self._subscribed)

    # ---- what ipykernel calls ----

    def send_multipart(self, msg: list[Any], *args: Any, **kwargs: Any) -> None:
        """Send now from the main thread; from another, on the main loop."""
        self.schedule(lambda: self._send(msg, *args, **kwargs))

    def send(self, msg: Any, *args: Any, **kwargs: Any) -> None:
        self.send_multipart([msg], *args, **kwargs)

    def schedule(self, f: Callable[[], Any]) -> None:
        """Run ``f`` where the socket may be used: at once on the main thread (or once the
        main loop has stopped), else on the main loop."""
        if threading.current_thread() is self._owner or not self._loop_running():
            f()
        else:
            self.io_loop.add_callback(f)

    def start(self) -> None:
        """Nothing to start: the main loop runs the socket."""

    def stop(self) -> None:
        """Stop reading subscriptions (the main loop may already be gone)."""
        if not self._subscriptions.closed():
            self._subscriptions.stop_on_recv()

    def close(self) -> None:
        if self.socket is not None:
            self._subscriptions.close(linger=1000)
            self.socket = None

    @property
    def closed(self) -> bool:
        return self.socket is None

    # ---- inside ----

    def _loop_running(self) -> bool:
        return bool(self.io_loop.asyncio_loop.is_running())  # type: ignore[attr-defined]

    def _send(self, msg: list[Any], *args: Any, **kwargs: Any) -> None:
        if self.socket is None or self.socket.closed:
            return  # closed at exit: nothing reads it any more
        if args or kwargs.keys() - {"copy"}:
            self.socket.send_multipart(msg, *args, **kwargs)
        else:
            send_parts(self.socket, msg, kwargs.get("copy", True))

    def _subscribed(self, frames: list[bytes]) -> None:
        """Welcome each new subscriber (JEP 65): it then knows its subscription is active."""
        for frame in frames:
            if not frame or frame[0] != _SUBSCRIBE:
                continue
            try:
                topic = frame[1:].decode("utf-8")
            except UnicodeDecodeError:
                continue
            msg = {
                "header": self.session.msg_header("iopub_welcome"),
                "parent_header": {},
                "metadata": {},
                "content": {"subscription": topic},
                "buffers": [],
            }
            parts = self.session.serialize(msg)
            self._send([topic.encode("utf-8"), *parts] if topic else parts)
