"""Decode and check the JSON payloads of Julia's frames (protocol/wire.py frames the bytes).

A payload of the wrong shape is a :class:`ProtocolError`, which ends the connection as a
malformed frame does: the supervisor never passes on a value it did not check.
"""

from __future__ import annotations

import json
from typing import Any

from jutul_jkernel.protocol.wire import Frame, FrameKind, ProtocolError, encode
from jutul_jkernel.supervisor.output_sink import CommMessage, Display
from jutul_jkernel.supervisor.results import ErrorInfo

COMM_TYPES = ("comm_open", "comm_msg", "comm_close")


def json_object(frame: Frame) -> dict[str, Any]:
    """The frame's payload as a JSON object."""
    try:
        value = json.loads(frame.payload)
    except ValueError as exc:
        msg = f"{frame.kind.name} frame payload is not JSON: {frame.payload[:80]!r}"
        raise ProtocolError(msg) from exc
    if not isinstance(value, dict):
        msg = f"{frame.kind.name} frame payload is not a JSON object: {frame.payload[:80]!r}"
        raise ProtocolError(msg)
    return value


def display_of(frame: Frame) -> Display:
    """The display_data / update_display_data / clear_output of a DSP or CLR frame."""
    if frame.kind is FrameKind.CLR:
        return Display.clear(wait=frame.args[1] == "1")
    msg = json_object(frame)
    transient: dict[str, Any] = {}
    if "transient" in msg:
        transient = _object_of(frame, msg["transient"], "transient")
        if not isinstance(transient.get("display_id", ""), str):
            raise ProtocolError(f"DSP frame with a non-string display_id: {msg!r:.80}")
    return Display(
        "update_display_data" if msg.get("update") else "display_data",
        bundle_of(frame, msg.get("data")),
        _object_of(frame, msg.get("metadata", {}), "metadata"),
        transient,
    )


def bundle_of(frame: Frame, value: object) -> dict[str, str]:
    """A MIME bundle as the server sends it: MIME type -> text (base64 for binary types)."""
    bundle = _object_of(frame, value, "data")
    if not all(isinstance(v, str) for v in bundle.values()):
        msg = f"{frame.kind.name} frame with a non-text MIME value: {frame.payload[:80]!r}"
        raise ProtocolError(msg)
    return bundle


def error_of(frame: Frame) -> ErrorInfo:
    """The exception an ERR frame reports."""
    err = json_object(frame)
    ename, evalue, traceback = (err.get(k) for k in ("ename", "evalue", "traceback"))
    if not (
        isinstance(ename, str)
        and isinstance(evalue, str)
        and isinstance(traceback, list)
        and all(isinstance(line, str) for line in traceback)
    ):
        raise ProtocolError(f"ERR frame of the wrong shape: {frame.payload[:80]!r}")
    return ErrorInfo(ename, evalue, traceback)


def payload_item_of(frame: Frame) -> dict[str, Any]:
    """A Jupyter execute_reply payload item from a PAY frame (IJulia.load's set_next_input)."""
    item = json_object(frame)
    if not isinstance(item.get("source"), str):
        raise ProtocolError(f"PAY frame without a source: {frame.payload[:80]!r}")
    return item


def _object_of(frame: Frame, value: object, what: str) -> dict[str, Any]:
    if not isinstance(value, dict):
        msg = f"{frame.kind.name} frame whose {what} is not a JSON object: {frame.payload[:80]!r}"
        raise ProtocolError(msg)
    return value


def comm_of(frame: Frame) -> CommMessage:
    """The comm message of a CMM frame: its JSON head, then the buffers the head counts."""
    head_bytes = int(frame.args[1])
    head = json_object(Frame(frame.kind, frame.args, frame.payload[:head_bytes]))
    msg_type, content = head.get("msg_type"), head.get("content")
    metadata, lengths = head.get("metadata", {}), head.get("buffers", [])
    if not (
        msg_type in COMM_TYPES
        and isinstance(content, dict)
        and isinstance(content.get("comm_id"), str)
        and isinstance(metadata, dict)
        and isinstance(lengths, list)
        and all(isinstance(n, int) and not isinstance(n, bool) and n >= 0 for n in lengths)
        and head_bytes + sum(lengths) == len(frame.payload)
    ):
        raise ProtocolError(f"CMM frame of the wrong shape: {frame.payload[:80]!r}")
    buffers, at = [], head_bytes
    for n in lengths:
        buffers.append(frame.payload[at : at + n])
        at += n
    return CommMessage(msg_type, content, metadata, tuple(buffers))


def encode_comm(eid: int, message: CommMessage) -> bytes:
    """The COM frame that hands a frontend's comm message to Julia as evaluation ``eid``."""
    head = _comm_head(message)
    return encode(FrameKind.COM, eid, len(head), payload=head + b"".join(message.buffers))


def encode_comm_beside(eid: int, message: CommMessage) -> bytes:
    """The COS frame: a comm message that came on a subshell, which Julia runs at once, beside
    everything else, as evaluation ``eid``; the payload as COM's."""
    head = _comm_head(message)
    return encode(FrameKind.COS, eid, len(head), payload=head + b"".join(message.buffers))


def _comm_head(message: CommMessage) -> bytes:
    """A comm message's JSON head: its type, content, metadata and its buffers' lengths."""
    return json.dumps(
        {
            "msg_type": message.msg_type,
            "content": message.content,
            "metadata": message.metadata,
            "buffers": [len(b) for b in message.buffers],
        }
    ).encode()
