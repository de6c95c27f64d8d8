"""Where what Julia sends goes: its output bytes and its frames, to the running execution or,
between executions, to the stray sink.

The order rules: a frame wrapped in ``MRK n`` is handled only once fd 1 and fd 2 have been read
up to output marker n (all of a cell's output comes before its result, and output printed
around a display keeps its place); in ``MRK 0`` at once, Julia found both read to the end
already; in ``MRN n`` at once too, Julia found both read up to marker n, and what they have
after it waits until the frame was handled. The connection's own frame kinds have their
handlers in one table (``_CONNECTION_FRAMES``); a frame addressed to the running execution goes
to it (``Execution.take``), a display from a task that outlived its cell to the stray sink,
anything else nowhere. A comm message Julia sends is never dropped: without its execution it
goes stray. A frame about an execution beside the main one (a subshell's: supervisor/beside.py)
goes to it, or, once it ended, to its route's stray sink.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from jutul_jkernel.protocol.wire import Frame, FrameKind, ProtocolError, inner_frame
from jutul_jkernel.supervisor.beside import BesideExecutions
from jutul_jkernel.supervisor.execution import Execution
from jutul_jkernel.supervisor.frame_payloads import comm_of, display_of, json_object
from jutul_jkernel.supervisor.julia_process import JuliaProcess
from jutul_jkernel.supervisor.output_sink import OutputSink

log = logging.getLogger(__name__)

# Julia writes an output marker and sends MRK right after; reading up to it takes milliseconds
# (paused for IOPub, as long as IOPub needs). Past this, a marker is taken as lost.
_MARK_WAIT = 10.0


class FrameRouter:
    """Routes one supervisor's Julia output; ``current()`` is the running execution, if any."""

    def __init__(self, current: Callable[[], Execution | None], stray: OutputSink) -> None:
        self._current = current
        self.stray = stray  # the sink of what Julia sends between executions
        self.beside: BesideExecutions | None = None  # the executions beside the main one

    def sink_now(self) -> OutputSink:
        """The running execution's sink, or the stray one between executions."""
        ex = self._current()
        return ex.sink if ex is not None else self.stray

    def reading_waits(self) -> bool:
        """Whether reading waits for the consumer: not while an interrupt drops output."""
        ex = self._current()
        return self.sink_now().backpressure is not None and not (
            ex is not None and ex.interrupt.discarding
        )

    def output(self, j: JuliaProcess, name: str, data: bytes) -> None:
        """Bytes Julia's process wrote to fd 1 or fd 2: to the running cell, or stray."""
        if name == "stderr":
            j.stderr_tail.append(data)
        ex = self._current()
        if ex is not None:
            data = ex.interrupt.pass_on(data)
            if data:
                ex.sink.write(name, data)
        else:
            self.stray.write(name, data)

    async def handle(self, j: JuliaProcess, frame: Frame) -> None:
        """Handle a frame as it comes off the connection."""
        if frame.kind is FrameKind.MRK:
            await self._ordered(j, frame)
        elif frame.kind is FrameKind.MRN:
            self._ahead(j, frame)
        else:
            self._dispatch(j, frame)

    async def _ordered(self, j: JuliaProcess, frame: Frame) -> None:
        """MRK n: handle the frame it carries once fd 1 and fd 2 were read up to marker n.

        MRK 0: Julia found both pipes read to the end and wrote no marker (capture.jl,
        drain_output); what they kept as the possible start of a marker is output, passed on
        before the frame."""
        n = int(frame.args[0])
        inner = inner_frame(frame)
        if n == 0:
            if j.pipes is not None:
                j.pipes.pass_tails()
            if inner is not None:
                self._dispatch(j, inner)
            return
        if j.pipes is not None and not await j.pipes.passed(n, _MARK_WAIT):
            log.warning("output marker %d did not arrive within %g s; going on", n, _MARK_WAIT)
            j.pipes.skip(n)
        if inner is not None:
            self._dispatch(j, inner)
        if j.pipes is not None:
            j.pipes.release(n)

    def _ahead(self, j: JuliaProcess, frame: Frame) -> None:
        """MRN n: Julia wrote marker n once it found both pipes read to the end (capture.jl,
        drain_output), so the frame follows every byte read so far: handled at once. What a
        stream kept as the possible start of a marker was written before marker n: output, passed
        on first. What the pipes have after marker n was held back, and follows the frame."""
        n = int(frame.args[0])
        inner = inner_frame(frame)
        if j.pipes is not None:
            j.pipes.pass_tails()
        if inner is not None:
            self._dispatch(j, inner)
        if j.pipes is not None:
            j.pipes.release(n)

    def _dispatch(self, j: JuliaProcess, frame: Frame) -> None:
        own = _CONNECTION_FRAMES.get(frame.kind)
        if own is not None:
            own(self, j, frame)
            return
        ex = self._current()
        if ex is not None and int(frame.args[0]) == ex.id:
            ex.take(j, frame)
        elif self.beside is not None and self.beside.take(j, frame):
            return
        elif ex is None and frame.kind in (FrameKind.DSP, FrameKind.CLR):
            # A task that outlived its cell displays where its println goes: the last cell.
            self.stray.show(display_of(frame))
        else:
            log.debug(
                "dropped a %s frame for execution %s: not running", frame.kind.name, frame.args[0]
            )

    def _on_output(self, j: JuliaProcess, frame: Frame) -> None:
        self.output(j, frame.args[0], frame.payload)

    def _on_info(self, j: JuliaProcess, frame: Frame) -> None:
        j.info = json_object(frame)
        j.replies.arrived(0, None)

    def _on_reply(self, j: JuliaProcess, frame: Frame) -> None:
        """ANS (a query's answer) or ACK (an interrupt request taken)."""
        ex, rid = self._current(), int(frame.args[0])
        if ex is not None and rid == ex.id:
            ex.interrupt.heard(ack=frame.kind is FrameKind.ACK)
        j.replies.arrived(rid, json_object(frame) if frame.kind is FrameKind.ANS else None)

    def _on_comm(self, j: JuliaProcess, frame: Frame) -> None:
        # Never dropped, unlike a late display: a widget's state must reach the frontend.
        ex, eid = self._current(), int(frame.args[0])
        if ex is not None and eid == ex.id:
            sink = ex.sink
        else:
            beside = self.beside.sink_of(eid) if self.beside is not None else None
            sink = beside or self.stray
        sink.send(comm_of(frame))

    def _misplaced(self, j: JuliaProcess, frame: Frame) -> None:
        if frame.kind in (FrameKind.MRK, FrameKind.MRN):
            raise ProtocolError(f"an {frame.kind.name} frame outside the read loop")
        raise ProtocolError(f"a second {frame.kind.name} frame")


# The frames the connection handles itself, whatever runs; the rest are an execution's
# (execution.py's _FRAMES). Each kind Julia sends is in exactly one of the two tables.
_CONNECTION_FRAMES: dict[FrameKind, Callable[[FrameRouter, JuliaProcess, Frame], None]] = {
    FrameKind.OUT: FrameRouter._on_output,
    FrameKind.INF: FrameRouter._on_info,
    FrameKind.ANS: FrameRouter._on_reply,
    FrameKind.ACK: FrameRouter._on_reply,
    FrameKind.CMM: FrameRouter._on_comm,
    FrameKind.MRK: FrameRouter._misplaced,
    FrameKind.MRN: FrameRouter._misplaced,
    FrameKind.RDY: FrameRouter._misplaced,
}
