"""Unit tests for the frame codec in ``jutul_jkernel.protocol.wire`` (pure bytes, no I/O)."""

from __future__ import annotations

import itertools
import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from jutul_jkernel.protocol.kinds import ARGS
from jutul_jkernel.protocol.wire import (
    MAX_HEADER_BYTES,
    MAX_PAYLOAD_BYTES,
    OUTPUT_STREAMS,
    QUERY_OPS,
    RESULT_STATUSES,
    Decoder,
    Frame,
    FrameKind,
    ProtocolError,
    encode,
    inner_frame,
)
from jutul_jkernel.supervisor.frame_payloads import comm_of, encode_comm
from jutul_jkernel.supervisor.output_sink import CommMessage

# An example of each named rule of frames.toml; a "words" argument takes its last word. Every
# kind's valid arguments follow from its declared rules (protocol/kinds.py ARGS).
RULE_EXAMPLES = {"id": "7", "count": "120", "token": "In[3]"}
VALID_ARGS: dict[FrameKind, tuple[str, ...]] = {
    kind: tuple(a.words[-1] if a.rule == "words" else RULE_EXAMPLES[a.rule] for a in ARGS[kind])
    for kind in FrameKind
}

NASTY_PAYLOAD = b"\x00\xff\xfe\n\nRES 1 ok 3\n\xc3\x28\r\n\x00"


def decode_all(data: bytes) -> list[Frame]:
    dec = Decoder()
    frames = dec.feed(data)
    dec.check_eof()
    assert dec.buffered == 0
    return frames


def sample_stream() -> tuple[bytes, list[Frame], list[int]]:
    """Several frames of mixed kinds; returns the bytes, the frames and each frame's end offset."""
    frames = [
        Frame(FrameKind.RDY, ("tok",), b""),
        Frame(FrameKind.OUT, ("stdout",), b"hello\nworld\n"),
        Frame(FrameKind.INF, (), b'{"pid": 1}'),
        Frame(FrameKind.CLR, ("3", "0"), b""),
        Frame(FrameKind.VAL, ("3",), NASTY_PAYLOAD),
        Frame(FrameKind.RES, ("3", "ok"), b"2"),
        Frame(FrameKind.ACK, ("1",), b""),
    ]
    data = b""
    ends = []
    for f in frames:
        data += encode(f.kind, *f.args, payload=f.payload)
        ends.append(len(data))
    return data, frames, ends


def assert_rejected(data: bytes, quoted: bytes) -> ProtocolError:
    with pytest.raises(ProtocolError) as info:
        Decoder().feed(data)
    assert repr(quoted) in str(info.value)
    return info.value


def test_valid_args_table_covers_every_kind() -> None:
    """Every FrameKind has an example in VALID_ARGS, with as many args as its arity."""
    assert set(VALID_ARGS) == set(FrameKind)
    for kind, args in VALID_ARGS.items():
        assert len(args) == kind.arity
    assert VALID_ARGS[FrameKind.QRY] == ("7", "comm_target", "120")


@pytest.mark.parametrize("kind", list(FrameKind), ids=lambda k: k.name)
def test_round_trip_every_kind(kind: FrameKind) -> None:
    """encode then Decoder.feed gives back the same Frame for every kind."""
    args = VALID_ARGS[kind]
    payload = b"payload for " + kind.name.encode()
    data = encode(kind, *args, payload=payload)
    assert data.startswith(f"{kind.name} ".encode())
    assert decode_all(data) == [Frame(kind, args, payload)]


def test_encode_accepts_int_args() -> None:
    """Non-str args are stringified, so encode(RES, 5, 'ok') decodes to args ('5', 'ok')."""
    assert decode_all(encode(FrameKind.RES, 5, "ok")) == [Frame(FrameKind.RES, ("5", "ok"))]


def test_wire_format_is_header_line_then_payload() -> None:
    """The bytes on the wire are exactly 'KIND arg... NBYTES\\n' followed by the payload."""
    assert encode(FrameKind.QRY, 4, "complete", 12, payload=b"x\ny") == b"QRY 4 complete 12 3\nx\ny"
    assert encode(FrameKind.INF) == b"INF 0\n"


def test_single_byte_feeds_return_each_frame_on_its_last_byte() -> None:
    """Fed one byte at a time, each frame is returned by the feed of its final byte, in order."""
    data, frames, ends = sample_stream()
    dec = Decoder()
    got: list[Frame] = []
    for i in range(len(data)):
        out = dec.feed(data[i : i + 1])
        expected = [f for f, end in zip(frames, ends, strict=True) if end == i + 1]
        assert out == expected, f"at offset {i}"
        got += out
    dec.check_eof()
    assert got == frames
    assert dec.buffered == 0


def test_every_split_point_gives_same_frames() -> None:
    """Splitting the stream into two feeds at any offset yields the same frames."""
    data, frames, _ = sample_stream()
    for cut in range(len(data) + 1):
        dec = Decoder()
        got = dec.feed(data[:cut]) + dec.feed(data[cut:])
        dec.check_eof()
        assert got == frames, f"cut at {cut}"


def test_empty_feed_is_harmless() -> None:
    """Feeding b'' returns nothing and does not disturb a partially received frame."""
    dec = Decoder()
    assert dec.feed(b"") == []
    assert dec.feed(b"OUT std") == []
    assert dec.feed(b"") == []
    assert dec.feed(b"out 2\nhi") == [Frame(FrameKind.OUT, ("stdout",), b"hi")]


def test_empty_payload() -> None:
    """A frame with NBYTES 0 decodes with payload b'' as soon as its header line arrives."""
    dec = Decoder()
    assert dec.feed(b"SYN 5 0") == []
    assert dec.feed(b"\n") == [Frame(FrameKind.SYN, ("5",), b"")]
    dec.check_eof()


def test_large_binary_payload_is_byte_exact() -> None:
    """An 8 MiB payload holding every byte value, NULs and invalid UTF-8 arrives unchanged."""
    pattern = bytes(range(256)) + b"\x00\x00\xc3\x28\xed\xa0\x80\xff\nOUT stdout 1\n"
    payload = (pattern * (8 * 1024 * 1024 // len(pattern) + 1))[: 8 * 1024 * 1024]
    data = encode(FrameKind.OUT, "stdout", payload=payload) + encode(FrameKind.ACK, 2)
    dec = Decoder()
    got: list[Frame] = []
    step = 65521
    for i in range(0, len(data), step):
        got += dec.feed(data[i : i + step])
    dec.check_eof()
    assert len(got) == 2
    assert got[0].kind is FrameKind.OUT
    assert got[0].payload == payload
    assert got[1] == Frame(FrameKind.ACK, ("2",), b"")


def test_payload_with_newlines_and_fake_headers_is_not_parsed() -> None:
    """Payload bytes that contain newlines and header-like text are taken as payload only."""
    fake = b"RES 1 ok 0\nOUT stdout 5\nhello\n\n"
    payload = b"\n" + fake + b"garbage \xff\n" + fake
    data = encode(FrameKind.TXT, 9, payload=payload) + encode(FrameKind.RES, 9, "ok")
    assert decode_all(data) == [
        Frame(FrameKind.TXT, ("9",), payload),
        Frame(FrameKind.RES, ("9", "ok"), b""),
    ]


def test_longest_allowed_header_decodes() -> None:
    """A header of exactly MAX_HEADER_BYTES bytes (newline included) encodes and decodes."""
    overhead = len(b"RDY  0\n")
    token = "t" * (MAX_HEADER_BYTES - overhead)
    data = encode(FrameKind.RDY, token)
    assert len(data) == MAX_HEADER_BYTES
    assert decode_all(data) == [Frame(FrameKind.RDY, (token,), b"")]


MALFORMED_HEADERS = [
    pytest.param(b"XYZ 1 0", id="unknown-kind"),
    pytest.param(b"rdy tok 0", id="lowercase-kind"),
    pytest.param(b"", id="empty-line"),
    pytest.param(b" RDY tok 0", id="leading-space"),
    pytest.param(b"RES 1 0", id="too-few-args"),
    pytest.param(b"RES 1 ok extra 0", id="too-many-args"),
    pytest.param(b"INF x 0", id="arg-for-zero-arity"),
    pytest.param(b"RES 1  ok 0", id="double-space"),
    pytest.param(b"RES 1 ok 0 ", id="trailing-space"),
    pytest.param(b"RES 1 ok 0\r", id="carriage-return"),
    pytest.param(b"RES\t1 ok 0", id="tab-separator"),
    pytest.param(b"OUT stdout abc", id="nbytes-non-numeric"),
    pytest.param(b"OUT stdout ", id="nbytes-empty"),
    pytest.param(b"OUT stdout -1", id="nbytes-negative"),
    pytest.param(b"OUT stdout 05", id="nbytes-leading-zero"),
    pytest.param(b"OUT stdout 00", id="nbytes-double-zero"),
    pytest.param(b"OUT stdout +5", id="nbytes-plus"),
    pytest.param(b"OUT stdout 1e3", id="nbytes-exponent"),
    pytest.param(b"OUT stdout 0x10", id="nbytes-hex"),
    pytest.param(b"OUT stdout 1_000", id="nbytes-underscore"),
    pytest.param("OUT stdout \u0665".encode(), id="nbytes-unicode-digit"),
    pytest.param(f"OUT stdout {MAX_PAYLOAD_BYTES + 1}".encode(), id="nbytes-over-max"),
    pytest.param(b"OUT stdout 99999999999", id="nbytes-eleven-digits"),
    pytest.param("RDY t\u00f6k 0".encode(), id="non-ascii-arg"),
    pytest.param("R\u00c9S 1 ok 0".encode(), id="non-ascii-kind"),
    pytest.param(b"RDY \xff 0", id="invalid-utf8-arg"),
    pytest.param(b"RDY a\x01b 0", id="control-char-arg"),
    pytest.param(b"RDY a\x7fb 0", id="del-char-arg"),
    pytest.param(b"OUT stdin 3", id="out-stream-stdin"),
    pytest.param(b"OUT STDOUT 3", id="out-stream-uppercase"),
    pytest.param(b"RES 1 maybe 0", id="res-status-maybe"),
    pytest.param(b"RES 0 ok 0", id="res-id-zero"),
    pytest.param(b"RES abc ok 0", id="res-id-abc"),
    pytest.param(b"RES 01 ok 0", id="res-id-leading-zero"),
    pytest.param(b"RES -1 ok 0", id="res-id-negative"),
    pytest.param(b"RES 1234567890123456789 ok 0", id="res-id-nineteen-digits"),
    pytest.param(b"CLR 1 2 0", id="clr-wait-2"),
    pytest.param(b"INP 1 yes 0", id="inp-password-yes"),
    pytest.param(b"QRY 1 hover 0 0", id="qry-unknown-op"),
    pytest.param(b"QRY 1 complete -1 0", id="qry-negative-cursor"),
    pytest.param(b"QRY 1 complete 01 0", id="qry-leading-zero-cursor"),
    pytest.param(b"EXE 0 0", id="exe-id-zero"),
    pytest.param(b"SYN x 0", id="syn-seq-non-numeric"),
]


@pytest.mark.parametrize("header", MALFORMED_HEADERS)
def test_malformed_header_raises_quoting_it(header: bytes) -> None:
    """A malformed header line raises ProtocolError whose message quotes that header."""
    assert_rejected(header + b"\nxyz", header)


@pytest.mark.parametrize("header", MALFORMED_HEADERS)
def test_malformed_header_raises_when_fed_bytewise(header: bytes) -> None:
    """A malformed header is rejected no later than the feed that delivers its newline."""
    dec = Decoder()
    for b in header:
        assert dec.feed(bytes([b])) == []
    with pytest.raises(ProtocolError) as info:
        dec.feed(b"\n")
    assert repr(header) in str(info.value)


def test_nbytes_at_max_is_accepted() -> None:
    """NBYTES equal to MAX_PAYLOAD_BYTES is a valid header (the decoder waits for the payload)."""
    dec = Decoder()
    assert dec.feed(f"OUT stdout {MAX_PAYLOAD_BYTES}\n".encode() + b"abc") == []
    assert dec.buffered == 3


def test_no_newline_within_max_header_bytes_raises() -> None:
    """MAX_HEADER_BYTES bytes without a newline raise ProtocolError quoting the start of them."""
    junk = b"RDY " + b"x" * (MAX_HEADER_BYTES - 4)
    dec = Decoder()
    assert dec.feed(junk[:-1]) == []
    with pytest.raises(ProtocolError) as info:
        dec.feed(junk[-1:])
    assert repr(junk[:60]) in str(info.value)


def test_newline_just_past_max_header_bytes_raises() -> None:
    """A header line one byte longer than MAX_HEADER_BYTES is rejected even with its newline."""
    line = b"RDY " + b"x" * (MAX_HEADER_BYTES - len(b"RDY  0\n") + 1) + b" 0\n"
    assert len(line) == MAX_HEADER_BYTES + 1
    with pytest.raises(ProtocolError) as info:
        Decoder().feed(line)
    assert repr(line[:60]) in str(info.value)


def test_binary_garbage_without_newline_raises() -> None:
    """A flood of non-header binary bytes is rejected once MAX_HEADER_BYTES have arrived."""
    assert_rejected(b"\x00\xff" * MAX_HEADER_BYTES, (b"\x00\xff" * MAX_HEADER_BYTES)[:60])


def test_bad_frame_after_good_frames_in_one_chunk_raises() -> None:
    """Good frames followed by a bad header in the same chunk make feed raise, not skip it."""
    good = encode(FrameKind.OUT, "stdout", payload=b"a") + encode(FrameKind.RES, 1, "ok")
    assert_rejected(good + b"RES 1 maybe 0\n" + encode(FrameKind.ACK, 1), b"RES 1 maybe 0")


def test_bad_frame_after_good_frames_in_separate_chunks() -> None:
    """Good frames are returned by their own feed; the later bad header then raises."""
    dec = Decoder()
    assert dec.feed(encode(FrameKind.OUT, "stdout", payload=b"a")) == [
        Frame(FrameKind.OUT, ("stdout",), b"a")
    ]
    assert dec.feed(encode(FrameKind.RES, 1, "ok") + b"XYZ") == [Frame(FrameKind.RES, ("1", "ok"))]
    with pytest.raises(ProtocolError, match="XYZ 0"):
        dec.feed(b" 0\n" + encode(FrameKind.ACK, 1))


def test_bad_frame_after_good_frames_never_silently_skipped_at_any_split() -> None:
    """At every split of good+bad+good bytes, decoding raises and never yields the last frame."""
    tail = encode(FrameKind.ACK, 5)
    data = encode(FrameKind.EXE, 1, payload=b"1+1") + b"OUT stdin 2\nhi" + tail
    for cut in range(len(data) + 1):
        dec = Decoder()
        seen: list[Frame] = []
        with pytest.raises(ProtocolError):
            seen += dec.feed(data[:cut])
            seen += dec.feed(data[cut:])
        assert Frame(FrameKind.ACK, ("5",)) not in seen, f"cut at {cut}"
        assert seen in ([], [Frame(FrameKind.EXE, ("1",), b"1+1")]), f"cut at {cut}"


def test_check_eof_inside_header_raises() -> None:
    """check_eof raises when the stream stops part-way through a header line."""
    dec = Decoder()
    dec.feed(encode(FrameKind.ACK, 1) + b"RES 1 o")
    with pytest.raises(ProtocolError, match="header"):
        dec.check_eof()


def test_check_eof_inside_payload_raises() -> None:
    """check_eof raises when the stream stops part-way through a payload."""
    dec = Decoder()
    dec.feed(encode(FrameKind.OUT, "stdout", payload=b"hello")[:-2])
    with pytest.raises(ProtocolError, match="OUT"):
        dec.check_eof()


def test_check_eof_after_header_before_payload_raises() -> None:
    """check_eof raises when a header with NBYTES > 0 arrived but none of its payload did."""
    dec = Decoder()
    dec.feed(b"EXE 1 4\n")
    with pytest.raises(ProtocolError, match="0 of 4"):
        dec.check_eof()


def test_check_eof_after_whole_frames_is_silent() -> None:
    """check_eof does not raise on a fresh decoder or after only whole frames arrived."""
    dec = Decoder()
    dec.check_eof()
    data, frames, _ = sample_stream()
    assert dec.feed(data) == frames
    dec.check_eof()


@pytest.mark.parametrize(
    ("kind", "args"),
    [
        pytest.param(FrameKind.RES, ("1",), id="res-too-few"),
        pytest.param(FrameKind.RES, ("1", "ok", "x"), id="res-too-many"),
        pytest.param(FrameKind.INF, ("x",), id="inf-with-arg"),
        pytest.param(FrameKind.QRY, ("1", "complete"), id="qry-too-few"),
        pytest.param(FrameKind.OUT, ("stdin",), id="out-stdin"),
        pytest.param(FrameKind.RES, ("1", "maybe"), id="res-maybe"),
        pytest.param(FrameKind.RES, ("0", "ok"), id="res-id-0"),
        pytest.param(FrameKind.RES, ("abc", "ok"), id="res-id-abc"),
        pytest.param(FrameKind.RES, (-1, "ok"), id="res-id-negative-int"),
        pytest.param(FrameKind.RES, (0, "ok"), id="res-id-0-int"),
        pytest.param(FrameKind.EXE, ("01",), id="exe-leading-zero"),
        pytest.param(FrameKind.CLR, ("1", "2"), id="clr-wait-2"),
        pytest.param(FrameKind.INP, ("1", True), id="inp-password-bool"),
        pytest.param(FrameKind.QRY, ("1", "hover", "0"), id="qry-op"),
        pytest.param(FrameKind.QRY, ("1", "inspect", "-3"), id="qry-cursor-negative"),
        pytest.param(FrameKind.RDY, ("",), id="rdy-empty-token"),
        pytest.param(FrameKind.RDY, ("a b",), id="rdy-space"),
        pytest.param(FrameKind.RDY, ("a\nb",), id="rdy-newline"),
        pytest.param(FrameKind.RDY, ("t\u00f6k",), id="rdy-non-ascii"),
        pytest.param(FrameKind.RDY, ("x" * MAX_HEADER_BYTES,), id="header-too-long"),
    ],
)
def test_encode_rejects_invalid_args(kind: FrameKind, args: tuple[object, ...]) -> None:
    """encode raises ValueError for wrong arity or argument values the decoder would reject."""
    with pytest.raises(ValueError):
        encode(kind, *args)


ASCII_TOKEN = st.text(
    alphabet=st.characters(min_codepoint=ord("!"), max_codepoint=ord("~")), min_size=1, max_size=64
)
IDS = st.integers(min_value=1, max_value=10**18 - 1).map(str)
CURSORS = st.integers(min_value=0, max_value=10**18 - 1).map(str)
RULE_STRATEGIES: dict[str, st.SearchStrategy[str]] = {
    "id": IDS,
    "count": CURSORS,
    "token": ASCII_TOKEN,
}
ARG_STRATEGIES: dict[FrameKind, tuple[st.SearchStrategy[str], ...]] = {
    kind: tuple(
        st.sampled_from(a.words) if a.rule == "words" else RULE_STRATEGIES[a.rule]
        for a in ARGS[kind]
    )
    for kind in FrameKind
}


@st.composite
def frames_strategy(draw: st.DrawFn) -> Frame:
    kind = draw(st.sampled_from(list(FrameKind)))
    args = tuple(draw(s) for s in ARG_STRATEGIES[kind])
    payload = draw(
        st.one_of(
            st.binary(max_size=64),
            st.binary(max_size=4096),
            st.sampled_from((b"", b"\n", NASTY_PAYLOAD, b"OUT stdout 3\nabc")),
        )
    )
    return Frame(kind, args, payload)


def test_arg_strategies_cover_every_kind() -> None:
    """The property test draws arguments for every FrameKind with the right arity, and the
    words of each words rule are the codec's public tuples."""
    assert set(ARG_STRATEGIES) == set(FrameKind)
    assert all(len(ARG_STRATEGIES[k]) == k.arity for k in FrameKind)
    assert OUTPUT_STREAMS == ("stdout", "stderr")
    assert RESULT_STATUSES == ("ok", "err", "int")
    assert QUERY_OPS == ("complete", "inspect", "is_complete", "comm_target")


@settings(max_examples=200, deadline=None)
@given(frames=st.lists(frames_strategy(), max_size=12), data=st.data())
def test_random_frames_survive_random_splits(frames: list[Frame], data: st.DataObject) -> None:
    """Any list of valid frames, encoded, concatenated and split anywhere, decodes to itself."""
    stream = b"".join(encode(f.kind, *f.args, payload=f.payload) for f in frames)
    cuts = sorted(data.draw(st.lists(st.integers(min_value=0, max_value=len(stream)), max_size=20)))
    bounds = [0, *cuts, len(stream)]
    dec = Decoder()
    got: list[Frame] = []
    for lo, hi in itertools.pairwise(bounds):
        got += dec.feed(stream[lo:hi])
    dec.check_eof()
    assert got == frames
    assert dec.buffered == 0


# ==== MRK: one frame ordered after an output marker ====


def test_mrk_carries_one_whole_frame() -> None:
    """MRK's payload decodes to the frame inside; a bare MRK carries none."""
    inner = encode(FrameKind.RES, 7, "ok", payload=b"3")
    (mrk,) = decode_all(encode(FrameKind.MRK, 2, payload=inner))
    assert inner_frame(mrk) == Frame(FrameKind.RES, ("7", "ok"), b"3")
    assert inner_frame(Frame(FrameKind.MRK, ("2",))) is None


@pytest.mark.parametrize(
    "payload",
    [
        encode(FrameKind.RES, 7, "ok") + encode(FrameKind.RES, 8, "ok"),  # two frames
        encode(FrameKind.RES, 7, "ok", payload=b"abc")[:-1],  # a cut frame
        encode(FrameKind.MRK, 1, payload=encode(FrameKind.RES, 7, "ok")),  # nested
        b"not a frame\n",
    ],
)
def test_mrk_with_anything_but_one_frame_raises(payload: bytes) -> None:
    with pytest.raises(ProtocolError, match=r"MRK|unknown frame kind"):
        inner_frame(Frame(FrameKind.MRK, ("1",), payload))


# ---- comm messages (supervisor/frame_payloads.py): a JSON head, then the buffers it counts ----


def _cmm(head: dict[str, object], buffers: bytes = b"", eid: int = 7) -> Frame:
    raw = json.dumps(head).encode()
    (frame,) = decode_all(encode(FrameKind.CMM, eid, len(raw), payload=raw + buffers))
    return frame


def test_a_comm_message_round_trips_with_its_buffers() -> None:
    """encode_comm (to Julia) and comm_of (from Julia) share one layout: JSON, then buffers."""
    sent = CommMessage(
        "comm_msg", {"comm_id": "c1", "data": {"s": "é\n"}}, {"v": 1}, (b"\x00\xff", b"", b"xy")
    )
    (frame,) = decode_all(encode_comm(5, sent))
    assert frame.kind is FrameKind.COM and frame.args[0] == "5"
    as_cmm = Frame(FrameKind.CMM, frame.args, frame.payload)  # the same layout either way
    assert comm_of(as_cmm) == sent


@pytest.mark.parametrize(
    ("head", "buffers"),
    [
        ({"msg_type": "comm_nope", "content": {"comm_id": "c"}}, b""),
        ({"msg_type": "comm_msg", "content": {"data": {}}}, b""),  # no comm_id
        ({"msg_type": "comm_msg", "content": {"comm_id": "c"}, "buffers": [3]}, b"ab"),
        ({"msg_type": "comm_msg", "content": {"comm_id": "c"}, "buffers": [1]}, b"abc"),
        ({"msg_type": "comm_msg", "content": {"comm_id": "c"}, "buffers": [True]}, b"a"),
        ({"msg_type": "comm_msg", "content": {"comm_id": "c"}, "metadata": []}, b""),
    ],
    ids=["type", "comm_id", "short", "long", "bool-length", "metadata"],
)
def test_a_malformed_comm_message_is_a_protocol_error(
    head: dict[str, object], buffers: bytes
) -> None:
    with pytest.raises(ProtocolError, match="CMM frame of the wrong shape"):
        comm_of(_cmm(head, buffers))
