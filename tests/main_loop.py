"""A fresh main loop for tests of the kernel's zmq sockets (test_iopub_hold.py,
test_socket_reads.py): each test runs on its own loop, bounded, and every socket it made is
closed after, whatever it left open."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Coroutine
from typing import Any

import zmq

BOUND = 10.0


def run(test: Callable[[zmq.Context[Any]], Coroutine[Any, Any, None]]) -> None:
    """Run ``test(ctx)`` on a fresh main loop (bounded), then close every socket it made."""
    ctx: zmq.Context[Any] = zmq.Context()

    async def bounded() -> None:
        await asyncio.wait_for(test(ctx), BOUND)

    try:
        asyncio.run(bounded())
    finally:
        ctx.destroy(linger=0)
