"""One execution from send to result, and what it does with the frames Julia sends for it.

The supervisor's router (supervisor/routing.py) sends each frame that carries the id of the running
execution here, to :meth:`Execution.take`, which looks its kind up in one table: displays to
the sink, payloads, the value and the error collected for the result, input requests answered
from the sink, and RES, which resolves the execution's future. Kinds not in the table mean
nothing to an execution and are ignored.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from jutul_jkernel.protocol.wire import Frame, FrameKind, encode
from jutul_jkernel.supervisor import children
from jutul_jkernel.supervisor.errors import JuliaDiedError
from jutul_jkernel.supervisor.frame_payloads import (
    bundle_of,
    display_of,
    error_of,
    json_object,
    payload_item_of,
)
from jutul_jkernel.supervisor.interrupt_state import Interrupt
from jutul_jkernel.supervisor.julia_process import JuliaProcess
from jutul_jkernel.supervisor.output_sink import OutputSink
from jutul_jkernel.supervisor.results import ErrorInfo, ExecutionResult

log = logging.getLogger(__name__)


@dataclass
class Execution:
    """One execution from send to result: where its output goes, what it collected."""

    id: int
    sink: OutputSink
    future: asyncio.Future[ExecutionResult]
    interrupt: Interrupt
    data: dict[str, Any] | None = None
    error: ErrorInfo | None = None
    payload: list[dict[str, Any]] = field(default_factory=list)
    # Julia's descendants when the execution was sent: an interrupted cell's new ones are
    # stopped when it ends (supervisor/children.py). None where that cannot be known (Windows).
    children_before: children.Snapshot | None = None
    input_tasks: set[asyncio.Task[None]] = field(default_factory=set)

    def take(self, j: JuliaProcess, frame: Frame) -> None:
        """Handle a frame Julia ``j`` sent for this execution."""
        handle = _FRAMES.get(frame.kind)
        if handle is not None:
            handle(self, j, frame)

    def resolve(self, status: str, text: str) -> None:
        """End the execution with RES's status ("ok", "err" or "int") and text, once."""
        if self.future.done():
            return
        it = self.interrupt
        it.heard(ack=False)
        result = ExecutionResult(
            status="ok" if status == "ok" else "error" if status == "err" else "interrupted",
            text=text,
            data=self.data,
            error=self.error,
            interrupt_path=it.step.path if it.step is not None else None,
            payload=self.payload,
        )
        result.notice = "\n".join(it.notices(interrupted=result.status == "interrupted")) or None
        self.future.set_result(result)

    async def stop_children(self, j: JuliaProcess) -> None:
        """Stop the processes an interrupted cell started and left running, and say so.

        Interrupted, the cell's code has unwound, but what it started runs on: a `run` that
        an INT frame interrupted leaves its process, and Pkg's precompile workers (`julia`
        processes that Base.compilecache starts with `open(pipeline(...))`, JuliaLang/julia
        release-1.10, release-1.12 and master base/loading.jl) go on compiling, and their
        tasks print into later cells. A restart already killed Julia's whole group.
        """
        if self.children_before is None or self.interrupt.restarted or j.dead:
            return
        left = children.started_since(j.proc.pid, self.children_before)
        if not left:
            return
        stopped = await asyncio.to_thread(children.stop, left)
        if stopped:
            n = len(stopped)
            line = (
                f"jutul-jkernel: stopped {n} process{'es' if n > 1 else ''} the cell started: "
                f"{', '.join(stopped)}\n"
            )
            self.sink.write("stderr", line.encode())
        log.info("execution %s: stopped %s", self.id, ", ".join(stopped))

    def stop_asking(self) -> None:
        """Cancel the input requests still waiting for the frontend (the execution ended)."""
        for task in list(self.input_tasks):
            task.cancel()

    def _show(self, j: JuliaProcess, frame: Frame) -> None:
        self.sink.show(display_of(frame))

    def _add_payload(self, j: JuliaProcess, frame: Frame) -> None:
        self.payload.append(payload_item_of(frame))

    def _set_value(self, j: JuliaProcess, frame: Frame) -> None:
        self.data = bundle_of(frame, json_object(frame).get("data"))

    def _set_error(self, j: JuliaProcess, frame: Frame) -> None:
        self.error = error_of(frame)

    def _ask(self, j: JuliaProcess, frame: Frame) -> None:
        task = asyncio.create_task(self._answer_input(j, frame))
        self.input_tasks.add(task)
        task.add_done_callback(self.input_tasks.discard)

    def _resolve_frame(self, j: JuliaProcess, frame: Frame) -> None:
        self.resolve(frame.args[1], frame.payload.decode("utf-8", "replace"))

    async def _answer_input(self, j: JuliaProcess, frame: Frame) -> None:
        prompt = frame.payload.decode("utf-8", "replace")
        ask = self.sink.input
        if ask is None:
            reply = encode(
                FrameKind.NIN,
                self.id,
                payload=b"stdin is not available: this frontend does not take input",
            )
        else:
            try:
                line = await ask(prompt, frame.args[1] == "1")
                reply = encode(FrameKind.TXT, self.id, payload=line.encode())
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # the frontend's refusal becomes Julia's error
                reply = encode(FrameKind.NIN, self.id, payload=f"no input: {exc}".encode())
        with contextlib.suppress(ConnectionError, JuliaDiedError):
            await j.send(reply)


# What an execution does with each kind of frame addressed to it (protocol/frames.toml declares
# them all). Each kind Julia sends has its handler here or in routing.py's _CONNECTION_FRAMES
# (tests/test_frames.py checks).
_FRAMES: dict[FrameKind, Callable[[Execution, JuliaProcess, Frame], None]] = {
    FrameKind.DSP: Execution._show,
    FrameKind.CLR: Execution._show,
    FrameKind.PAY: Execution._add_payload,
    FrameKind.VAL: Execution._set_value,
    FrameKind.ERR: Execution._set_error,
    FrameKind.INP: Execution._ask,
    FrameKind.RES: Execution._resolve_frame,
}
