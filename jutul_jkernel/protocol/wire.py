"""The frame format spoken on the one connection between Python and ``server.jl``.

Every message is a frame: an ASCII header line ``KIND arg... NBYTES\\n`` followed by exactly
NBYTES payload bytes. No payload ever travels as a bare line, so frames are binary-safe and their
size is known before they are read. This module only encodes and decodes bytes (no sockets, no
processes). The kinds and the rules of their arguments are declared once, in frames.toml beside
this file, for both sides: ``FrameKind`` and ``ARGS`` come from protocol/kinds.py and Julia's
from julia/JKernel/src/frames.jl, both generated from it (``make frames``).

The decoder never skips a bad frame: anything malformed raises :class:`ProtocolError` quoting the
offending header, and the caller drops the connection.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from jutul_jkernel.protocol.kinds import ARGS, Arg
from jutul_jkernel.protocol.kinds import FrameKind as FrameKind  # the codec's users take it here


class ProtocolError(Exception):
    """A peer sent bytes that are not a well-formed frame."""


# A header is short: the longest is QRY with three small arguments, or RDY with a 64-char token.
MAX_HEADER_BYTES = 256
# Larger than any frame either side sends (OUT frames are cut at 1 MiB, code is typed by people);
# a bigger NBYTES is a corrupt or hostile header, not a real message.
MAX_PAYLOAD_BYTES = 256 * 1024 * 1024

_KINDS: dict[bytes, FrameKind] = {k.value.encode(): k for k in FrameKind}
_NBYTES = re.compile(rb"0|[1-9][0-9]{0,9}")
# The named rules of frames.toml; a rule "words" allows the words its argument lists.
_RULES = {
    "id": re.compile(r"[1-9][0-9]{0,17}"),
    "count": re.compile(r"0|[1-9][0-9]{0,17}"),
    "token": re.compile(r"[!-~]+"),  # printable ASCII, no spaces: what every argument is
}


def _words(kind: FrameKind, name: str) -> tuple[str, ...]:
    (arg,) = (a for a in ARGS[kind] if a.name == name)
    return arg.words


OUTPUT_STREAMS = _words(FrameKind.OUT, "stream")
RESULT_STATUSES = _words(FrameKind.RES, "status")
QUERY_OPS = _words(FrameKind.QRY, "op")


@dataclass(frozen=True, slots=True)
class Frame:
    kind: FrameKind
    args: tuple[str, ...]
    payload: bytes = b""


def encode(kind: FrameKind, *args: object, payload: bytes = b"") -> bytes:
    """Return the bytes of one frame; raise ValueError if it would not decode."""
    strs = tuple(str(a) for a in args)
    _check_args(kind, strs, ValueError)
    if len(payload) > MAX_PAYLOAD_BYTES:
        msg = f"{kind.name} payload of {len(payload)} bytes exceeds {MAX_PAYLOAD_BYTES}"
        raise ValueError(msg)
    header = " ".join((kind.name, *strs, str(len(payload)))).encode("ascii") + b"\n"
    if len(header) > MAX_HEADER_BYTES:
        msg = f"{kind.name} header is {len(header)} bytes, more than {MAX_HEADER_BYTES}"
        raise ValueError(msg)
    return header + payload


def _check_args(kind: FrameKind, args: tuple[str, ...], exc: type[Exception]) -> None:
    """Raise ``exc`` unless ``args`` are what the declaration allows ``kind`` (kinds.ARGS)."""
    if len(args) != kind.arity:
        msg = f"{kind.name} takes {kind.arity} argument(s), got {len(args)}"
        raise exc(msg)
    for arg in args:
        if not (arg.isascii() and _RULES["token"].fullmatch(arg)):
            msg = f"{kind.name} argument {arg!r} is not printable ASCII without spaces"
            raise exc(msg)
    for arg, rule in zip(args, ARGS[kind], strict=True):
        if not _allows(rule, arg):
            msg = f"{kind.name} argument {arg!r} is not valid here"
            raise exc(msg)


def _allows(rule: Arg, arg: str) -> bool:
    if rule.rule == "words":
        return arg in rule.words
    return _RULES[rule.rule].fullmatch(arg) is not None


class Decoder:
    """Incremental frame decoder: feed it bytes in chunks of any size, get whole frames back."""

    def __init__(self) -> None:
        self._buf = bytearray()
        self._pending: tuple[FrameKind, tuple[str, ...], int] | None = None

    @property
    def buffered(self) -> int:
        """Bytes received but not yet part of a returned frame."""
        return len(self._buf)

    def feed(self, data: bytes) -> list[Frame]:
        """Add bytes; return every frame they complete, in order."""
        self._buf += data
        frames: list[Frame] = []
        while True:
            if self._pending is None:
                end = self._buf.find(b"\n", 0, MAX_HEADER_BYTES)
                if end < 0:
                    if len(self._buf) >= MAX_HEADER_BYTES:
                        head = bytes(self._buf[:60])
                        msg = f"no header end within {MAX_HEADER_BYTES} bytes: {head!r}..."
                        raise ProtocolError(msg)
                    return frames
                self._pending = parse_header(bytes(self._buf[:end]))
                del self._buf[: end + 1]
            kind, args, nbytes = self._pending
            if len(self._buf) < nbytes:
                return frames
            payload = bytes(self._buf[:nbytes])
            del self._buf[:nbytes]
            self._pending = None
            frames.append(Frame(kind, args, payload))

    def check_eof(self) -> None:
        """Raise ProtocolError if the stream ended inside a frame."""
        if self._pending is not None:
            kind, _args, nbytes = self._pending
            msg = (
                f"connection closed inside a {kind.name} frame: "
                f"{len(self._buf)} of {nbytes} payload bytes arrived"
            )
            raise ProtocolError(msg)
        if self._buf:
            msg = f"connection closed inside a header: {bytes(self._buf[:60])!r}"
            raise ProtocolError(msg)


def inner_frame(frame: Frame) -> Frame | None:
    """The one frame an MRK or MRN frame carries, or None for a bare marker."""
    if not frame.payload:
        return None
    decoder = Decoder()
    frames = decoder.feed(frame.payload)
    if len(frames) != 1 or decoder.buffered or frames[0].kind in (FrameKind.MRK, FrameKind.MRN):
        msg = (
            f"{frame.kind.name} {frame.args[0]} does not carry exactly one frame: "
            f"{frame.payload[:80]!r}"
        )
        raise ProtocolError(msg)
    return frames[0]


def parse_header(line: bytes) -> tuple[FrameKind, tuple[str, ...], int]:
    """Split one header line (without its newline) into kind, arguments and payload size."""
    parts = line.split(b" ")
    kind = _KINDS.get(parts[0])
    if kind is None:
        msg = f"unknown frame kind in header {line[:80]!r}"
        raise ProtocolError(msg)
    if len(parts) != kind.arity + 2:
        msg = f"{kind.name} header needs {kind.arity} argument(s) and NBYTES: {line[:80]!r}"
        raise ProtocolError(msg)
    if not _NBYTES.fullmatch(parts[-1]):
        msg = f"bad NBYTES in header {line[:80]!r}"
        raise ProtocolError(msg)
    nbytes = int(parts[-1])
    if nbytes > MAX_PAYLOAD_BYTES:
        msg = f"payload of {nbytes} bytes exceeds {MAX_PAYLOAD_BYTES}: {line[:80]!r}"
        raise ProtocolError(msg)
    try:
        args = tuple(p.decode("ascii") for p in parts[1:-1])
        _check_args(kind, args, ProtocolError)
    except UnicodeDecodeError:
        msg = f"non-ASCII header {line[:80]!r}"
        raise ProtocolError(msg) from None
    except ProtocolError as exc:
        msg = f"{exc}: header {line[:80]!r}"
        raise ProtocolError(msg) from None
    return kind, args, nbytes
