"""What a JupyterLab page said to its kernels and to its console, for a failed test to print.

A browser test that waits for a cell which never ends (CI, session 19: the first cell of a
notebook stayed at ``[*]`` for 30 s on Julia 1.12.5, once in 21 runs) has only the page and the
server's log to go on: neither says whether the kernel sent the cell's reply and idle status,
or the page stopped reading them (JupyterLab handles a kernel's messages one after another, so
a comm target's handler that hangs holds up everything after it). :class:`PageTraffic` keeps
the last messages on each kernel websocket, both ways, and the page's console messages; and
:func:`ask_julia_for_stacks` has each kernel's Julia print its threads' stacks, which reach the
page as the running cell's stderr (recorded with their text).
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import signal
import subprocess
import time
from typing import TYPE_CHECKING, Any

import psutil

if TYPE_CHECKING:  # only types: test_jupyterlab.py reports a missing Playwright itself
    from playwright.sync_api import ConsoleMessage, Page, WebSocket

_KEPT = 120  # messages both ways, and console lines: the last seconds of a hang
_STREAM_TEXT = 4000  # characters of a stream message kept: a Julia thread's stack fits
# Julia 1.8+ answers SIGUSR1 (Linux; SIGINFO on BSD) with its threads' stacks on stderr and a
# 1 s profile (src/signals-unix.c, trigger_profile_peek); an older one dies of it.
_ANSWERS_INFO_REQUESTS = "print(isdefined(Base, :profile_printing_listener))"


class PageTraffic:
    """Records ``page``'s kernel messages (channel, type, parent) and console messages."""

    def __init__(self, page: Page) -> None:
        self._start = time.monotonic()
        self.messages: collections.deque[str] = collections.deque(maxlen=_KEPT)
        self.console: collections.deque[str] = collections.deque(maxlen=_KEPT)
        page.on("websocket", self._websocket)
        page.on("console", self._console_message)

    def explain(self) -> str:
        return (
            f"[page] the last {len(self.messages)} kernel messages (s since the page opened, "
            "-> sent by the page, <- received):\n"
            + "\n".join(self.messages)
            + f"\n[page] the last {len(self.console)} console messages:\n"
            + "\n".join(self.console)
        )

    def _now(self) -> str:
        return f"{time.monotonic() - self._start:8.3f}"

    def _websocket(self, ws: WebSocket) -> None:
        if "/api/kernels/" not in ws.url:
            return
        ws.on("framesent", lambda payload: self._frame("->", payload))
        ws.on("framereceived", lambda payload: self._frame("<-", payload))

    def _frame(self, direction: str, payload: str | bytes) -> None:
        try:
            line = describe(payload)
        except (ValueError, KeyError, IndexError, TypeError) as exc:
            line = f"(undecoded frame of {len(payload)}: {exc!r})"
        self.messages.append(f"{self._now()} {direction} {line}")

    def _console_message(self, message: ConsoleMessage) -> None:
        self.console.append(f"{self._now()} {message.type}: {message.text[:300]}")


def describe(payload: str | bytes) -> str:
    """One line for a kernel websocket frame: JSON (the legacy protocol) or the binary
    ``v1.kernel.websocket.jupyter.org`` layout (jupyter_server's serialize_msg_to_ws_v1: a
    count of offsets, the offsets, then channel, header, parent header, metadata, content and
    buffers)."""
    if isinstance(payload, str):
        msg = json.loads(payload)
        channel, header, parent = msg["channel"], msg["header"], msg["parent_header"]
        content = msg.get("content", {})
    else:
        count = int.from_bytes(payload[:8], "little")
        words = [payload[8 * i : 8 * i + 8] for i in range(1, count + 1)]
        offsets = [int.from_bytes(word, "little") for word in words]
        parts = [payload[offsets[i] : offsets[i + 1]] for i in range(min(count - 1, 5))]
        channel = parts[0].decode()
        header, parent = json.loads(parts[1]), json.loads(parts[2])
        content = json.loads(parts[4]) if len(parts) > 4 else {}
    return _line(channel, header, parent, content)


def _line(channel: str, header: dict[str, Any], parent: dict[str, Any], content: Any) -> str:
    line = f"{channel:7} {header.get('msg_type')} {str(header.get('msg_id', ''))[-8:]}"
    if header.get("subshell_id"):
        line += f" subshell {str(header['subshell_id'])[:8]}"
    if parent:
        line += f" (to {parent.get('msg_type')} {str(parent.get('msg_id', ''))[-8:]})"
    if isinstance(content, dict):
        if header.get("msg_type") == "stream":
            text = str(content.get("text", ""))[:_STREAM_TEXT]
            line += f" {content.get('name')}:\n    " + text.replace("\n", "\n    ")
        for key in ("execution_state", "status", "comm_id", "target_name", "execution_count"):
            if key in content:
                line += f" {key}={str(content[key])[:12]}"
    return line


def ask_julia_for_stacks() -> None:
    """Send SIGUSR1 to every kernel's Julia under this process that answers it with its
    threads' stacks (on its stderr: the running cell's output), and give it time to."""
    asked = False
    for p in psutil.Process(os.getpid()).children(recursive=True):
        with contextlib.suppress(psutil.Error, OSError, subprocess.SubprocessError):
            if not any(a.endswith("server.jl") for a in p.cmdline()):
                continue
            done = subprocess.run(
                [p.exe(), "--startup-file=no", "-e", _ANSWERS_INFO_REQUESTS],
                capture_output=True, text=True, timeout=30, check=False,
            )  # fmt: skip
            if done.stdout.strip() == "true":
                p.send_signal(signal.SIGUSR1)
                asked = True
    if asked:
        time.sleep(2.5)  # the stacks at once, then the 1 s profile
