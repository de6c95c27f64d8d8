"""What the kernel publishes on IOPub, and the backpressure that keeps IOPub's queue bounded.

Every message goes out with the request it belongs to as its parent and ipykernel's topic for
its type. ipykernel's IOPub thread queues whatever it is given, without limit: after
``_IOPUB_SYNC_BYTES`` published, :meth:`Publisher.backpressure` waits until that thread has
sent its backlog, so that a cell printing gigabytes makes Julia's writes block rather than
this process's memory grow.
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

_IOPUB_SYNC_BYTES = 1024 * 1024
_IOPUB_SYNC_TIMEOUT = 10.0
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
        iopub_thread: Any,
        log: logging.Logger | Any,
    ) -> None:
        self._session = session
        self._socket = socket
        self._topic = topic  # ipykernel's Kernel._topic: "kernel.<id>.<topic>"
        self._iopub_thread = iopub_thread
        self._log = log
        self._unsynced_bytes = 0  # published since the IOPub thread last caught up

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
        self._unsynced_bytes += len(text)
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
        """Wait for the IOPub thread to send its backlog once enough output was queued."""
        if self._unsynced_bytes < _IOPUB_SYNC_BYTES or self._iopub_thread is None:
            return
        self._unsynced_bytes = 0
        loop = asyncio.get_running_loop()
        caught_up: asyncio.Future[None] = loop.create_future()

        def resolve() -> None:
            if not caught_up.done():
                caught_up.set_result(None)

        def done() -> None:  # runs on the IOPub thread after everything queued before it
            loop.call_soon_threadsafe(resolve)

        self._iopub_thread.schedule(done)
        try:
            await asyncio.wait_for(caught_up, _IOPUB_SYNC_TIMEOUT)
        except (asyncio.TimeoutError, TimeoutError):
            self._log.warning("the IOPub thread is %.0f s behind", _IOPUB_SYNC_TIMEOUT)


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
