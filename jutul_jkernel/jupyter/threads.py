"""The kernel's threads and event loops, and the one way across them.

With ipykernel 7.4 (6.x is alike) the kernel runs on these threads:

- The **main thread** runs the **main loop** (tornado's IOLoop over asyncio). Every shell
  request is handled there (execute, complete, inspect, history, comm messages), and so is
  all of Julia: the supervisor, its reader and pipes, its interrupt escalation, and every comm
  delivery. Python runs the kernel's SIGINT and SIGTERM handlers on this thread as well,
  between two bytecodes of whatever it was doing, the main loop's own code included.
- The **control thread** runs a loop of its own for control requests (interrupt_request,
  shutdown_request, and kernel_info_request or comm_info_request when they come on control),
  one at a time.
- The **IOPub thread** sends what the others publish: ``session.send`` on the IOPub socket only
  queues a message for it (see :meth:`~jutul_jkernel.jupyter.publish.Publisher.backpressure`).
- ipykernel's shell-channel and heartbeat threads, and the thread that waits for Julia's exit
  (``ChildProcess``, supervisor/child_process.py), run none of the kernel's code.

The main loop's tasks, futures and events, and the supervisor, belong to the main loop. The
control thread and the signal handlers reach them only through :class:`MainLoop` (``spawn``
with ``call_soon_threadsafe``, ``run`` with ``run_coroutine_threadsafe``), never directly; and
:class:`ControlBacklog` is touched on the control thread only.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any


class MainLoop:
    """The main loop as other threads reach it, and whether a cell runs on it.

    A cell, or a comm message on its way to Julia, counts as running from the moment it is
    received (it may first wait for the one before it) until it has published its outcome.
    """

    def __init__(self) -> None:
        self.loop: asyncio.AbstractEventLoop | None = None  # set by bind(), at the start
        self._running = 0  # cells and comm deliveries running or waiting to
        # Set while none runs. An asyncio.Event takes the loop of its first wait(), which is
        # always the main loop's (see idle).
        self._idle = asyncio.Event()
        self._idle.set()
        self._tasks: set[asyncio.Task[Any]] = set()  # spawned, kept until done

    def bind(self, loop: asyncio.AbstractEventLoop) -> None:
        """Take ``loop`` as the main loop; called once, on the main thread, before any
        request."""
        self.loop = loop

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        """Count a cell or a comm delivery as running until the block ends (main loop only)."""
        self._running += 1
        self._idle.clear()
        try:
            yield
        finally:
            self._running -= 1
            if self._running == 0:
                self._idle.set()

    async def idle(self, timeout: float) -> bool:
        """Wait (bounded) until no cell runs, from any thread's loop; whether none runs now."""
        if not self._idle.is_set():
            await self.run(self._idle.wait, timeout)
        return self._idle.is_set()

    async def run(self, work: Callable[[], Awaitable[Any]], timeout: float) -> bool:
        """Await ``work()`` on the main loop for at most ``timeout`` seconds, from any thread's
        loop (the main loop's too); whether it ended in time (False before bind()). At the
        timeout it is cancelled, on the main loop, and the caller does not wait for that."""
        if self.loop is None:
            return False

        async def on_main_loop() -> None:
            await work()

        future = asyncio.run_coroutine_threadsafe(on_main_loop(), self.loop)
        try:
            await asyncio.wait_for(asyncio.wrap_future(future), timeout)
        except (asyncio.TimeoutError, TimeoutError):
            return False
        return True

    def spawn_threadsafe(self, work: Callable[[], Coroutine[Any, Any, Any]]) -> None:
        """Start ``work()`` as a task on the main loop, from any thread or a signal handler;
        before bind() nothing is started."""
        if self.loop is not None:
            self.loop.call_soon_threadsafe(self.spawn, work)

    def spawn(
        self,
        work: Callable[[], Coroutine[Any, Any, Any]],
        context: contextvars.Context | None = None,
    ) -> None:
        """Start ``work()`` as a task on the main loop (called there), kept until it is done;
        in ``context`` itself if given (its context variables' changes then outlast it), else
        in a copy of the current one."""
        task = asyncio.get_running_loop().create_task(work(), context=context)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)


class ControlBacklog:
    """Whether a control request waits behind the one being handled (control thread only).

    ipykernel handles control requests one at a time (a lock in 7.x, a queue in 6.x), so a
    handler that waits holds every later one behind it: interrupt_request's wait for its cell
    ends as soon as another control request is queued, so that neither a shutdown nor a
    second interrupt waits behind it.
    """

    def __init__(self) -> None:
        self._received = 0  # control requests received
        self._started = 0  # those whose handling began
        self._arrived = asyncio.Event()  # set by each one received

    def received(self) -> None:
        self._received += 1
        self._arrived.set()

    def started(self) -> None:
        self._started += 1

    async def another_queued(self) -> None:
        """Return once a control request waits behind those being handled."""
        while self._received <= self._started:
            self._arrived.clear()
            await self._arrived.wait()
