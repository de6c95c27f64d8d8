"""Coalesce Julia's live output bytes into few, well-formed Jupyter ``stream`` messages.

A printing loop produces thousands of OUT frames a second; one IOPub message each would be
dropped by ZMQ's send queue and by jupyter_server's rate limit. Bytes are buffered per stream
and flushed after ``FLUSH_DELAY`` seconds or ``FLUSH_BYTES`` bytes, on a switch between stdout
and stderr, before any rich output, and at the end of a cell. Decoding is incremental, so a
UTF-8 character split across chunks is never mangled; invalid bytes become U+FFFD.
"""

from __future__ import annotations

import asyncio
import codecs
from collections.abc import Callable

# Jupyter frontends redraw at most every ~50 ms anyway; this keeps progress bars live.
FLUSH_DELAY = 0.05
FLUSH_BYTES = 64 * 1024

Publish = Callable[[str, str], None]  # (stream name, text)


class StreamCoalescer:
    """Buffer output per stream and publish it as text in order."""

    def __init__(self, publish: Publish, loop: asyncio.AbstractEventLoop | None = None) -> None:
        self._publish = publish
        self._loop = loop or asyncio.get_running_loop()
        self._decoders = {
            name: codecs.getincrementaldecoder("utf-8")(errors="replace")
            for name in ("stdout", "stderr")
        }
        self._name: str | None = None  # stream whose bytes are buffered
        self._chunks: list[bytes] = []
        self._size = 0
        self._timer: asyncio.TimerHandle | None = None
        self.messages = 0  # stream messages published, for tests and benchmarks

    def write(self, name: str, data: bytes) -> None:
        """Add output bytes of stream ``name`` ("stdout" or "stderr")."""
        if not data:
            return
        if self._name is not None and name != self._name:
            self.flush()
        self._name = name
        self._chunks.append(data)
        self._size += len(data)
        if self._size >= FLUSH_BYTES:
            self.flush()
        elif self._timer is None:
            self._timer = self._loop.call_later(FLUSH_DELAY, self.flush)

    def flush(self, *, final: bool = False) -> None:
        """Publish what is buffered; with ``final``, also any incomplete UTF-8 sequence."""
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        if self._name is not None and self._chunks:
            text = self._decoders[self._name].decode(b"".join(self._chunks))
            self._chunks.clear()
            self._size = 0
            self._emit(self._name, text)
        if final:
            for name, decoder in self._decoders.items():
                self._emit(name, decoder.decode(b"", final=True))
            self._name = None

    def _emit(self, name: str, text: str) -> None:
        if text:
            self.messages += 1
            self._publish(name, text)
