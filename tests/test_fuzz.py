"""Bad input on the private socket, from both ends: nothing hangs, nothing is skipped.

Python side: whatever bytes arrive from Julia, the decoder yields frames or raises
ProtocolError; on a real connection the pending execution fails with JuliaDiedError naming the
malformed frame, and the next execution runs in a fresh Julia. Julia side: a raw peer feeds
``server.jl`` malformed frames; it must exit with status 86 and say "protocol error" in its log,
and it must answer or ignore frames that are valid but odd.

The properties that start Julia keep few examples (each costs a Julia start) and skip
hypothesis' shrink phase: a failing input is reported as generated, and every wait is bounded.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, assume, example, given, settings
from hypothesis import strategies as st

from jutul_jkernel import _resources
from jutul_jkernel.protocol.wire import (
    MAX_HEADER_BYTES,
    MAX_PAYLOAD_BYTES,
    Decoder,
    Frame,
    FrameKind,
    ProtocolError,
    encode,
)
from jutul_jkernel.supervisor.julia_supervisor import JuliaDiedError, JuliaSupervisor

from .clients import execute, result_of
from .conftest import STARTUP_TIMEOUT, start_kernel, stop_kernel

# A cell that wrote garbage must fail within this; the supervisor needs ~0.1 s to see the
# garbage plus up to 2 s to reap Julia, so this leaves room for a loaded machine.
GARBAGE_BOUND = 20.0
# A fresh Julia (spawn + handshake + first cell) on a loaded machine.
FRESH_CELL_BOUND = 60.0
# server.jl must exit this soon after a malformed frame, and answer a valid one this soon.
SERVER_EXIT_BOUND = 20.0
SERVER_ANSWER_BOUND = 30.0
# Julia-backed properties: each example starts one Julia (~1-2 s here).
SUPERVISOR_EXAMPLES = 16
SERVER_EXAMPLES = 15
DECODER_EXAMPLES = 400


# The whole of a Julia-backed property: every example (explicit ones too) gets its own bound.
# pytest's default 120 s was less than 15 examples at ~8 s each on a loaded machine.
def _property_timeout(examples: int, per_example: float) -> float:
    return (examples + 3) * per_example


JULIA_SETTINGS = settings(
    deadline=None,
    phases=(Phase.explicit, Phase.reuse, Phase.generate),  # no shrinking: see module doc
    suppress_health_check=[
        HealthCheck.function_scoped_fixture,
        HealthCheck.too_slow,
        HealthCheck.filter_too_much,
    ],
)


# ==== a reference for the frame format, independent of protocol/wire.py ====

# Written by hand from the format as the table in julia/JKernel/src/frames.jl documents it: the
# kinds, how many arguments each takes, what each argument may be. protocol/wire.py must agree
# with it, not with itself (nor with frames.toml, which its rules are generated from).
_REF_ID = rb"[1-9][0-9]{0,17}"
_REF_ARG = rb"[!-~]+"  # printable ASCII, no space
_REF_ARGS: dict[str, tuple[bytes, ...]] = {
    "RDY": (_REF_ARG,),
    "INF": (),
    "OUT": (rb"stdout|stderr",),
    "DSP": (_REF_ID,),
    "CLR": (_REF_ID, rb"0|1"),
    "VAL": (_REF_ID,),
    "ERR": (_REF_ID,),
    "RES": (_REF_ID, rb"ok|err|int"),
    "INP": (_REF_ID, rb"0|1"),
    "ANS": (_REF_ID,),
    "ACK": (_REF_ID,),
    "PAY": (_REF_ID,),
    "EXE": (_REF_ID,),
    "EXN": (_REF_ID, _REF_ARG),
    "INT": (_REF_ID, _REF_ID),
    "TXT": (_REF_ID,),
    "NIN": (_REF_ID,),
    "QRY": (_REF_ID, rb"complete|inspect|is_complete", rb"0|[1-9][0-9]{0,17}"),
    "SYN": (_REF_ID,),
    "MRK": (_REF_ID,),
}
_REF_PYTHON_TO_JULIA = ("EXE", "EXN", "INT", "TXT", "NIN", "QRY", "SYN")
_REF_HEADER_MAX = 255  # bytes of a header line before its newline
_REF_NBYTES = rb"0|[1-9][0-9]{0,9}"
_REF_PAYLOAD_MAX = 256 * 1024 * 1024

RefFrame = tuple[str, tuple[str, ...], bytes]


def reference_parse(data: bytes, eof: bool) -> tuple[list[RefFrame], bool]:
    """The frames at the start of ``data`` and whether the stream is malformed there (with
    ``eof``, a stream that ends inside a frame is malformed too)."""
    frames: list[RefFrame] = []
    pos = 0
    while pos < len(data):
        nl = data.find(b"\n", pos, pos + _REF_HEADER_MAX + 1)
        if nl < 0:
            return frames, eof or len(data) - pos > _REF_HEADER_MAX
        parts = data[pos:nl].split(b" ")
        kind = parts[0].decode("latin-1")
        rules = _REF_ARGS.get(kind)
        if rules is None or len(parts) != len(rules) + 2:
            return frames, True
        if not re.fullmatch(_REF_NBYTES, parts[-1]) or int(parts[-1]) > _REF_PAYLOAD_MAX:
            return frames, True
        if not all(re.fullmatch(rule, arg) for rule, arg in zip(rules, parts[1:-1], strict=True)):
            return frames, True
        end = nl + 1 + int(parts[-1])
        if end > len(data):
            return frames, eof
        args = tuple(a.decode("ascii") for a in parts[1:-1])
        frames.append((kind, args, data[nl + 1 : end]))
        pos = end
    return frames, False


def _decoder_verdict(data: bytes, cuts: list[int]) -> list[RefFrame] | None:
    """What protocol/wire.py makes of ``data`` then EOF: its frames, or None if it raised."""
    try:
        frames, dec = _feed_in_chunks(data, cuts)
        dec.check_eof()
    except ProtocolError:
        return None
    return [(f.kind.value, f.args, f.payload) for f in frames]


def _agrees_with_reference(data: bytes, cuts: list[int]) -> None:
    ref_frames, malformed = reference_parse(data, eof=True)
    got = _decoder_verdict(data, cuts)
    if malformed:
        assert got is None, f"protocol/wire.py accepted a malformed stream: {data[:120]!r}"
    else:
        assert got == ref_frames, f"protocol/wire.py rejected or misread {data[:120]!r}"


# ==== the decoder alone: random bytes decode or raise ProtocolError, nothing else ====


def _feed_in_chunks(data: bytes, cuts: list[int]) -> tuple[list[Frame], Decoder]:
    dec = Decoder()
    frames: list[Frame] = []
    pos = 0
    for size in [*cuts, len(data)]:
        chunk = data[pos : pos + size]
        pos += len(chunk)
        frames += dec.feed(chunk)
        # A buffer that holds no complete header never grows to MAX_HEADER_BYTES: past that
        # the decoder must already have raised.
        pending_header = dec._pending is not None
        assert pending_header or dec.buffered < MAX_HEADER_BYTES
    return frames, dec


@settings(max_examples=DECODER_EXAMPLES, deadline=None)
@given(data=st.binary(max_size=3000), cuts=st.lists(st.integers(1, 400), max_size=12))
@example(data=b"A" * MAX_HEADER_BYTES, cuts=[])
@example(data=b"OUT stdout 3\nab", cuts=[1, 1, 1])
@example(data=b"OUT stdout 2\nabOUT stdin 2\nab", cuts=[])
@example(data=b"RES 1 maybe 0\n", cuts=[])
@example(data=b"SYN 01 0\n", cuts=[3])
@example(data=b"ACK 0 0\n", cuts=[])
@example(data=b"QRY 5 complete -1 0\n", cuts=[])
@example(data=b"EXE 1 0x3\nabc", cuts=[])
@example(data=b"INF 0\n", cuts=[])
def test_decoder_random_bytes_give_frames_or_protocol_error(data: bytes, cuts: list[int]) -> None:
    """Any byte stream, cut anywhere, decodes to exactly the frames the reference parser finds,
    or raises ProtocolError where the reference finds it malformed; never another exception,
    and never buffers MAX_HEADER_BYTES without a header end."""
    _agrees_with_reference(data, cuts)


@st.composite
def _mutated_stream(draw: st.DrawFn) -> bytes:
    """A valid stream of frames with a few bytes replaced, inserted or removed."""
    frames = draw(
        st.lists(
            st.sampled_from(
                [
                    encode(FrameKind.OUT, "stdout", payload=b"hello\n"),
                    encode(FrameKind.RES, 3, "ok", payload=b"42"),
                    encode(FrameKind.QRY, 7, "complete", 3, payload=b"pri"),
                    encode(FrameKind.ACK, 12),
                    encode(FrameKind.INP, 4, 1, payload=b"password: "),
                    encode(FrameKind.CLR, 9, 0),
                ]
            ),
            min_size=1,
            max_size=6,
        )
    )
    data = bytearray(b"".join(frames))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(data)))
        op = draw(st.sampled_from(["replace", "insert", "delete"]))
        byte = draw(st.sampled_from([b" ", b"\n", b"0", b"9", b"-", b"\x00", b"\xff", b"Z"]))
        if op == "replace" and at < len(data):
            data[at : at + 1] = byte
        elif op == "insert":
            data[at:at] = byte
        elif at < len(data):
            del data[at]
    return bytes(data)


@settings(max_examples=DECODER_EXAMPLES, deadline=None)
@given(data=_mutated_stream(), cuts=st.lists(st.integers(1, 64), max_size=12))
def test_decoder_mutated_frames_give_frames_or_protocol_error(data: bytes, cuts: list[int]) -> None:
    """Near-valid streams (one byte off) decode as the reference parser says, or raise
    ProtocolError where it finds them malformed."""
    _agrees_with_reference(data, cuts)


@settings(max_examples=DECODER_EXAMPLES // 2, deadline=None)
@given(
    data=st.binary(min_size=1, max_size=2000).map(lambda b: b.replace(b"\n", b"")),
    cuts=st.lists(st.integers(1, 300), max_size=10),
)
def test_decoder_never_holds_a_header_without_newline_past_the_limit(
    data: bytes, cuts: list[int]
) -> None:
    """Bytes without a newline: ProtocolError as soon as MAX_HEADER_BYTES are buffered."""
    try:
        _, dec = _feed_in_chunks(data, cuts)
    except ProtocolError as exc:
        assert len(data) >= MAX_HEADER_BYTES
        assert "no header end" in str(exc)
        return
    assert len(data) < MAX_HEADER_BYTES
    assert dec.buffered == len(data)


# ==== Python side against a real Julia: garbage written from inside a cell ====

# Kinds Julia sends, with valid arguments: headers built from them are "almost right".
_FROM_JULIA_ARGS: dict[FrameKind, tuple[str, ...]] = {
    FrameKind.OUT: ("stdout",),
    FrameKind.DSP: ("1",),
    FrameKind.CLR: ("1", "0"),
    FrameKind.VAL: ("1",),
    FrameKind.ERR: ("1",),
    FrameKind.RES: ("1", "ok"),
    FrameKind.INP: ("1", "0"),
    FrameKind.ANS: ("1",),
    FrameKind.ACK: ("1",),
}
_KIND_NAMES = {k.value.encode() for k in FrameKind}


def _garbage() -> st.SearchStrategy[tuple[bytes, bool]]:
    """(bytes Julia writes on its socket, whether it then closes the socket)."""
    close = st.booleans()
    random_bytes = st.tuples(st.binary(min_size=1, max_size=700), close)
    no_newline = st.tuples(
        st.integers(MAX_HEADER_BYTES, MAX_HEADER_BYTES + 300).map(lambda n: b"Q" * n), close
    )
    bad_kind = st.tuples(
        st.from_regex(rb"[A-Za-z]{1,6}", fullmatch=True)
        .filter(lambda k: k not in _KIND_NAMES)
        .map(lambda k: k + b" 1 0\n"),
        close,
    )

    @st.composite
    def bad_arity(draw: st.DrawFn) -> bytes:
        kind = draw(st.sampled_from(list(_FROM_JULIA_ARGS)))
        n = draw(st.integers(0, 4).filter(lambda n: n != kind.arity))
        args = [draw(st.sampled_from(["1", "stdout", "ok", "0"])) for _ in range(n)]
        return " ".join([kind.value, *args, "0"]).encode() + b"\n"

    @st.composite
    def bad_nbytes(draw: st.DrawFn) -> bytes:
        kind = draw(st.sampled_from(list(_FROM_JULIA_ARGS)))
        nbytes = draw(
            st.sampled_from(["-1", "x", "01", "+5", "0x10", "1e3", "", "99999999999"])
            | st.integers(MAX_PAYLOAD_BYTES + 1, 10**30).map(str)
        )
        return " ".join([kind.value, *_FROM_JULIA_ARGS[kind], nbytes]).encode() + b"\n"

    @st.composite
    def bad_args(draw: st.DrawFn) -> bytes:
        kind = draw(st.sampled_from(list(_FROM_JULIA_ARGS)))
        args = list(_FROM_JULIA_ARGS[kind])
        i = draw(st.integers(0, len(args) - 1))
        args[i] = draw(st.sampled_from(["0", "-1", "abc", "stdin", "maybe", "2", "\xe9"]))
        return " ".join([kind.value, *args, "0"]).encode("utf-8") + b"\n"

    @st.composite
    def truncated(draw: st.DrawFn) -> bytes:
        payload = draw(st.binary(min_size=1, max_size=200))
        frame = encode(FrameKind.OUT, "stdout", payload=payload)
        return frame[: draw(st.integers(1, len(frame) - 1))]

    return st.one_of(
        random_bytes,
        no_newline,
        bad_kind,
        st.tuples(bad_arity(), close),
        st.tuples(bad_nbytes(), close),
        st.tuples(bad_args(), close),
        st.tuples(truncated(), st.just(True)),
    )


def _model_error(data: bytes, close: bool) -> str | None:
    """The ProtocolError protocol/wire.py raises for ``data`` (then EOF if ``close``), or None if
    it raises none or first decodes a whole frame (which the supervisor would act on)."""
    dec = Decoder()
    try:
        for i in range(len(data)):
            if dec.feed(data[i : i + 1]):
                return None
        if close:
            dec.check_eof()
    except ProtocolError as exc:
        return str(exc)
    return None


def _garbage_cell(data: bytes, close: bool) -> str:
    closing = "close(s); " if close else ""
    return (
        f'let s = JKernel.SOCK[]; write(s, hex2bytes("{data.hex()}")); flush(s); {closing}end; '
        "sleep(120)"
    )


class _Holder:
    """One supervisor on its own event loop, replaced when an example leaves it broken."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.sup = self._new()

    def _new(self) -> JuliaSupervisor:
        sup = JuliaSupervisor(threads=1, startup_timeout=STARTUP_TIMEOUT)
        self.run(sup.start(), STARTUP_TIMEOUT + 10)
        return sup

    def run(self, coro: object, timeout: float) -> object:
        return self.loop.run_until_complete(asyncio.wait_for(coro, timeout))  # type: ignore[arg-type]

    def replace(self) -> None:
        self.stop()
        self.sup = self._new()

    def stop(self) -> None:
        self.sup.kill_now()
        # A reader task that died of a non-protocol error re-raises it here (see
        # test_well_framed_payload_of_the_wrong_shape_is_a_protocol_error); teardown must go on.
        try:
            self.run(self.sup.shutdown(), 30)
        except Exception as exc:
            print(f"\n[teardown] shutdown raised {exc!r}")

    def close(self) -> None:
        self.stop()
        self.loop.run_until_complete(self.loop.shutdown_asyncgens())
        self.loop.close()


@pytest.fixture
def holder() -> Iterator[_Holder]:
    h = _Holder()
    try:
        yield h
    finally:
        h.close()


_supervisor_examples: list[float] = []


@pytest.mark.integration
@pytest.mark.timeout(
    _property_timeout(SUPERVISOR_EXAMPLES, GARBAGE_BOUND + FRESH_CELL_BOUND + STARTUP_TIMEOUT)
)
@settings(JULIA_SETTINGS, max_examples=SUPERVISOR_EXAMPLES)
@given(garbage=_garbage())
@example(garbage=(b"GARBAGE\n", False))
@example(garbage=(b"OUT stdout 10000\nab", True))
@example(garbage=(b"RES 1 ok 99999999999\n", False))
def test_garbage_from_julia_fails_the_cell_and_the_next_runs_fresh(
    holder: _Holder, garbage: tuple[bytes, bool]
) -> None:
    """Julia writing a malformed frame (and maybe closing) fails the cell with JuliaDiedError
    naming the protocol error, within a bound; the next cell on the same supervisor runs in a
    fresh Julia and says that state was lost."""
    data, close = garbage
    # The reference parser, not protocol/wire.py, decides what is malformed. Whole frames first
    # (the supervisor acts on them), or an incomplete frame on an open socket, are not tested.
    ref_frames, malformed = reference_parse(data, eof=close)
    assume(malformed and not ref_frames)
    expected = _model_error(data, close)
    assert expected is not None, f"protocol/wire.py accepts a malformed stream: {data[:120]!r}"
    t0 = time.perf_counter()
    sup = holder.sup
    try:
        with pytest.raises(JuliaDiedError) as info:
            holder.run(sup.execute(_garbage_cell(data, close)), GARBAGE_BOUND)
        message = str(info.value)
        assert "sent a malformed frame" in message, message
        assert expected in message, message
        result = holder.run(sup.execute("1 + 1"), FRESH_CELL_BOUND)
        assert result.text == "2"  # type: ignore[attr-defined]
        assert "fresh Julia" in (result.notice or "")  # type: ignore[attr-defined]
    except BaseException:
        holder.replace()
        raise
    _supervisor_examples.append(time.perf_counter() - t0)


# A peer that speaks just the handshake, writing RDY and INF the way FAKE_MODE says, then waits
# for EOF. Julia writes them as two frames, but nothing keeps them out of one TCP read: a
# supervisor whose loop was busy for a moment finds both in the socket buffer.
_HANDSHAKE_PEER = """
import os, socket, sys, time
token = os.environ["JUTUL_JKERNEL_TOKEN"]
info = b'{"julia_version": "0.0.0-fake", "pid": %d, "threads": 1}' % os.getpid()
data = ("RDY %s 0\\n" % token).encode() + b"INF %d\\n" % len(info) + info
mode = os.environ["FAKE_MODE"]
if mode == "with output":
    data += b"OUT stdout 6\\nhello\\n"
s = socket.socket(socket.AF_UNIX)
s.connect(sys.argv[-1])
if mode == "bytewise":
    for b in data:
        s.sendall(bytes([b]))
        time.sleep(0.002)
else:
    s.sendall(data)
s.settimeout(60)
while s.recv(4096):
    pass
"""
HANDSHAKE_BOUND = 15.0


@pytest.mark.integration
@pytest.mark.parametrize("mode", ["one write", "with output", "bytewise"])
async def test_handshake_frames_in_any_chunking(tmp_path: Path, mode: str) -> None:
    """RDY and INF arriving in one read (or byte by byte) complete the handshake: start()
    returns with the peer's INF facts well within the startup timeout."""
    peer = tmp_path / "fake-peer"
    peer.write_text(f"#!{sys.executable}\n{_HANDSHAKE_PEER}")
    peer.chmod(0o755)
    sup = JuliaSupervisor(julia=str(peer), env={"FAKE_MODE": mode}, startup_timeout=HANDSHAKE_BOUND)
    try:
        await asyncio.wait_for(sup.start(), HANDSHAKE_BOUND + 5)
        assert sup.julia_version == "0.0.0-fake"
    finally:
        await sup.shutdown()


# Frames that pass the decoder but carry JSON of the wrong shape for their kind. The reader
# must treat them like any malformed frame: fail the cell, never die silently and hang it.
WRONG_SHAPES = {
    "ERR traceback not a list": ("ERR", '{"ename": "E", "evalue": "v", "traceback": 5}'),
    "DSP data not an object": ("DSP", '{"data": 5, "metadata": {}}'),
    "VAL data not an object": ("VAL", '{"data": 5, "metadata": {}}'),
    "DSP data is a list": ("DSP", '{"data": [1, 2], "metadata": {}}'),
}
WRONG_SHAPE_BOUND = 8.0


@pytest.mark.integration
@pytest.mark.parametrize("case", list(WRONG_SHAPES))
def test_well_framed_payload_of_the_wrong_shape_is_a_protocol_error(
    holder: _Holder, case: str
) -> None:
    """A frame for the running cell whose JSON has the wrong shape fails the cell as malformed
    within a bound; the next cell runs in a fresh Julia."""
    code = _shape_cell(*WRONG_SHAPES[case])
    out: list[tuple[str, bytes]] = []
    sup = holder.sup
    # As the README calls it: an output callback, displays falling back to it.
    with pytest.raises(JuliaDiedError, match="malformed frame"):
        holder.run(sup.execute(code, lambda s, d: out.append((s, d))), WRONG_SHAPE_BOUND)
    assert holder.run(sup.execute("1 + 1"), FRESH_CELL_BOUND).text == "2"  # type: ignore[attr-defined]


@pytest.mark.e2e
@pytest.mark.parametrize("case", ["DSP data not an object", "VAL data not an object"])
def test_wrong_shape_through_jupyter_gets_an_error_reply(
    kernel_env: dict[str, str], case: str
) -> None:
    """Through Jupyter the same frames end the cell with an error reply (not silence, not a
    kernel traceback), and the next cell runs."""
    code = _shape_cell(*WRONG_SHAPES[case])
    km, kc = start_kernel()
    try:
        reply, _ = execute(kc, code, WRONG_SHAPE_BOUND + 5)
        assert reply["content"]["status"] == "error", reply["content"]
        assert "malformed frame" in reply["content"]["evalue"]
        assert result_of(execute(kc, "1 + 1", FRESH_CELL_BOUND)[1]) == "2"
    finally:
        stop_kernel(km, kc)


def _julia_string(s: str) -> str:
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("$", "\\$") + '"'


def _shape_cell(kind: str, payload: str) -> str:
    """A cell that sends one well-framed ``kind`` frame for itself, then sleeps 5 s."""
    return (
        f"let s = JKernel.SOCK[], p = {_julia_string(payload)}; "
        f'write(s, string("{kind} ", JKernel.CURRENT[], " ", sizeof(p), "\\n", p)); end; '
        "sleep(5); 7"
    )


# ==== Julia side: a raw peer feeds server.jl bad frames ====


# The kinds server.jl must accept and their arity, from the reference above, never from
# server.jl's own table: a wrong table there must fail these tests, not steer them.
_INCOMING = {kind: len(_REF_ARGS[kind]) for kind in _REF_PYTHON_TO_JULIA}


class RawServer:
    """``julia server.jl <port>`` connected to a plain socket of ours, after the handshake: the
    Windows form of the server (a loopback port, its output sent as OUT frames)."""

    def __init__(self, log_dir: Path) -> None:
        self.token = secrets.token_hex(16)
        fd, name = tempfile.mkstemp(prefix="raw-server-", suffix=".log", dir=log_dir)
        self.log_path = Path(name)
        self._log = os.fdopen(fd, "wb")
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
        listener.settimeout(STARTUP_TIMEOUT)
        env = {**os.environ, "JUTUL_JKERNEL_TOKEN": self.token, "JULIA_NUM_THREADS": "1"}
        # No output pipes of a supervisor: the server forwards its output as OUT frames itself
        # (the Windows path), which these tests read.
        env.pop("JUTUL_JKERNEL_STDOUT_FD", None)
        self.proc = subprocess.Popen(
            [
                "julia",
                "--startup-file=no",
                str(_resources.server_script()),
                str(listener.getsockname()[1]),
            ],
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            env=env,
            start_new_session=True,
        )
        self.decoder = Decoder()
        self.frames: list[Frame] = []
        self.eof = False
        try:
            self.conn, _ = listener.accept()
        except BaseException:
            self.close()
            raise
        finally:
            listener.close()
        first = self.wait_for(lambda f: f.kind is FrameKind.INF, STARTUP_TIMEOUT)
        assert first is not None, f"no INF frame; log:\n{self.log_text()}"
        assert self.frames[0].kind is FrameKind.RDY
        assert self.frames[0].args == (self.token,)

    def send(self, data: bytes) -> None:
        with contextlib.suppress(BrokenPipeError, ConnectionResetError):
            self.conn.sendall(data)

    def wait_for(self, pred: Callable[[Frame], bool], timeout: float) -> Frame | None:
        """Read until a frame matching ``pred`` arrives (returned), EOF or the timeout (None)."""
        for f in self.frames:
            if pred(f):
                return f
        deadline = time.monotonic() + timeout
        while not self.eof and time.monotonic() < deadline:
            self.conn.settimeout(max(0.01, deadline - time.monotonic()))
            try:
                data = self.conn.recv(65536)
            except TimeoutError:
                break
            except ConnectionResetError:
                data = b""
            if not data:
                self.eof = True
                break
            new = self.decoder.feed(data)
            self.frames += new
            for f in new:
                if pred(f):
                    return f
        return None

    def wait_exit(self, timeout: float) -> int | None:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            return None

    def log_text(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")

    def close(self) -> None:
        # Kill the group (the server and anything it left in it) before reaping the server:
        # until then its pid, and so the group id, cannot name anyone else's processes.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(30)
        if hasattr(self, "conn"):
            self.conn.close()
        self._log.close()


@pytest.fixture(scope="module")
def raw_log_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("raw-server")


@st.composite
def _odd_frames(draw: st.DrawFn) -> list[tuple[bytes, tuple[str, int] | None]]:
    """Valid frames that are odd at this moment; each with the answer it must get, if any."""
    out: list[tuple[bytes, tuple[str, int] | None]] = []
    ids = iter(range(draw(st.integers(100, 10**6)), 10**7))
    for _ in range(draw(st.integers(0, 3))):
        i = next(ids)
        choice = draw(st.sampled_from(["SYN", "INT", "TXT", "NIN", "QRY", "EXE", "EXN"]))
        if choice == "SYN":
            out.append((encode(FrameKind.SYN, i), ("ACK", i)))
        elif choice == "INT":  # not started yet: the server takes it for a cell to come
            # (INTERRUPTED_BEFORE_START, with or without an ACK); unchecked, it must not harm
            out.append((encode(FrameKind.INT, i, i), None))
        elif choice in ("TXT", "NIN"):  # nobody asked for input: ignored
            kind = FrameKind.TXT if choice == "TXT" else FrameKind.NIN
            out.append((encode(kind, i, payload=draw(st.binary(max_size=50))), None))
        elif choice == "QRY":
            op = draw(st.sampled_from(["complete", "inspect", "is_complete"]))
            code = draw(
                st.text(st.characters(blacklist_categories=("Cs",)), max_size=30).filter(
                    lambda c: "/" not in c and "~" not in c
                )  # no filesystem walks
            )
            cursor = draw(st.integers(0, 40))
            out.append((encode(FrameKind.QRY, i, op, cursor, payload=code.encode()), ("ANS", i)))
        else:
            code = draw(st.sampled_from([b"1 + 1", b"", b"\xff\xfe\x00", b"x = (", b"nothing;"]))
            if choice == "EXE":
                frame = encode(FrameKind.EXE, i, payload=code)
            else:
                name = draw(st.from_regex(r"[!-~]{1,40}", fullmatch=True))
                frame = encode(FrameKind.EXN, i, name, payload=code)
            out.append((frame, ("RES", i)))
    return out


@st.composite
def _malformed_frame(draw: st.DrawFn) -> tuple[bytes, tuple[str, ...]]:
    """A malformed frame for server.jl and the phrases (any of) its log must name."""
    what = draw(
        st.sampled_from(
            ["kind", "reply kind", "arity", "nbytes", "huge", "id", "long", "binary", "cursor"]
        )
    )
    if what == "kind":
        kind = draw(
            st.from_regex(r"[A-Z]{1,6}", fullmatch=True).filter(lambda k: k not in _INCOMING)
        )
        return f"{kind} 1 0\n".encode(), ("unknown frame kind",)
    if what == "reply kind":  # a kind only Julia sends
        kind = draw(st.sampled_from(["RDY", "INF", "OUT", "RES", "ACK", "ANS", "DSP", "ERR"]))
        return f"{kind} 1 0\n".encode(), ("unknown frame kind",)
    if what == "arity":
        kind = draw(st.sampled_from(list(_INCOMING)))
        n = draw(st.integers(0, 5).filter(lambda n: n != _INCOMING[kind]))
        sep = draw(st.sampled_from([" ", "  "]))
        # A doubled space is an empty argument: the count may then fit, with an empty id.
        phrases = ("wrong argument count",) if sep == " " else ("wrong argument count", "bad id")
        return sep.join([kind, *["1"] * n, "0"]).encode() + b"\n", phrases
    if what in ("nbytes", "huge"):
        kind = draw(st.sampled_from(list(_INCOMING)))
        if what == "huge":
            nbytes = str(draw(st.integers(MAX_PAYLOAD_BYTES + 1, 10**40)))
        else:
            nbytes = draw(
                st.integers(-(10**12), -1).map(str)
                | st.sampled_from(["x", "", "1e3", "1.5", "--1", "½", "NaN"])
            )
        args = ["1", "complete", "0"][: _INCOMING[kind]]
        return " ".join([kind, *args, nbytes]).encode() + b"\n", ("bad NBYTES",)
    if what == "id":
        kind = draw(st.sampled_from(list(_INCOMING)))
        bad = draw(
            st.integers(-(10**12), 0).map(str)
            | st.integers(2**63, 10**30).map(str)
            | st.sampled_from(["x", "one", "1.0", "1e3", "-", "½"])
        )
        args = [bad, "complete", "0"][: _INCOMING[kind]]
        return " ".join([kind, *args, "0"]).encode() + b"\n", ("bad id",)
    if what == "long":
        n = draw(st.integers(MAX_HEADER_BYTES, MAX_HEADER_BYTES + 200))
        newline = draw(st.booleans())
        return b"S" * n + (b"\n" if newline else b""), ("no header end", "header longer than")
    if what == "binary":
        data = draw(st.binary(min_size=1, max_size=400))
        head = data.split(b"\n", 1)[0]
        if b"\n" in data[:MAX_HEADER_BYTES]:
            return data, ("unknown frame kind", "no header end", "header longer than")
        pad = b"\x00" * max(0, MAX_HEADER_BYTES - len(data))
        return head + pad, ("no header end", "header longer than")
    cursor = draw(st.integers(-(10**6), -1).map(str) | st.sampled_from(["x", "", "1.5"]))
    return f"QRY 5 complete {cursor} 3\nabc".encode(), ("bad cursor",)


def _binary_is_malformed(frame: tuple[bytes, tuple[str, ...]]) -> bool:
    data, phrases = frame
    if "unknown frame kind" not in phrases or len(phrases) == 1:
        return True
    head = data.split(b"\n", 1)[0]
    return head.split(b" ")[0].decode("utf-8", "replace") not in _INCOMING


_server_examples: list[float] = []


@pytest.mark.integration
@pytest.mark.timeout(
    _property_timeout(SERVER_EXAMPLES, STARTUP_TIMEOUT + SERVER_ANSWER_BOUND + SERVER_EXIT_BOUND)
)
@settings(JULIA_SETTINGS, max_examples=SERVER_EXAMPLES)
@given(odd=_odd_frames(), bad=_malformed_frame().filter(_binary_is_malformed))
@example(odd=[], bad=(b"BOGUS 1 2 3\n", ("unknown frame kind",)))
@example(odd=[], bad=(f"EXE 1 {MAX_PAYLOAD_BYTES + 1}\n".encode(), ("bad NBYTES",)))
@example(odd=[], bad=(b"SYN 0 0\n", ("bad id",)))
def test_server_answers_odd_frames_and_exits_86_on_malformed_ones(
    raw_log_dir: Path,
    odd: list[tuple[bytes, tuple[str, int] | None]],
    bad: tuple[bytes, tuple[str, ...]],
) -> None:
    """server.jl answers or ignores valid-but-odd frames and stays up; a malformed frame makes
    it exit with status 86 within a bound, its log naming the problem after "protocol error"."""
    t0 = time.perf_counter()
    server = RawServer(raw_log_dir)
    try:
        for data, _ in odd:
            server.send(data)
        sync = 10**8 + 7
        server.send(encode(FrameKind.SYN, sync))
        for _, answer in [*odd, (b"", ("ACK", sync))]:
            if answer is None:
                continue
            kind, ident = answer
            got = server.wait_for(
                lambda f, k=kind, i=ident: f.kind.value == k and f.args[0] == str(i),
                SERVER_ANSWER_BOUND,
            )
            assert got is not None, f"no {kind} {ident}; log:\n{server.log_text()}"
        assert server.proc.poll() is None, server.log_text()
        data, phrases = bad
        server.send(data)
        status = server.wait_exit(SERVER_EXIT_BOUND)
        log = server.log_text()
        assert status == 86, f"exit status {status} after {data[:80]!r}; log:\n{log}"
        assert "protocol error" in log
        assert any(p in log for p in phrases), f"{phrases} not in log:\n{log}"
    finally:
        server.close()
    _server_examples.append(time.perf_counter() - t0)


# Numbers protocol/wire.py rejects (it takes [1-9][0-9]* and 0 only). server.jl must agree, not read
# "0x10" as 16 or "+1" as 1: the two decoders share one format ("change both or neither").
NON_CANONICAL = {
    "hex id": b"SYN 0x10 0\n",
    "plus-signed id": b"SYN +1 0\n",
    "leading-zero id": b"SYN 01 0\n",
    "binary-literal NBYTES": b"EXE 1 0b11\n1+1",
    "hex NBYTES": b"EXE 1 0x3\n1+1",
    "carriage return before the newline": b"SYN 1 0\r\n",
    "unknown QRY op": b"QRY 5 evaluate 0 3\n1+1",
}


@pytest.mark.integration
@pytest.mark.parametrize("case", list(NON_CANONICAL))
def test_server_rejects_what_protocol_py_rejects(raw_log_dir: Path, case: str) -> None:
    """A header protocol/wire.py would refuse is a protocol error for server.jl too (exit 86)."""
    data = NON_CANONICAL[case]
    with pytest.raises(ProtocolError):
        d = Decoder()
        d.feed(data)
        d.check_eof()
    server = RawServer(raw_log_dir)
    try:
        server.send(data)
        server.send(encode(FrameKind.SYN, 424242))
        # A server that accepted the frame answers the SYN (and maybe the frame); one that
        # rejected it closes the connection.
        answered = server.wait_for(
            lambda f: f.kind is FrameKind.ACK and f.args[0] == "424242", SERVER_EXIT_BOUND
        )
        replies = [f"{f.kind.value} {' '.join(f.args)}" for f in server.frames[2:]]
        assert answered is None, f"server.jl accepted {data!r} and went on: {replies}"
        status = server.wait_exit(SERVER_EXIT_BOUND)
        assert status == 86, server.log_text()
        assert "protocol error" in server.log_text()
    finally:
        server.close()


@pytest.fixture(scope="module", autouse=True)
def _report_example_timings() -> Iterator[None]:
    """Print, at the end of the module, how many Julia-backed examples ran and their time."""
    yield
    for name, times in (
        ("supervisor garbage", _supervisor_examples),
        ("server malformed", _server_examples),
    ):
        if times:
            print(
                f"\n[fuzz] {name}: {len(times)} examples, "
                f"mean {sum(times) / len(times):.2f} s, max {max(times):.2f} s"
            )
