"""Reading what a connected Julia sends: frames off its socket and bytes out of its fd 1 and
fd 2 pipes, each handed to the router (supervisor/routing.py) as it comes.

Reading waits for the consumer (the sink's backpressure, IOPub in a kernel) unless an interrupt
is dropping output; the pipes are paused meanwhile, so a flood cannot outrun the frontend. The
connection's end is a death with its reason: closed, dropped, a malformed frame, or a frame the
supervisor could not handle. Never a hang, and never a frame skipped.
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Awaitable, Callable

from jutul_jkernel.protocol.wire import Decoder, Frame, ProtocolError
from jutul_jkernel.supervisor.julia_process import JuliaProcess
from jutul_jkernel.supervisor.routing import FrameRouter

log = logging.getLogger(__name__)

_READ_CHUNK_BYTES = 256 * 1024


async def open_streams(conn: socket.socket) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    """Julia's checked connection as the reader and writer of the event loop."""
    return await asyncio.open_connection(sock=conn, limit=_READ_CHUNK_BYTES)


class JuliaReader:
    """Reads one supervisor's Julia into its router; ``connected()`` is the Julia it holds."""

    def __init__(
        self,
        route: FrameRouter,
        connected: Callable[[], JuliaProcess | None],
        on_death: Callable[[JuliaProcess, str], Awaitable[None]],
    ) -> None:
        self._route = route
        self._connected = connected
        self._on_death = on_death  # (Julia, why its connection ended)
        self._catching_up: set[asyncio.Task[None]] = set()

    async def read_loop(self, j: JuliaProcess, decoder: Decoder, early: list[Frame]) -> None:
        """Read ``j``'s frames until its connection ends (``early`` came with the handshake)."""
        assert j.reader is not None
        reason = "closed its connection"
        try:
            for frame in early:  # arrived with the handshake
                await self._route.handle(j, frame)
            while True:
                data = await j.reader.read(_READ_CHUNK_BYTES)
                if not data:
                    decoder.check_eof()
                    break
                frames = decoder.feed(data)
                if frames:
                    j.last_frame_at = asyncio.get_running_loop().time()
                for frame in frames:
                    await self._route.handle(j, frame)
                backpressure = self._route.sink_now().backpressure
                if backpressure is not None and self._route.reading_waits():
                    await backpressure()
        except ProtocolError as exc:
            reason = f"sent a malformed frame ({exc})"
            log.error("protocol error from Julia: %s", exc)
        except ConnectionError as exc:
            reason = f"dropped its connection ({exc})"
        except asyncio.CancelledError:
            return
        except Exception as exc:  # a frame we could not handle: same as malformed, never a hang
            reason = f"sent a frame the supervisor could not handle ({exc!r})"
            log.exception("handling a frame from Julia failed")
        await self._on_death(j, reason)

    def piped(self, j: JuliaProcess, name: str, data: bytes) -> None:
        """Output read from the pipes; pause them while the consumer catches up."""
        if self._connected() is not j:
            j.append_to_log(name, data)  # still starting (or already replaced)
            return
        # Julia is still sending: the escalation waits for its ACK instead of signalling.
        j.last_frame_at = asyncio.get_running_loop().time()
        self._route.output(j, name, data)
        pipes = j.pipes
        backpressure = self._route.sink_now().backpressure
        if backpressure is None or pipes is None or pipes.paused or not self._route.reading_waits():
            return
        pipes.pause()

        async def catch_up() -> None:
            try:
                await backpressure()
            finally:
                pipes.resume()

        task = asyncio.create_task(catch_up())
        self._catching_up.add(task)
        task.add_done_callback(self._catching_up.discard)

    def stop(self) -> None:
        """Stop waiting for the consumer (shutdown)."""
        for task in list(self._catching_up):
            task.cancel()
