"""input_request on the stdin channel: how Julia's ``readline()`` in a cell asks the frontend.

The reply is awaited cancellably (an interrupt ends the cell while it waits), and replies
left over from an earlier request, such as one whose cell was interrupted, are dropped first.
"""

from __future__ import annotations

import asyncio
from typing import Any

import zmq
from jupyter_client.session import Session

# How often a pending input_request checks the stdin socket for the frontend's reply.
_INPUT_POLL = 0.02


async def ask(
    session: Session, sock: Any, prompt: str, password: bool, parent: dict[str, Any], ident: Any
) -> str:
    """Send input_request on the stdin channel and wait (cancellably) for the reply."""
    while True:  # drop stale replies, e.g. to a request whose cell was interrupted
        try:
            sock.recv_multipart(zmq.NOBLOCK)
        except zmq.Again:
            break
    session.send(
        sock, "input_request", {"prompt": prompt, "password": password}, parent, ident=ident
    )
    while True:
        if sock.poll(0):
            _, reply = session.recv(sock, mode=zmq.NOBLOCK)
            if reply is not None:
                value = reply["content"]["value"]
                return str(value)
        await asyncio.sleep(_INPUT_POLL)
