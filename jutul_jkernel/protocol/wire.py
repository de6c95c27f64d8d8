"""The frame format spoken on the one connection between Python and ``server.jl``.

Every message is a frame: an ASCII header line ``KIND arg... NBYTES\\n`` followed by exactly
NBYTES payload bytes. No payload ever travels as a bare line, so frames are binary-safe and their
size is known before they are read. This module only encodes and decodes bytes (no sockets, no
processes); ``julia/server.jl`` is the other end and documents the same kinds in its header. The
two must agree on this table: change both or neither.

The decoder never skips a bad frame: anything malformed raises :class:`ProtocolError` quoting the
offending header, and the caller drops the connection.
"""

from __future__ import annotations

import enum
import re
from dataclasses import dataclass


class ProtocolError(Exception):
    """A peer sent bytes that are not a well-formed frame."""


class FrameKind(enum.Enum):
    """Every frame kind; the value is the kind's name on the wire."""

    # Julia -> Python
    RDY = "RDY"  # RDY <token> 0: handshake, always the first frame
    INF = "INF"  # INF <n>: JSON facts about the Julia process (version, binary, pid, threads)
    OUT = "OUT"  # OUT <stdout|stderr> <n>: live output bytes, in order within each stream
    DSP = "DSP"  # DSP <id> <n>: JSON display_data / update_display_data for evaluation <id>
    CLR = "CLR"  # CLR <id> <wait 0|1> 0: clear_output for evaluation <id>
    VAL = "VAL"  # VAL <id> <n>: JSON MIME bundle of the value, only when richer than text/plain
    ERR = "ERR"  # ERR <id> <n>: JSON {ename, evalue, traceback} before an err result
    RES = "RES"  # RES <id> <ok|err|int> <n>: the one result of evaluation <id>
    INP = "INP"  # INP <id> <password 0|1> <n>: evaluation <id> reads a line; payload: prompt
    ANS = "ANS"  # ANS <id> <n>: JSON answer to QRY <id>
    ACK = "ACK"  # ACK <n> 0: answers SYN <n>, or INT <n> once it reached the evaluation (by
    # the frame, or by the SIGINT that claimed its request)
    PAY = "PAY"  # PAY <id> <n>: JSON reply payload of evaluation <id> (e.g. set_next_input)
    MRK = "MRK"  # MRK <m> <n>: the frame in the payload (or none) follows output marker <m>
    CMM = "CMM"  # CMM <id> <j> <n>: a comm message Julia sends during evaluation <id>: <j>
    # bytes of JSON {msg_type, content, metadata, buffers: [length...]}, then the buffers
    # Python -> Julia
    EXE = "EXE"  # EXE <id> <n>: code to evaluate (backtraces name it In[<id>])
    EXN = "EXN"  # EXN <id> <name> <n>: the same, naming the code <name>, e.g. In[3]
    INT = "INT"  # INT <id> <request> 0: interrupt evaluation <id> (ignored unless it is still
    # running), unless the SIGINT claimed <request> first (supervisor/interrupts.py, _INT_ACK_MAX)
    TXT = "TXT"  # TXT <id> <n>: the line typed in answer to INP <id> (no trailing newline)
    NIN = "NIN"  # NIN <id> <n>: no input can be had for INP <id>; payload says why
    QRY = "QRY"  # QRY <id> <complete|inspect|is_complete|comm_target> <cursor> <n>: payload is
    # the code (for comm_target, a target name)
    SYN = "SYN"  # SYN <seq> 0: answered by ACK <seq> once every earlier frame was handled
    COM = "COM"  # COM <id> <j> <n>: a frontend's comm message, run as evaluation <id> (its
    # callback); the payload as CMM's

    @property
    def arity(self) -> int:
        """How many arguments stand between KIND and NBYTES."""
        return _ARITY[self]


_ARITY = {
    FrameKind.RDY: 1, FrameKind.INF: 0, FrameKind.OUT: 1, FrameKind.DSP: 1, FrameKind.CLR: 2,
    FrameKind.VAL: 1, FrameKind.ERR: 1, FrameKind.RES: 2, FrameKind.INP: 2, FrameKind.ANS: 1,
    FrameKind.ACK: 1, FrameKind.EXE: 1, FrameKind.EXN: 2, FrameKind.INT: 2, FrameKind.TXT: 1,
    FrameKind.NIN: 1, FrameKind.QRY: 3, FrameKind.SYN: 1, FrameKind.PAY: 1, FrameKind.MRK: 1,
    FrameKind.CMM: 2, FrameKind.COM: 2,
}  # fmt: skip
_KINDS: dict[bytes, FrameKind] = {k.value.encode(): k for k in FrameKind}

OUTPUT_STREAMS = ("stdout", "stderr")
RESULT_STATUSES = ("ok", "err", "int")
QUERY_OPS = ("complete", "inspect", "is_complete", "comm_target")

# A header is short: the longest is QRY with three small arguments, or RDY with a 64-char token.
MAX_HEADER_BYTES = 256
# Larger than any frame either side sends (OUT frames are cut at 1 MiB, code is typed by people);
# a bigger NBYTES is a corrupt or hostile header, not a real message.
MAX_PAYLOAD_BYTES = 256 * 1024 * 1024

_ARG = re.compile(rb"[!-~]+")  # printable ASCII, no spaces
_NBYTES = re.compile(rb"0|[1-9][0-9]{0,9}")
_ID = re.compile(r"[1-9][0-9]{0,17}")
_COUNT = re.compile(r"0|[1-9][0-9]{0,17}")
_VALIDATORS: dict[FrameKind, tuple[object, ...]] = {
    FrameKind.OUT: (OUTPUT_STREAMS,),
    FrameKind.RES: (_ID, RESULT_STATUSES),
    FrameKind.INP: (_ID, ("0", "1")),
    FrameKind.CLR: (_ID, ("0", "1")),
    FrameKind.QRY: (_ID, QUERY_OPS, _COUNT),
    FrameKind.CMM: (_ID, _COUNT),
    FrameKind.COM: (_ID, _COUNT),
    FrameKind.DSP: (_ID,),
    FrameKind.VAL: (_ID,),
    FrameKind.ERR: (_ID,),
    FrameKind.ANS: (_ID,),
    FrameKind.ACK: (_ID,),
    FrameKind.PAY: (_ID,),
    FrameKind.EXE: (_ID,),
    FrameKind.EXN: (_ID,),
    FrameKind.INT: (_ID, _ID),
    FrameKind.TXT: (_ID,),
    FrameKind.NIN: (_ID,),
    FrameKind.SYN: (_ID,),
    FrameKind.MRK: (_ID,),
}


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
    if len(args) != kind.arity:
        msg = f"{kind.name} takes {kind.arity} argument(s), got {len(args)}"
        raise exc(msg)
    for arg in args:
        if not (arg.isascii() and _ARG.fullmatch(arg.encode("ascii"))):
            msg = f"{kind.name} argument {arg!r} is not printable ASCII without spaces"
            raise exc(msg)
    for arg, rule in zip(args, _VALIDATORS.get(kind, ()), strict=False):
        ok = rule.fullmatch(arg) if isinstance(rule, re.Pattern) else arg in rule  # type: ignore[operator]
        if not ok:
            msg = f"{kind.name} argument {arg!r} is not valid here"
            raise exc(msg)


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
    """The one frame an MRK frame carries, or None for a bare marker."""
    if not frame.payload:
        return None
    decoder = Decoder()
    frames = decoder.feed(frame.payload)
    if len(frames) != 1 or decoder.buffered or frames[0].kind is FrameKind.MRK:
        msg = f"MRK {frame.args[0]} does not carry exactly one frame: {frame.payload[:80]!r}"
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
