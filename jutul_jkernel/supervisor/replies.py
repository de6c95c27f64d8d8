"""The replies a Julia owes the supervisor, by request id, outside any execution's result.

A query waits for its ANS, an interrupt request or a SYN for its ACK, and the handshake for
INF (id 0). The router hands each reply to :meth:`Replies.arrived`; a reply nobody waits for
any more is dropped. When that Julia dies or is stopped, every waiter fails at once with the
same error, so nothing waits on a Julia that is gone.
"""

from __future__ import annotations

import asyncio
from typing import Any


class Replies:
    """The replies Julia owes, by request id: ANS (a query), ACK (an interrupt, a SYN), and
    INF (id 0, the handshake). All fail at once when Julia dies or is stopped."""

    def __init__(self) -> None:
        self._waiting: dict[int, asyncio.Future[Any]] = {}

    def expect(self, rid: int) -> asyncio.Future[Any]:
        """A future for the next reply to ``rid`` (replacing any earlier one of that id)."""
        waiter: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
        self._waiting[rid] = waiter
        return waiter

    def arrived(self, rid: int, value: Any) -> None:
        waiter = self._waiting.pop(rid, None)
        if waiter is not None and not waiter.done():
            waiter.set_result(value)

    def forget(self, rid: int, waiter: asyncio.Future[Any] | None = None) -> None:
        """Stop expecting ``rid`` (only if it is still ``waiter``, when given)."""
        if waiter is None or self._waiting.get(rid) is waiter:
            self._waiting.pop(rid, None)

    def fail_all(self, exc: BaseException) -> None:
        waiting, self._waiting = self._waiting, {}
        for waiter in waiting.values():
            if not waiter.done():
                waiter.set_exception(exc)
