"""The requests Julia answers beside the cells, each by a reply under its own id: queries
(QRY: complete, inspect, is_complete, comm_target; answered by ANS) and the SYN round trip.

Julia's listener answers them while a cell runs, as long as the cell yields; each wait is
bounded, so a cell that computes without yielding makes a query fail with a TimeoutError that
says so, never hang. A SYN is answered once every frame sent before it was handled: the
supervisor sends one before the next execution whenever a SIGINT of an interrupt may still be
on its way, so that it lands before that execution starts, not in it.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from jutul_jkernel.protocol.wire import FrameKind, encode
from jutul_jkernel.supervisor.julia_process import JuliaProcess

log = logging.getLogger(__name__)

# Completion, inspection and is_complete answer in milliseconds once compiled; a query waits
# this long when a computing cell keeps Julia from answering.
_QUERY_TIMEOUT = 30.0
_SYNC_TIMEOUT = 5.0


async def query(
    j: JuliaProcess, qid: int, op: str, code: str, cursor: int, timeout: float | None = None
) -> dict[str, Any]:
    """Ask Julia ``op`` about ``code`` at ``cursor`` (code points) as request ``qid``; wait at
    most ``timeout`` seconds (default ``_QUERY_TIMEOUT``)."""
    request = encode(FrameKind.QRY, qid, op, max(0, cursor), payload=code.encode())
    wait = _QUERY_TIMEOUT if timeout is None else timeout
    try:
        result: dict[str, Any] = await j.ask(qid, request, wait)
    except (TimeoutError, asyncio.TimeoutError):
        msg = (
            f"Julia did not answer a {op} query within {wait:g} s "
            "(a running cell that computes without yielding keeps it busy)"
        )
        raise TimeoutError(msg) from None
    return result


async def sync(j: JuliaProcess, sid: int) -> None:
    """Round-trip SYN ``sid``, so that any SIGINT still in flight lands before the next cell."""
    try:
        await j.ask(sid, encode(FrameKind.SYN, sid), _SYNC_TIMEOUT)
    except (TimeoutError, asyncio.TimeoutError):
        log.warning("Julia did not answer a SYN within %g s", _SYNC_TIMEOUT)
