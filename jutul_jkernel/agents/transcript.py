"""One execution's outputs as a list, in the order they happened: what the stdin/stdout agent
(agents/agent.py) and the MCP server (agents/mcp.py) answer a request with.

A :class:`Transcript` collects an execution's streams and displays as a notebook would show
them (a display update replaces in place, a clear clears), and keeps long output as its head
and its tail with a note of how much was cut between them, so a runaway printing loop costs
bounded memory. :func:`result_outputs` adds what the result says. Each :class:`Output` keeps
the MIME bundle it came from, so a client that can show images (MCP) takes them from there;
``text`` is what a text-only client sees: an image as a note of its type and size.
A leaf module: it knows results and displays, nothing of Jupyter, nothing of either protocol.
"""

from __future__ import annotations

import base64
from dataclasses import dataclass, field
from typing import Any

from jutul_jkernel.supervisor.output_sink import Display
from jutul_jkernel.supervisor.results import ExecutionResult

# How an image is recognised in a MIME bundle, most preferred first.
IMAGE_MIMES = ("image/png", "image/jpeg", "image/gif", "image/svg+xml")
_BINARY_MIMES = frozenset({"image/png", "image/jpeg", "image/gif"})
_TEXT_MIMES = ("text/plain", "text/markdown", "text/latex", "text/html", "application/json")
_PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


@dataclass
class Output:
    """One output of a request: ``kind`` is its tag (stdout, display_data, error, ...)."""

    kind: str
    text: str
    mime: str = "text/plain"
    display_id: str | None = None
    data: dict[str, Any] | None = None  # the MIME bundle of a display or a rich result


def render(outputs: list[Output]) -> str:
    """One non-empty output as it is; several in tags, in order (fastcore's render_text)."""
    shown = [o for o in outputs if o.text]
    if not shown:
        return ""
    if len(shown) == 1:
        return shown[0].text
    parts = []
    for o in shown:
        attrs = f' mime="{o.mime}"' if o.mime != "text/plain" else ""
        end = "" if o.text.endswith("\n") else "\n"
        parts.append(f"<{o.kind}{attrs}>\n{o.text}{end}</{o.kind}>")
    return "\n".join(parts)


def bundle_text(data: dict[str, Any]) -> tuple[str, str]:
    """The MIME type and text an agent sees of a MIME bundle: text, or a note for an image."""
    for mime in IMAGE_MIMES:
        if mime in data:
            return mime, _image_note(mime, str(data[mime]))
    for mime in _TEXT_MIMES:
        if isinstance(data.get(mime), str):
            return "text/plain" if mime == "text/plain" else mime, data[mime]
    mime = next(iter(data), "text/plain")
    return mime, f"[{mime}, {len(str(data.get(mime, '')))} characters, not shown]"


def _image_note(mime: str, value: str) -> str:
    """``[image/png, 640x480, 23456 bytes]``: what the image is, without its bytes."""
    if mime not in _BINARY_MIMES:
        return f"[{mime}, {len(value.encode())} bytes]"
    try:
        raw = base64.b64decode(value)
    except ValueError:
        return f"[{mime}, {len(value)} characters of base64 that do not decode]"
    size = ""
    if raw.startswith(_PNG_SIGNATURE) and len(raw) >= 24:
        width, height = int.from_bytes(raw[16:20], "big"), int.from_bytes(raw[20:24], "big")
        size = f", {width}x{height}"
    return f"[{mime}{size}, {len(raw)} bytes]"


def error_text(ename: str, traceback: list[str]) -> str:
    """The exception, its message and the user's frames (the server drops its own frames)."""
    lines = list(traceback) or [ename]
    if not lines[0].startswith(ename):
        lines[0] = f"{ename}: {lines[0]}"  # showerror of an ErrorException prints the message only
    return "\n".join(lines)


@dataclass
class Transcript:
    """What one request produced, collected in order until its result arrives.

    The first ``head_chars`` characters of stream output are kept where they were printed, the
    last ``tail_chars`` at the end; ``who`` names the program in the note about the cut.
    """

    head_chars: int
    tail_chars: int
    who: str = "jutul-jkernel"
    outputs: list[Output] = field(default_factory=list)
    kept_chars: int = 0
    cut_chars: int = 0
    tail: str = ""
    tail_stream: str = "stdout"
    clear_pending: bool = False

    def stream(self, name: str, text: str) -> None:
        self._clear_if_pending()
        take = text[: max(0, self.head_chars - self.kept_chars)]
        if take:
            self.kept_chars += len(take)
            last = self.outputs[-1] if self.outputs else None
            if last is not None and last.kind == name:
                last.text += take
            else:
                self.outputs.append(Output(name, take))
        rest = text[len(take) :]
        if rest:
            self.cut_chars += len(rest)
            self.tail = (self.tail + rest)[-self.tail_chars :] if self.tail_chars else ""
            self.tail_stream = name

    def display(self, shown: Display) -> None:
        """Apply a display message as a notebook would: add, update in place, or clear."""
        kind = shown.kind
        if kind == "clear_output":
            if shown.wait:
                self.clear_pending = True
            else:
                self.outputs.clear()
            return
        mime, text = bundle_text(shown.data)
        display_id = shown.display_id
        if kind == "update_display_data":
            for o in self.outputs:
                if display_id is not None and o.display_id == display_id:
                    o.mime, o.text, o.data = mime, text, dict(shown.data)
            return
        self._clear_if_pending()
        self.outputs.append(Output("display_data", text, mime, display_id, dict(shown.data)))

    def _clear_if_pending(self) -> None:
        if self.clear_pending:
            self.clear_pending = False
            self.outputs.clear()

    def recent_lines(self, count: int) -> list[str]:
        """The last ``count`` lines of stream output so far (a progress report's text)."""
        text = self.tail if self.cut_chars else ""
        if not text:
            text = "".join(o.text for o in self.outputs if o.kind in ("stdout", "stderr"))
        return text.splitlines()[-count:]

    def finish(self, extra: list[Output]) -> list[Output]:
        """All outputs in order, the cut-off middle of long output noted, then ``extra``."""
        outputs = list(self.outputs)
        if self.cut_chars:
            hidden = self.cut_chars - len(self.tail)
            if hidden:
                note = f"[{self.who}: {hidden} characters of output cut here]\n"
                outputs.append(Output("notice", note))
            outputs.append(Output(self.tail_stream, self.tail))
        return outputs + extra


def result_outputs(result: ExecutionResult) -> list[Output]:
    """The outputs an execution's result adds after its streams and displays."""
    outputs = [Output("notice", result.notice)] if result.notice else []
    if result.status == "interrupted":
        kept = "state kept" if result.state_kept else "Julia was restarted, state lost"
        return [*outputs, Output("error", f"InterruptException: interrupted; {kept}.")]
    if result.status == "error":
        err = result.error_info()
        return [*outputs, Output("error", error_text(err.ename, err.traceback))]
    if result.data:
        mime, text = bundle_text(result.data)
        return [*outputs, Output("execute_result", text, mime, data=dict(result.data))]
    return [*outputs, Output("execute_result", result.text)]
