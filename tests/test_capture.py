"""The supervisor's side of Julia's output pipes (supervisor/pipes.py) on real pipes, without Julia.

Julia's side is tested through the supervisor and the kernel (test_supervisor_julia.py: C
floods, output around displays, interrupting a flood after a child process ran).
"""

from __future__ import annotations

import asyncio
import itertools
import os
from types import SimpleNamespace

from hypothesis import assume, given, settings
from hypothesis import strategies as st

from jutul_jkernel.protocol.wire import Decoder, FrameKind, encode
from jutul_jkernel.supervisor.output_sink import Display, OutputSink
from jutul_jkernel.supervisor.pipes import (
    DRAIN,
    ROUTE,
    TO_STDERR,
    TO_STDOUT,
    OutputPipes,
    Piece,
    _Stream,
)
from jutul_jkernel.supervisor.routing import FrameRouter
from jutul_jkernel.supervisor.spawn import make_pipe, marker_prefix, new_marker

PREFIX = marker_prefix(new_marker())
MARK, TO_ERR, TO_OUT = PREFIX + DRAIN, PREFIX + TO_STDERR, PREFIX + TO_STDOUT
# NUL bytes and a marker's first bytes, as output (its random rest no output can know)
NASTY = st.sampled_from([b"\0", b"\0\x1f", PREFIX[:6], PREFIX, b"x\0", PREFIX + ROUTE])


def routed_to(eid: int, stream: str) -> bytes:
    """The code before a beside execution's output (capture.jl, route_head)."""
    return PREFIX + ROUTE + b"%016x" % eid + (b"o" if stream == "stdout" else b"e")


def _read(stream: bytes, cuts: list[int]) -> list[Piece]:
    """What a _Stream makes of ``stream`` read in the chunks ``cuts`` gives, merged per
    (markers, stream, route), the kept tail counted as output at the end."""
    s = _Stream("stdout", -1, PREFIX)
    pieces: list[Piece] = []
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    for a, b in itertools.pairwise(bounds):
        pieces.extend(s.split(stream[a:b]))
    pieces.append((s.seen, s.current, s.tail, s.route))
    merged: list[Piece] = []
    for m, name, data, route in pieces:
        if merged and (merged[-1][0], merged[-1][1], merged[-1][3]) == (m, name, route):
            merged[-1] = (m, name, merged[-1][2] + data, route)
        elif data:
            merged.append((m, name, data, route))
    return merged


@settings(max_examples=300, deadline=None)
@given(
    writes=st.lists(
        st.tuples(
            st.sampled_from(["stdout", "stderr", "marker", "routed"]),
            st.one_of(st.binary(min_size=1, max_size=40), NASTY),
            st.sampled_from([(1, "stdout"), (0x1234, "stderr"), (2**40 + 7, "stdout")]),
        ),
        max_size=10,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=600), max_size=8),
)
def test_the_stdout_pipe_splits_back_into_what_was_written(
    writes: list[tuple[str, bytes, tuple[int, str]]], cuts: list[int]
) -> None:
    """Julia's prints to stdout and stderr (the latter between TO_STDERR and TO_STDOUT), a
    beside execution's prints (between its route code and TO_STDOUT) and drain markers, read
    in any chunks: the same bytes, on the same stream and route, after the same number of
    markers, NUL bytes of the output kept."""
    stream = b""
    want: list[Piece] = []
    markers = written = 0
    for kind, data, (eid, routed_stream) in writes:
        if kind == "marker":
            stream += MARK
            markers += 1
            written += 1
            continue
        if kind == "routed":
            stream += routed_to(eid, routed_stream) + data + TO_OUT
            name, route = routed_stream, eid
            written += 2
        else:
            stream += TO_ERR + data + TO_OUT if kind == "stderr" else data
            name, route = kind, 0
            written += 2 if kind == "stderr" else 0
        if want and (want[-1][0], want[-1][1], want[-1][3]) == (markers, name, route):
            want[-1] = (markers, name, want[-1][2] + data, route)
        else:
            want.append((markers, name, data, route))
    # Output that happens to complete the prefix into a whole marker (the prefix, then a
    # code's two bytes in the next write) is one no real output can make: the hex digits
    # are random per process.
    codes = (MARK, TO_ERR, TO_OUT, PREFIX + ROUTE)
    assume(sum(stream.count(m) for m in codes) == written)
    assert _read(stream, cuts) == want


def test_routed_output_goes_to_its_execution_once_someone_takes_it() -> None:
    """A beside execution's output reaches ``routed`` with its id, in order with the rest;
    before a ``routed`` is set it is delivered as the main cell's."""

    async def run() -> tuple[list[tuple[str, bytes]], list[tuple[int, str, bytes]]]:
        out_r, out_w = make_pipe()
        err_r, err_w = make_pipe()
        seen: list[tuple[str, bytes]] = []
        routed: list[tuple[int, str, bytes]] = []
        pipes = OutputPipes(
            {"stdout": out_r, "stderr": err_r}, PREFIX, lambda n, d: seen.append((n, d))
        )
        pipes.start()
        try:
            os.write(out_w, routed_to(5, "stdout") + b"early" + TO_OUT)
            assert await pipes.passed(0, 1.0)
            await asyncio.sleep(0.1)
            pipes.routed = lambda eid, n, d: routed.append((eid, n, d))
            os.write(out_w, b"main" + routed_to(7, "stderr") + b"sub" + TO_OUT + b"again")
            await asyncio.sleep(0.1)
            return seen, routed
        finally:
            pipes.close()
            os.close(out_w)
            os.close(err_w)

    seen, routed = asyncio.run(run())
    assert seen == [("stdout", b"early"), ("stdout", b"main"), ("stdout", b"again")]
    assert routed == [(7, "stderr", b"sub")]


def test_output_after_a_marker_waits_for_its_release() -> None:
    """What a stream wrote after marker n is passed on only once release(n) says the frame
    ordered by marker n was handled; what came before is passed on at once."""

    async def run() -> list[tuple[str, bytes]]:
        out_r, out_w = make_pipe()
        err_r, err_w = make_pipe()
        seen: list[tuple[str, bytes]] = []
        pipes = OutputPipes(
            {"stdout": out_r, "stderr": err_r}, PREFIX, lambda n, d: seen.append((n, d))
        )
        pipes.start()
        try:
            os.write(out_w, b"before" + TO_ERR + b"e" + TO_OUT + MARK + b"after")
            os.write(err_w, b"err" + MARK)
            assert await pipes.passed(1, 5.0)
            assert seen == [("stdout", b"before"), ("stderr", b"e"), ("stderr", b"err")]
            assert not await pipes.passed(2, 0.2)  # no second marker yet
            pipes.release(1)
            assert seen[-1] == ("stdout", b"after")
            os.write(out_w, b"live")
            await asyncio.sleep(0.1)
            assert seen[-1] == ("stdout", b"live")
            # Julia gone: the held tail and what is still in the pipe come back from drain()
            os.write(out_w, b"late" + MARK + b"held")
            os.close(out_w)
            os.close(err_w)
            await asyncio.sleep(0.1)
            return seen + [(k, v) for k, v in pipes.drain().items()]
        finally:
            pipes.close()

    seen = asyncio.run(run())
    assert seen[-3] == ("stdout", b"late")
    assert seen[-2:] == [("stdout", b"held"), ("stderr", b"")]


def test_a_frame_in_mrn_is_handled_at_once_and_what_follows_its_marker_after_it() -> None:
    """MRN n (capture.jl, MARK_AFTER): Julia found both pipes read to the end and writes marker
    n right after the frame. The frame is handled at once: after what a stream kept as a
    marker's possible start (output written before it), and before what the pipes have after
    marker n, even if that was read first."""

    async def run() -> list[tuple[str, bytes] | Display]:
        out_r, out_w = make_pipe()
        err_r, err_w = make_pipe()
        seen: list[tuple[str, bytes] | Display] = []
        stray = OutputSink(lambda n, d: seen.append((n, d)), seen.append)
        router = FrameRouter(lambda: None, stray)
        j = SimpleNamespace(stderr_tail=[], pipes=None)
        pipes = OutputPipes(
            {"stdout": out_r, "stderr": err_r},
            PREFIX,
            lambda n, d: router.output(j, n, d),  # type: ignore[arg-type]
        )
        j.pipes = pipes

        async def handle(n: int, wait: int) -> None:
            mrn = encode(FrameKind.MRN, n, payload=encode(FrameKind.CLR, 7, wait))
            for frame in Decoder().feed(mrn):
                await router.handle(j, frame)  # type: ignore[arg-type]

        pipes.start()
        try:
            os.write(out_w, b"before\0")  # its NUL may start a marker: kept
            await asyncio.sleep(0.1)
            assert seen == [("stdout", b"before")]
            await handle(1, 0)  # marker 1 not written yet
            os.write(out_w, MARK + b"after")
            os.write(err_w, MARK)
            await asyncio.sleep(0.1)
            # The next frame is in the socket, but its marker and what follows are read first.
            os.write(out_w, MARK + b"second")
            os.write(err_w, MARK + b"c")
            await asyncio.sleep(0.1)
            assert seen[-1] == ("stdout", b"after")  # the rest held behind marker 2
            await handle(2, 1)
            return seen
        finally:
            pipes.close()
            os.close(out_w)
            os.close(err_w)

    seen = asyncio.run(run())
    assert seen == [
        ("stdout", b"before"),
        ("stdout", b"\0"),
        Display.clear(wait=False),
        ("stdout", b"after"),
        Display.clear(wait=True),
        ("stdout", b"second"),
        ("stderr", b"c"),
    ]


def test_a_paused_reader_still_reads_up_to_a_marker() -> None:
    """Paused for IOPub, a wait for a marker still reads: the marker is behind that output."""

    async def run() -> bool:
        out_r, out_w = make_pipe()
        err_r, err_w = make_pipe()
        pipes = OutputPipes({"stdout": out_r, "stderr": err_r}, PREFIX, lambda n, d: None)
        pipes.start()
        try:
            pipes.pause()
            os.write(out_w, b"x" * 1000 + MARK)
            os.write(err_w, MARK)
            return await pipes.passed(1, 5.0)
        finally:
            pipes.close()
            os.close(out_w)
            os.close(err_w)

    assert asyncio.run(run())
