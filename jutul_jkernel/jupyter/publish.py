"""What the kernel publishes on IOPub, each message with the request it belongs to as its parent
and ipykernel's topic for its type.

Messages leave as they are made (jupyter/sockets.py: no queue in this process), so a cell that
prints gigabytes holds no backlog here; :meth:`Publisher.backpressure` lets the main loop turn
once per ``_IOPUB_YIELD_BYTES`` published, so that other requests (a comm message, a query)
are served during such a flood.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from collections.abc import Callable
from typing import Any

from jupyter_client.session import Session

from jutul_jkernel.supervisor.output_sink import Display
from jutul_jkernel.supervisor.results import ExecutionResult

_IOPUB_YIELD_BYTES = 1024 * 1024
# MIME types whose bundle value is JSON itself, not text: nbformat's v4 schema
# (``"^application/(.*\\+)?json$"`` in mimebundle's patternProperties) stores them as JSON.
# Julia sends them as the text `show` wrote (application/json, and what
# IJulia.register_jsonmime adds, such as Vega-Lite's application/vnd.vegalite.v5+json).
_JSON_MIME = re.compile(r"application/(.*\+)?json")

Parent = dict[str, Any]


class Publisher:
    """Publishes on the kernel's IOPub socket (from the main loop, or the control thread)."""

    def __init__(
        self,
        session: Session | None,
        socket: Any,
        topic: Callable[[str], bytes],
        log: logging.Logger | Any,
    ) -> None:
        self._session = session
        self._socket = socket
        self._topic = topic  # ipykernel's Kernel._topic: "kernel.<id>.<topic>"
        self._log = log
        self._unyielded_bytes = 0  # published since the main loop last turned

    def send(
        self,
        msg_type: str,
        content: dict[str, Any],
        parent: Parent | None,
        *,
        topic: str | None = None,
        metadata: dict[str, Any] | None = None,
        buffers: list[bytes | memoryview[bytes]] | None = None,
    ) -> None:
        """Publish one message (its topic is its type unless ``topic`` says otherwise)."""
        assert self._session is not None, "the kernel app sets a session before any message"
        self._session.send(
            self._socket,
            msg_type,
            content,
            parent=parent,
            metadata=metadata,
            buffers=buffers,
            ident=self._topic(topic or msg_type),
        )

    def stream(self, name: str, text: str, parent: Parent | None) -> None:
        self._unyielded_bytes += len(text)
        self.send("stream", {"name": name, "text": text}, parent, topic=f"stream.{name}")

    def display(self, shown: Display, parent: Parent | None) -> None:
        content = shown.content()
        if "data" in content:
            content["data"] = _decode_json_values(shown.data, self._log)
        self.send(shown.kind, content, parent)

    def execute_result(self, count: int, result: ExecutionResult, parent: Parent) -> None:
        content = {"execution_count": count, "data": self.bundle(result), "metadata": {}}
        self.send("execute_result", content, parent)

    def bundle(self, result: ExecutionResult) -> dict[str, Any]:
        """A result's MIME bundle as Jupyter carries it."""
        data = dict(result.data) if result.data else {"text/plain": result.text}
        return _decode_json_values(data, self._log)

    async def backpressure(self) -> None:
        """Wait while a subscriber is behind (jupyter/sockets.py: IOPub drops nothing until one
        has taken nothing for a while); else let the main loop turn once enough output was
        published since it last did."""
        caught_up = getattr(self._socket, "caught_up", None)
        if caught_up is not None:
            await caught_up()
        if self._unyielded_bytes >= _IOPUB_YIELD_BYTES:
            self._unyielded_bytes = 0
            await asyncio.sleep(0)


def _decode_json_values(data: dict[str, Any], log: logging.Logger | Any) -> dict[str, Any]:
    """JSON types travel as the text Julia's show wrote; Jupyter wants the object."""
    decoded = dict(data)
    for mime, value in data.items():
        if isinstance(value, str) and _JSON_MIME.fullmatch(mime):
            try:
                decoded[mime] = json.loads(value)
            except ValueError:
                log.warning("dropped %s output that is not valid JSON", mime)
                del decoded[mime]
    return decoded
