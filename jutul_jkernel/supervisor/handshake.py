"""The handshake: accept the connection of the Julia we spawned, and no other.

Julia connects to the listener and sends RDY with the token it was given in its environment.
Anything else that connects (a port scanner, another user's process on a TCP fallback) is
refused without holding the door: the real Julia may be waiting behind it.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import shlex
import socket
import sys
from typing import Any

from jutul_jkernel.protocol.wire import Decoder, Frame, FrameKind, ProtocolError
from jutul_jkernel.supervisor.errors import JuliaStartupError, describe_exit
from jutul_jkernel.supervisor.julia_process import JuliaProcess
from jutul_jkernel.supervisor.rendezvous import Rendezvous

log = logging.getLogger(__name__)

# Julia writes RDY the moment it connects; a connection silent this long is not Julia.
_FIRST_FRAME_WAIT = 5.0


async def accept_julia(
    j: JuliaProcess, listener: Rendezvous, token: str, julia: str
) -> tuple[socket.socket, Decoder, list[Frame]]:
    """Accept connections until one opens with RDY and our token; return it, its decoder, and
    the frames that came with the RDY. Raise JuliaStartupError if Julia (``julia``, as the user
    named it) exits first."""
    loop = asyncio.get_running_loop()
    exited = asyncio.ensure_future(j.proc.wait())
    pending: asyncio.Future[tuple[socket.socket, Any]] | None = None
    try:
        while True:
            pending = asyncio.ensure_future(loop.sock_accept(listener.socket))
            await asyncio.wait({pending, exited}, return_when=asyncio.FIRST_COMPLETED)
            if not pending.done():
                said = j.post_mortem() or "(it wrote nothing)"
                code = j.proc.returncode
                hint = ""
                if code is not None and code < 0:
                    # Killed by a signal before it could connect: maybe a Julia that crashes on
                    # its own (Debian's 1.5.3 beside a newer libunwind, at every error it
                    # throws), which the doctor finds out by running it alone.
                    doctor = [sys.executable, "-m", "jutul_jkernel.doctor", "--julia", julia]
                    hint = f"; `{shlex.join(doctor)}` tells whether it crashes on its own too"
                msg = (
                    f"Julia ({julia}) {describe_exit(code)} before connecting{hint}. "
                    f"Its log is {j.log_path}:\n{said}"
                )
                raise JuliaStartupError(msg)
            conn, peer = pending.result()
            peer = listener.describe(peer)
            pending = None
            decoder = Decoder()
            keep = False
            try:
                # Julia sends RDY as soon as it connects; a silent peer must not hold the
                # only door open while the real Julia waits behind it.
                first, rest = await asyncio.wait_for(_first_frame(conn, decoder), _FIRST_FRAME_WAIT)
                if first.kind is FrameKind.RDY and secrets.compare_digest(first.args[0], token):
                    keep = True
                    return conn, decoder, rest
                log.warning(
                    "refused a connection from %s: its first frame was not RDY with the "
                    "right token",
                    peer,
                )
            except (ProtocolError, ConnectionError, TimeoutError, asyncio.TimeoutError) as exc:
                log.warning("refused a connection from %s: %r", peer, exc)
            finally:
                if not keep:
                    conn.close()
    finally:
        exited.cancel()
        if pending is not None and not pending.cancel() and pending.exception() is None:
            pending.result()[0].close()  # accepted just as we were cancelled: unused


async def _first_frame(conn: socket.socket, decoder: Decoder) -> tuple[Frame, list[Frame]]:
    """Read until the first frame is complete; return it and any frames that followed."""
    loop = asyncio.get_running_loop()
    conn.setblocking(False)
    while True:
        data = await loop.sock_recv(conn, 4096)
        if not data:
            msg = "connection closed before its first frame"
            raise ConnectionError(msg)
        frames = decoder.feed(data)
        if frames:
            return frames[0], frames[1:]
