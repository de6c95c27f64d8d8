"""The reading end of Julia's fd 1 and fd 2: two pipes the supervisor makes and reads itself.

Julia's prints, C libraries and child processes all write to fd 1 and fd 2. Julia cannot drain
those pipes itself: a reader task runs on the same thread as the writer, so a C library that
prints more than a pipe holds in one call, or any print flood once the pipe is blocking, stops
the thread for good. (Every child process makes it blocking: libuv sets a child's stdio
blocking, and parent and child share the pipe's open file description.) Read here, a writer
only ever waits for this process, which reads until the kernel asks it to pause for IOPub.

Order with the socket: before a frame that must follow a cell's output (its result, a display,
an input request), Julia writes a marker into both pipes and sends that frame inside
``MRK <n>``. The supervisor handles the inner frame once both streams have passed marker n, and
holds back what either stream wrote after marker n until then, so output printed before a
display comes before it and output printed after comes after. Julia's own `stderr` travels in
the stdout pipe between two markers, so that its prints to stdout and stderr keep their order.
Where Julia finds both pipes empty as an evaluation ends (Linux: capture.jl ``pipes_read``),
everything written before has been read here already, and its last frames come inside
``MRK 0``, without a marker: :meth:`OutputPipes.pass_tails` then passes on what a stream kept
as the possible start of a marker, which can only be output. (Output after those frames is no
evaluation's any more: nothing needs holding back behind them.) A frame in the middle of an
evaluation still needs its marker n, to hold back what is printed after it; where Julia found
both pipes read to the end as it wrote that marker, the frame comes inside ``MRN <n>`` and is
handled at once, with the tails passed on first, and marker n released after it.

Routes: what Julia code running beside the main cell (a subshell's request, and the tasks it
started) prints travels in the stdout pipe too, after a ROUTE code that names the execution
whose output it is (its id, 16 hex digits, and ``o`` or ``e`` for stdout or stderr) and up to
TO_STDOUT. Those bytes go to ``routed``, not ``deliver``. Output written to fd 1 or fd 2
directly (C libraries, child processes) has no route: it is the main cell's.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import sys
import termios
from collections.abc import Callable

# Read up to this much per wake-up.
_READ_BYTES = 1024 * 1024
# A read asks for _SMALL_READ_BYTES when little waits in the pipe (FIONREAD): CPython's os.read
# allocates the size asked for and then shrinks it, and an allocation past glibc's mmap
# threshold (128 KiB until the process frees a larger one) is an mmap, page faults, an mremap
# and a munmap (in a process of nine threads each munmap is a TLB shootdown too). Reading a
# 23-byte marker with 1 MiB asked took ~15 us, with 64 KiB ~1.3 (the ioctl included); a comm
# echo reads two, a cell that prints at least one. More waiting (a flood) is read 1 MiB at a
# time as before, as is a pipe that cannot say.
_SMALL_READ_BYTES = 64 * 1024
_FIONREAD = getattr(termios, "FIONREAD", None)
STREAMS = ("stdout", "stderr")
# While paused, a wait for a marker reads this often.
_PAUSED_POLL = 0.05


# Every marker is its process's prefix (spawn.py marker_prefix: fixed bytes and the process's
# hex digits) and a two-byte code. The codes are read in julia/JKernel/src/capture.jl too:
# change both or neither.
DRAIN = b"\x1f\0"  # drain marker: a frame inside MRK <n> follows what came before the n-th
TO_STDERR = b"e\0"  # on the stdout pipe: what follows is Julia's stderr ...
TO_STDOUT = b"o\0"  # ... and from here on stdout again (the main cell's)
ROUTE = b"r\0"  # on the stdout pipe: what follows is the output of the execution named after it
_ROUTE_ARGS = 17  # after ROUTE: the execution's id in 16 hex digits, then b"o" or b"e"
_CODES = (DRAIN, TO_STDERR, TO_STDOUT, ROUTE)
_ROUTED_STREAMS = {ord("o"): "stdout", ord("e"): "stderr"}


Piece = tuple[int, str, bytes, int]  # (drain markers before it, stream, bytes, route: 0 or an id)
Routed = Callable[[int, str, bytes], None]  # (execution id, "stdout" | "stderr", bytes)


class _Stream:
    """One pipe: bytes split at markers, each piece tagged with its stream and with how many
    drain markers precede it.

    Julia writes its `stderr` into the stdout pipe between TO_STDERR and TO_STDOUT, so that
    its prints to the two keep their order (two pipes are read in no particular order); the
    stderr pipe carries what C and child processes write to fd 2.
    """

    def __init__(self, name: str, fd: int, prefix: bytes) -> None:
        self.name = name
        self.fd = fd
        self.prefix = prefix
        self.current = name  # the stream the next bytes belong to
        self.route = 0  # ... and the execution they are routed to (0: none, the main cell's)
        self.seen = 0  # drain markers read so far
        self.eof = False
        self.tail = b""  # may be the start of a marker: kept until the next read
        self.held: list[Piece] = []  # read after a marker not yet released

    def split(self, data: bytes) -> list[Piece]:
        """Cut ``data`` (after the kept tail) into pieces at its markers."""
        buf = self.tail + data
        self.tail = b""
        pieces: list[Piece] = []

        def emit(chunk: bytes) -> None:
            if chunk:
                pieces.append((self.seen, self.current, chunk, self.route))

        whole = len(self.prefix) + 2
        pos = 0
        while (i := _find_marker(buf, self.prefix, pos)) >= 0:
            if i + whole > len(buf):  # its code has not arrived yet
                emit(buf[pos:i])
                self.tail = buf[i:]
                return pieces
            code = buf[i + len(self.prefix) : i + whole]
            if code not in _CODES:  # output that only looks like a marker's start
                emit(buf[pos : i + 1])
                pos = i + 1
                continue
            if code == ROUTE:
                end = i + whole + _ROUTE_ARGS
                if end > len(buf):  # its execution has not arrived yet
                    emit(buf[pos:i])
                    self.tail = buf[i:]
                    return pieces
                route, stream = _route_of(buf[i + whole : end])
                if route == 0:  # not a route after all: output
                    emit(buf[pos : i + 1])
                    pos = i + 1
                    continue
                emit(buf[pos:i])
                self.current, self.route = stream, route
                pos = end
                continue
            emit(buf[pos:i])
            if code == DRAIN:
                self.seen += 1
            else:
                self.current = "stderr" if code == TO_STDERR else "stdout"
                self.route = 0
            pos = i + whole
        # Keep a tail that could be the start of a marker (which starts with NUL).
        rest = buf[pos:]
        cut = len(rest)
        start = rest.find(b"\0", max(0, len(rest) - len(self.prefix) + 1))
        while start >= 0:
            if self.prefix.startswith(rest[start:]):
                cut = start
                break
            start = rest.find(b"\0", start + 1)
        emit(rest[:cut])
        self.tail = rest[cut:]
        return pieces


def _find_marker(buf: bytes, prefix: bytes, pos: int) -> int:
    """Where the next marker's ``prefix`` starts in ``buf`` from ``pos`` (-1: nowhere).

    A marker starts with NUL, which output rarely holds: a search for that byte (memchr) takes
    ~8 us a MiB against ~370 for the prefix's own (CPython's search for a 22-byte needle), which
    made the marker search a quarter of the kernel's CPU for a 20 MB print. Past a NUL that starts
    no marker, the prefix's own search goes on, so output full of NULs costs what it did."""
    i = buf.find(b"\0", pos)
    if i < 0 or buf.startswith(prefix, i):
        return i
    return buf.find(prefix, i + 1)


def _route_of(arg: bytes) -> tuple[int, str]:
    """The execution id and stream after a ROUTE code; (0, "") if it is no route."""
    stream = _ROUTED_STREAMS.get(arg[-1])
    digits = arg[:-1]
    if stream is None or not all(c in b"0123456789abcdef" for c in digits):
        return 0, ""
    return int(digits, 16), stream


class OutputPipes:
    """Read Julia's stdout and stderr pipes in the event loop and pass the bytes on in order.

    ``deliver(stream, data)`` gets every byte once, markers removed, in the order each stream
    wrote them, and never a byte written after marker n before ``release(n)``; bytes routed to
    an execution go to ``routed(id, stream, data)`` instead, once one is set (before, to
    ``deliver``).
    """

    def __init__(
        self, fds: dict[str, int], prefix: bytes, deliver: Callable[[str, bytes], None]
    ) -> None:
        self._streams = [_Stream(name, fds[name], prefix) for name in STREAMS]
        self._deliver = deliver
        self.routed: Routed | None = None
        self._released = 0
        self._paused = False
        self._reading = False
        self._changed: asyncio.Event | None = None
        self._count = bytearray(4)  # FIONREAD's answer (an int)

    def start(self) -> None:
        """Start reading (in the running event loop)."""
        self._changed = asyncio.Event()
        self._reading = True
        self._add_readers()

    def pause(self) -> None:
        """Stop reading for now: Julia's writers then wait once the pipes are full."""
        if not self._paused:
            self._paused = True
            self._remove_readers()

    def resume(self) -> None:
        if self._paused:
            self._paused = False
            self._add_readers()

    @property
    def paused(self) -> bool:
        return self._paused

    async def passed(self, n: int, timeout: float) -> bool:
        """Wait until both streams have been read past marker ``n`` (or ended); whether they did.

        Reads even while paused: Julia's writers wait for the marker to get through.
        """
        assert self._changed is not None
        loop = asyncio.get_running_loop()
        until = loop.time() + timeout
        while not all(s.seen >= n or s.eof for s in self._streams):
            self._changed.clear()
            left = until - loop.time()
            if left <= 0:
                return False
            if self._paused:
                # The kernel paused reading for IOPub, but the marker is behind those bytes.
                for s in self._streams:
                    self._read(s)
                continue_after = min(left, _PAUSED_POLL)
            else:
                continue_after = left
            with contextlib.suppress(asyncio.TimeoutError, TimeoutError):
                await asyncio.wait_for(self._changed.wait(), continue_after)
        return True

    def release(self, n: int) -> None:
        """Pass on what the streams wrote after marker ``n``: the frame it ordered was handled."""
        self._released = max(self._released, n)
        for s in self._streams:
            while s.held and s.held[0][0] <= self._released:
                self._pass_on(s.held.pop(0))

    def pass_tails(self) -> None:
        """Pass on what each stream kept as the possible start of a marker: a frame came in
        ``MRK 0`` or ``MRN n``, which Julia sends only once it found both pipes read to the end
        with no write of its own under way (capture.jl, ``pipes_read``), so what was kept is
        output written before that frame (a NUL at the end of a cell's output), not a marker to
        come (marker n is written whole, in one write, after that check). Kept, it would reach
        whatever execution prints next, or come after the frame."""
        for s in self._streams:
            if s.tail:
                piece = (s.seen, s.current, s.tail, s.route)
                s.tail = b""
                self._arrived(s, piece)

    def skip(self, n: int) -> None:
        """Count marker ``n`` as passed on both streams though it never came (a lost marker)."""
        for s in self._streams:
            s.seen = max(s.seen, n)

    def drain(self) -> dict[str, bytes]:
        """Stop reading; return what is still in the pipes or held, per stream (after Julia
        died)."""
        self._remove_readers()
        self._reading = False
        left: dict[str, bytes] = {name: b"" for name in STREAMS}
        for s in self._streams:
            pieces = list(s.held)
            s.held.clear()
            with contextlib.suppress(OSError):
                while data := os.read(s.fd, _READ_BYTES):
                    pieces.extend(s.split(data))
            pieces.append((s.seen, s.current, s.tail, 0))
            s.tail = b""
            for _, name, data, _ in pieces:
                left[name] += data
        return left

    def close(self) -> None:
        self._remove_readers()
        self._reading = False
        for s in self._streams:
            if s.fd >= 0:
                with contextlib.suppress(OSError):
                    os.close(s.fd)
                s.fd = -1

    # ---- reading ----

    def _add_readers(self) -> None:
        if not self._reading:
            return
        loop = asyncio.get_running_loop()
        for s in self._streams:
            if not s.eof and s.fd >= 0:
                loop.add_reader(s.fd, self._read, s)

    def _remove_readers(self) -> None:
        with contextlib.suppress(RuntimeError):  # no running loop: nothing was added
            loop = asyncio.get_running_loop()
            for s in self._streams:
                if s.fd >= 0:
                    loop.remove_reader(s.fd)

    def _read(self, s: _Stream) -> None:
        try:
            data = os.read(s.fd, self._read_size(s.fd))
        except BlockingIOError:
            return
        except OSError:
            data = b""
        if not data:
            # Julia and every child holding the write end are gone.
            s.eof = True
            with contextlib.suppress(RuntimeError):
                asyncio.get_running_loop().remove_reader(s.fd)
        before = s.seen
        pieces = s.split(data)
        if s.eof and s.tail:  # no marker can follow: what looked like its start is output
            pieces.append((s.seen, s.current, s.tail, s.route))
            s.tail = b""
        for piece in pieces:
            self._arrived(s, piece)
        if (s.seen != before or s.eof) and self._changed is not None:
            self._changed.set()

    def _read_size(self, fd: int) -> int:
        """How much to ask of pipe ``fd`` now, by how much waits in it (_SMALL_READ_BYTES)."""
        if _FIONREAD is not None:
            with contextlib.suppress(OSError):
                fcntl.ioctl(fd, _FIONREAD, self._count)
                if int.from_bytes(self._count, sys.byteorder) <= _SMALL_READ_BYTES:
                    return _SMALL_READ_BYTES
        return _READ_BYTES

    def _arrived(self, s: _Stream, piece: Piece) -> None:
        """Pass a piece read from ``s`` on, or hold it behind a marker not yet released."""
        if s.held or piece[0] > self._released:
            s.held.append(piece)
        else:
            self._pass_on(piece)

    def _pass_on(self, piece: Piece) -> None:
        _, name, data, route = piece
        if route and self.routed is not None:
            self.routed(route, name, data)
        else:
            self._deliver(name, data)
