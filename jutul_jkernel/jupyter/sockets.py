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

**A slow subscriber.** An XPUB socket drops a message for a subscriber whose queue is full
(``IOPUB_QUEUE_MESSAGES``, each up to ~320 KiB of output): a client that read more slowly than a
flood came (a test's client on a loaded machine, nbclient on a busy one) lost output and then
the cell's idle status, and waited for it forever. The socket is set not to drop
(``XPUB_NODROP``): a message that cannot be queued waits in :class:`MainLoopIOPub`'s backlog, in
order, behind which everything after it waits too; the backlog is retried every
``_RETRY_INTERVAL``, and ``Publisher.backpressure`` awaits it (:meth:`MainLoopIOPub.caught_up`),
which pauses reading Julia, whose writes then wait. A subscriber that takes nothing for
``_STALL_LIMIT`` (a client stopped with Ctrl-Z, say) must not stop the kernel: the socket drops
for any full subscriber again, as ipykernel's always does, for ``_LOSSY_PERIOD``; then it tries
not to, and goes on dropping at once if a queue is still full.

**Sends past a stream.** Both sockets are read by a ``ZMQStream`` and written here directly.
A socket's file descriptor is edge-triggered: it turns readable when the socket's mailbox gets
a command (such as "a peer's pipe has messages again"), and any operation on the socket may
take that command in and clear it. A send made past the stream could thus take the only news
of a request that had just come, and the stream, which looks at the socket's ``EVENTS`` only
after its own reads and sends, would not read it, nor anything after it on that pipe: the
kernel stopped answering a client for good. A new connection's first request is always
announced so, and JupyterLab connects while the kernel answers the server's own kernel_info:
its first cell stayed at [*] (once in CI, twice in ~60 starts on a loaded machine here).
After each direct send :func:`look_again` does what pyzmq does after its own
(``ZMQStream._update_handler``).

Both send a message's parts with :func:`send_parts`: pyzmq's ``send_multipart`` checks every
part before it sends any, which took three times as long as sending the parts one by one
(24 µs against 8 µs for a status message of seven parts, pyzmq 27.3 on this machine).
"""

from __future__ import annotations

import asyncio
import collections
import logging
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import zmq
from jupyter_client.session import Session
from tornado import ioloop
from zmq.eventloop.zmqstream import ZMQStream

log = logging.getLogger(__name__)

_SUBSCRIBE = 1  # the first byte of an XPUB subscription event; 0 is an unsubscription
# pyzmq's flags as plain ints: `|` on its IntFlag members runs enum.py's Python code (~0.6 µs
# against 0.01 for ints), once for each message sent.
_SNDMORE = int(zmq.SNDMORE)
_NOBLOCK = int(zmq.NOBLOCK)
# How many messages IOPub's socket queues for one subscriber before the backlog takes over and
# Julia waits (its SNDHWM). ZMQ's default, 1000, let a client that fell behind a flood of output
# hold ~1000 stream messages of up to ~320 KiB each (a full 256 KiB pipe and 64 KiB before it) in
# the kernel: 363 MiB more RSS beside a subscriber that read nothing while 1 GiB was printed. 128
# bound that at ~40 MiB, and still queue a burst of small messages (displays, statuses) whole.
IOPUB_QUEUE_MESSAGES = 128
# Seconds. How often a backlog is retried: a client that reads a message per millisecond or two
# is kept up with, at a few wake-ups per message at most.
_RETRY_INTERVAL = 0.002
# Seconds without a message taken before the socket drops for the subscriber that is full, and
# how long it then does, before it waits for subscribers again.
_STALL_LIMIT = 5.0
_LOSSY_PERIOD = 5.0


def send_parts(
    socket: zmq.Socket[bytes], parts: list[Any], copy: bool = True, first_flags: int = 0
) -> None:
    """Send one multipart message: every part but the last with SNDMORE, the first also with
    ``first_flags`` (NOBLOCK: an XPUB socket that does not drop refuses a message with its first
    part, or takes all of it: libzmq xpub.cpp ``xsend`` counts whole messages)."""
    last = len(parts) - 1
    for i, part in enumerate(parts):
        flags = _SNDMORE if i < last else 0
        socket.send(part, flags | first_flags if i == 0 else flags, copy=copy)


def look_again(stream: ZMQStream) -> None:
    """After a send on ``stream``'s socket that did not go through ``stream``: if the socket
    holds what the stream waits for, have the stream handle it on the loop's next turn."""
    stream._update_handler(stream._state)  # type: ignore[no-untyped-call]  # pyzmq 27


class SendNowStream(ZMQStream):
    """The shell socket's stream: it reads on the main loop as any ZMQStream, and sends there
    at once (a ROUTER socket never blocks a send), after what IOPub holds (``before_send``)."""

    before_send: Callable[[], None] | None = None

    def send_multipart(
        self,
        msg: Sequence[Any],
        flags: int = 0,
        copy: bool = True,
        track: bool = False,
        callback: Any = None,
        **kwargs: Any,
    ) -> None:
        if self.before_send is not None:
            self.before_send()
        if flags or track or callback is not None or kwargs:
            super().send_multipart(msg, flags, copy, track, callback, **kwargs)
        else:
            send_parts(self.socket, list(msg), copy)
            look_again(self)


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
        socket.setsockopt(zmq.XPUB_NODROP, 1)
        # Messages no subscriber's queue could take yet, oldest first (see the module's doc).
        self._backlog: collections.deque[tuple[list[Any], dict[str, Any]]] = collections.deque()
        self._progress_at = 0.0  # when the backlog last shrank (or began)
        self._lossy_until = 0.0  # while later than now, the socket drops for a full subscriber
        self._caught_up: asyncio.Event | None = None  # set while the backlog is empty
        self._held: list[Callable[[], None]] | None = None  # sends kept by hold(), in order

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

    def hold(self) -> None:
        """Keep the messages sent from now on, in order, until :meth:`release`: at the latest
        the main loop's next turn, which comes when the handler running now first waits (main
        loop only). A shell request's busy (and a cell's execute_input) then leave once its
        handler has sent Julia what it asked, so they are sent while Julia works on it,
        instead of before it could start (~0.1 ms of a trivial cell's round trip). The shell
        stream releases them before it sends a reply, so a reply never overtakes them."""
        if self._held is None:
            self._held = []
            self.io_loop.asyncio_loop.call_soon(self.release)  # type: ignore[attr-defined]

    def send_later(self, send: Callable[[], None]) -> bool:
        """While :meth:`hold` keeps messages (main thread only), keep ``send`` among them, to be
        called in its turn by :meth:`release`; say whether it was kept. ``KernelSession.send``
        hands its serialising and signing over this way (a status message ~30 us), which then
        happen while Julia works too, after the request's frame has gone to Julia."""
        if self._held is None or threading.current_thread() is not self._owner:
            return False
        self._held.append(send)
        return True

    def release(self) -> None:
        """Send what :meth:`hold` kept, in order. A message that cannot be serialised (made
        before it was held, it fails only now) is logged, and the ones after it still go."""
        held, self._held = self._held, None
        for send in held or ():
            try:
                send()
            except Exception:
                log.exception("an IOPub message held for its request could not be sent")

    async def caught_up(self) -> None:
        """Return once every message made so far has been queued for the subscribers (main
        loop only): at once, unless a subscriber fell behind (bounded by ``_STALL_LIMIT``)."""
        if self._backlog:
            if self._caught_up is None:
                self._caught_up = asyncio.Event()
            self._caught_up.clear()
            await self._caught_up.wait()

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
        if args or kwargs.keys() - {"copy"}:  # (nothing in this kernel sends with flags)
            self.release()
            if self._backlog:
                self._flush_lossy()  # what waits goes first
            self.socket.send_multipart(msg, *args, **kwargs)
            look_again(self._subscriptions)
            return
        if self._held is not None:
            self._held.append(lambda: self._send(msg, **kwargs))
        elif self._backlog:
            self._backlog.append((msg, kwargs))  # behind the messages that wait
        elif not self._try_send(msg, kwargs):
            self._backlog.append((msg, kwargs))
            self._progress_at = time.monotonic()
            self._retry_later()

    def _try_send(self, msg: list[Any], kwargs: dict[str, Any]) -> bool:
        """Send now, or say that a subscriber's queue is full (never while dropping). The first
        message after a lossy period tries without dropping; if a queue is still full (the
        subscriber that took nothing still takes nothing), the next period begins at once."""
        assert self.socket is not None
        probing = bool(self._lossy_until) and time.monotonic() >= self._lossy_until
        if probing:
            self._lossy_until = 0.0
            self.socket.setsockopt(zmq.XPUB_NODROP, 1)
        try:
            send_parts(self.socket, msg, kwargs.get("copy", True), _NOBLOCK)
        except zmq.Again:
            if not probing:
                return False
            self._drop_for_the_full(_LOSSY_PERIOD)
            send_parts(self.socket, msg, kwargs.get("copy", True))
        finally:
            look_again(self._subscriptions)  # a send refused takes commands in too
        return True

    def _drop_for_the_full(self, period: float) -> None:
        """From now on for ``period`` seconds, drop for a subscriber whose queue is full."""
        assert self.socket is not None
        self._lossy_until = time.monotonic() + period
        self.socket.setsockopt(zmq.XPUB_NODROP, 0)

    def _retry_later(self) -> None:
        if self._loop_running():
            self.io_loop.call_later(_RETRY_INTERVAL, self._retry)
        else:
            self._flush_lossy()  # the kernel is exiting: nothing would retry

    def _retry(self) -> None:
        """Send what waits, oldest first, as far as the subscribers take it."""
        if self.socket is None or self.socket.closed:
            self._backlog.clear()
        while self._backlog:
            msg, kwargs = self._backlog[0]
            if not self._try_send(msg, kwargs):
                break
            self._backlog.popleft()
            self._progress_at = time.monotonic()
        if self._backlog and time.monotonic() - self._progress_at >= _STALL_LIMIT:
            self._flush_lossy()
        if self._backlog:
            self._retry_later()
        elif self._caught_up is not None:
            self._caught_up.set()

    def _flush_lossy(self) -> None:
        """Drop for the subscribers that are full, as ipykernel does, for ``_LOSSY_PERIOD``,
        and send what waits."""
        if self.socket is None or self.socket.closed:
            self._backlog.clear()
        else:
            self._drop_for_the_full(_LOSSY_PERIOD)
            while self._backlog:
                msg, kwargs = self._backlog.popleft()
                send_parts(self.socket, msg, kwargs.get("copy", True))
            look_again(self._subscriptions)
        if self._caught_up is not None:
            self._caught_up.set()

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
