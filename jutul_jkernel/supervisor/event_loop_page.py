"""When Julia's event loop last polled, read from the page Julia stamps (julia/JKernel/src/
event_loop.jl): before each poll and after it, in CLOCK_MONOTONIC nanoseconds. The interrupt
ladder reads it to tell a cell that has not yielded for a while (a SIGINT goes at once) from
Julia in its event loop (supervisor/interrupts.py)."""

from __future__ import annotations

import contextlib
import mmap
import os
import struct
import time
from dataclasses import dataclass

_STAMPS = struct.Struct("@QQ")  # the page's two UInt64, in Julia's (the machine's) byte order
_READS = 4  # a read that a stamp changed under is read again (see polls)


@dataclass(frozen=True)
class LoopPolls:
    """The page's two stamps, and when they were read (all time.monotonic_ns())."""

    before: int  # the last time a thread was about to poll
    after: int  # the last time a poll (and its I/O callbacks) ended
    read_at: int

    @property
    def polling(self) -> bool:
        """Whether the loop is in its poll now (waiting, or running I/O callbacks)."""
        return self.before > self.after

    def quiet_for(self) -> float:
        """Seconds since the loop last polled, as of the read; 0 while it polls."""
        return 0.0 if self.polling else max(0, self.read_at - self.after) / 1e9


class EventLoopPage:
    """Julia's page, mapped read-only."""

    def __init__(self, path: str, page: mmap.mmap) -> None:
        self.path = path
        self._page = page

    @classmethod
    def open(cls, path: str | None) -> EventLoopPage | None:
        """Map the page at ``path`` (the INF frame's ``loop_page``: /proc/<pid>/fd/<fd> of
        Julia's memfd); None without one, or where it cannot be opened."""
        if not path:
            return None
        try:
            fd = os.open(path, os.O_RDONLY)
        except OSError:
            return None
        try:
            return cls(path, mmap.mmap(fd, _STAMPS.size, access=mmap.ACCESS_READ))
        except (OSError, ValueError):
            return None
        finally:
            os.close(fd)

    def polls(self) -> LoopPolls | None:
        """The stamps now; None once closed, or before the loop ever polled."""
        # Julia stamps while we read: two reads that agree were not torn by a stamp. The
        # clock is read first, so that a stamp made meanwhile can only shorten quiet_for.
        read_at = time.monotonic_ns()
        try:
            last = _STAMPS.unpack_from(self._page)
            for _ in range(_READS):
                now = _STAMPS.unpack_from(self._page)
                if now == last:
                    break
                last = now
            else:
                return None
        except ValueError:  # closed
            return None
        before, after = last
        if before == 0 or after == 0:
            return None
        return LoopPolls(before, after, read_at)

    def close(self) -> None:
        """Unmap it (Julia's memfd: nothing is left of it once Julia is gone too)."""
        with contextlib.suppress(BufferError):
            self._page.close()
