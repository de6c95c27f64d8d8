"""The supervisor's side of Julia's output pipes (capture.py) on real pipes, without Julia.

Julia's side is tested through the supervisor and the kernel (test_supervisor_julia.py: C
floods, output around displays, interrupting a flood after a child process ran).
"""

from __future__ import annotations

import asyncio
import os

from hypothesis import given, settings
from hypothesis import strategies as st

from jutul_jkernel.capture import OutputPipes, _Stream, make_pipe, marker_bytes, new_marker

MARK = marker_bytes(new_marker())


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(
        # NUL bytes and a marker's first bytes, as output (the random rest no output can know)
        st.one_of(st.binary(max_size=40), st.sampled_from([b"\0", b"\0\x1f", MARK[:6], b"x\0"])),
        max_size=8,
    ),
    cuts=st.lists(st.integers(min_value=0, max_value=400), max_size=6),
)
def test_markers_are_found_across_any_chunking(pieces: list[bytes], cuts: list[int]) -> None:
    """Output with markers between the pieces, read in any chunks: the same bytes, each piece
    tagged with the markers before it, NUL bytes of the output kept."""
    stream = MARK.join(pieces)
    s = _Stream("stdout", -1, MARK)
    got: dict[int, bytes] = {}
    bounds = sorted({0, len(stream), *(c for c in cuts if c < len(stream))})
    for a, b in zip(bounds, bounds[1:], strict=False):
        for markers, data in s.split(stream[a:b]):
            got[markers] = got.get(markers, b"") + data
    got[s.seen] = got.get(s.seen, b"") + s.tail  # the end: a kept tail is output after all
    assert s.seen == max(0, len(pieces) - 1)
    assert [got.get(i, b"") for i in range(len(pieces))] == pieces


def test_output_after_a_marker_waits_for_its_release() -> None:
    """What a stream wrote after marker n is passed on only once release(n) says the frame
    ordered by marker n was handled; what came before is passed on at once."""

    async def run() -> list[tuple[str, bytes]]:
        out_r, out_w = make_pipe()
        err_r, err_w = make_pipe()
        seen: list[tuple[str, bytes]] = []
        pipes = OutputPipes({"stdout": out_r, "stderr": err_r}, MARK, lambda n, d: seen.append((n, d)))
        pipes.start()
        try:
            os.write(out_w, b"before" + MARK + b"after")
            os.write(err_w, b"err" + MARK)
            assert await pipes.passed(1, 5.0)
            assert seen == [("stdout", b"before"), ("stderr", b"err")]
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


def test_a_paused_reader_still_reads_up_to_a_marker() -> None:
    """Paused for IOPub, a wait for a marker still reads: the marker is behind that output."""

    async def run() -> bool:
        out_r, out_w = make_pipe()
        err_r, err_w = make_pipe()
        pipes = OutputPipes({"stdout": out_r, "stderr": err_r}, MARK, lambda n, d: None)
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
