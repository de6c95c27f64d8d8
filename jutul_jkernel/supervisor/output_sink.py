"""Where an execution's output goes: one :class:`OutputSink` per execution, and one for the
output printed between executions (stray output: background tasks).

A sink holds the ways Julia's output reaches a frontend: streamed bytes, displays, input
requests, comm messages, and the backpressure that makes reading wait while the frontend
catches up. The supervisor calls only :meth:`OutputSink.write`, :meth:`OutputSink.show` and
:meth:`OutputSink.send`, so what a sink does without a handler (a display's text/plain on
stdout; a comm message dropped) is decided here, once.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any, Literal

CommKind = Literal["comm_open", "comm_msg", "comm_close"]
StreamCallback = Callable[[str, bytes], None]  # ("stdout" | "stderr", bytes)
InputCallback = Callable[[str, bool], Awaitable[str]]  # (prompt, password) -> the line
DisplayKind = Literal["display_data", "update_display_data", "clear_output"]


@dataclass(frozen=True)
class Display:
    """One display message of a cell, as Jupyter names it (supervisor/frame_payloads.py decodes the
    frame)."""

    kind: DisplayKind
    data: dict[str, str] = field(default_factory=dict)  # MIME -> text (base64 for images)
    metadata: dict[str, Any] = field(default_factory=dict)
    transient: dict[str, Any] = field(default_factory=dict)  # {"display_id": ...} if any
    wait: bool = False  # clear_output only: clear when the next output arrives

    @classmethod
    def clear(cls, *, wait: bool) -> Display:
        return cls("clear_output", wait=wait)

    @property
    def display_id(self) -> str | None:
        value = self.transient.get("display_id")
        return value if isinstance(value, str) else None

    def content(self) -> dict[str, Any]:
        """The Jupyter message content (as IOPub carries it)."""
        if self.kind == "clear_output":
            return {"wait": self.wait}
        return {"data": self.data, "metadata": self.metadata, "transient": self.transient}


@dataclass(frozen=True)
class CommMessage:
    """A Jupyter comm message, either way: one Julia sends (a CMM frame), or one a frontend
    sent, for Julia (COM). supervisor/frame_payloads.py encodes and decodes it."""

    msg_type: CommKind
    content: dict[str, Any]  # comm_id and data; target_name for comm_open
    metadata: dict[str, Any] = field(default_factory=dict)
    buffers: tuple[bytes, ...] = ()  # binary buffers (ZMQ frames on the Jupyter side)

    @property
    def comm_id(self) -> str:
        value = self.content.get("comm_id")
        return value if isinstance(value, str) else ""


@dataclass
class OutputSink:
    """The consumer of one execution's output (or of stray output). Every part is optional.

    ``stream(name, data)`` receives live output bytes ("stdout"/"stderr"); ``display(d)``
    receives displays (without it, their text/plain goes to ``stream``); ``await input(prompt,
    password)`` answers ``readline()`` (without it, readline raises an error in Julia);
    ``await backpressure()`` is awaited after each chunk read from Julia: a consumer that falls
    behind makes the reader wait, TCP fills up and Julia's writes block, instead of output
    piling up in memory. ``comm(message)`` receives the comm messages Julia sends (without
    it, they are dropped: there is no frontend to hold a comm). On the stray sink,
    ``julia_ended()`` is called when a Julia process ends (a death, a restart, shutdown):
    the comms it had open are gone.
    """

    stream: StreamCallback | None = None
    display: Callable[[Display], None] | None = None
    input: InputCallback | None = None
    backpressure: Callable[[], Awaitable[None]] | None = None
    comm: Callable[[CommMessage], None] | None = None
    julia_ended: Callable[[], None] | None = None

    def write(self, name: str, data: bytes) -> None:
        if self.stream is not None:
            self.stream(name, data)

    def show(self, shown: Display) -> None:
        if self.display is not None:
            self.display(shown)
        elif self.stream is not None and shown.kind != "clear_output":
            self.stream("stdout", (shown.data.get("text/plain", "") + "\n").encode())

    def send(self, message: CommMessage) -> None:
        if self.comm is not None:
            self.comm(message)


def as_sink(sink: OutputSink | StreamCallback | None) -> OutputSink:
    """A sink from what execute() takes: a sink, a bare stream callback, or nothing."""
    if isinstance(sink, OutputSink):
        return sink
    return OutputSink(stream=sink)
