"""The kernel's Session: jupyter_client's, with the path every message takes made shorter.

A trivial cell makes six messages (the request read, then busy, execute_input, the result, the
reply and idle), and jupyter_client's ``Session.send`` and ``deserialize`` read about a dozen
traitlets apiece on each (``pack``, ``auth``, ``session``, ``username``, ``metadata``,
``check_pid``, ``adapt_version``, ``copy_threshold``, ``debug``...): ~70 descriptor lookups a
cell, besides the work. :class:`KernelSession` reads them once, and again whenever one of them
changes, and builds the same message: the same header (keys in the same order), signature and
parts, so the same bytes on the wire. What it does not cover (buffers, tracking, a message
given whole, a debug session, adapting to another protocol version, a fork) goes to
jupyter_client's own code.

Received, the header's and parent header's ``date`` stay the strings the client sent:
jupyter_client turns every date-like string of both into a ``datetime`` (``extract_dates``,
~20 µs a message with dateutil), which nothing in ipykernel or this kernel reads, and a parent
header echoed in the replies then carries the client's own text again instead of the date
written anew.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from hmac import compare_digest
from typing import Any

import zmq.asyncio
from jupyter_client._version import protocol_version
from jupyter_client.adapter import adapt
from jupyter_client.session import DELIM, DONE, Session, extract_header, utcnow
from traitlets import Bunch


@dataclass(frozen=True)
class _Settings:
    """The traits the short paths read, as they were when last read."""

    pack: Any
    unpack: Any
    auth: Any
    session: str
    username: str
    metadata: dict[str, Any]
    copy_threshold: int
    pid: int | None  # the pid a message may be sent from (None: any, no check_pid)
    short: bool  # whether the short paths apply at all (no debug, no adapting)


class KernelSession(Session):
    """jupyter_client's Session with shorter ``send`` and ``deserialize`` (module doc)."""

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._settings: _Settings | None = None
        self.observe(self._forget_settings)  # any trait set: read them all again

    def _forget_settings(self, change: Bunch) -> None:
        self._settings = None

    def _read_settings(self) -> _Settings:
        s = self._settings
        if s is None:
            s = self._settings = _Settings(
                pack=self.pack,
                unpack=self.unpack,
                auth=self.auth,
                session=self.session,
                username=self.username,
                metadata=self.metadata,  # the dict itself: changed in place, it is read anew
                copy_threshold=self.copy_threshold,
                pid=self.pid if self.check_pid else None,
                short=not self.debug and not self.adapt_version,
            )
        return s

    def send(
        self,
        stream: Any,
        msg_or_type: dict[str, Any] | str,
        content: dict[str, Any] | None = None,
        parent: dict[str, Any] | None = None,
        ident: bytes | list[bytes] | None = None,
        buffers: list[Any] | None = None,
        track: bool = False,
        header: dict[str, Any] | None = None,
        metadata: dict[str, Any] | None = None,
    ) -> dict[str, Any] | None:
        s = self._read_settings()
        pid = os.getpid()
        if (
            not s.short
            or not isinstance(msg_or_type, str)
            or stream is None
            or isinstance(stream, zmq.asyncio.Socket)  # jupyter_client sends on a shadow of it
            or buffers
            or track
            or header is not None
            or not (content is None or isinstance(content, dict))
            or (s.pid is not None and pid != s.pid)  # a fork: jupyter_client warns
        ):
            return super().send(
                stream, msg_or_type, content, parent, ident, buffers, track, header, metadata
            )
        number = self.message_count
        self.message_count = number + 1
        # msg_header's keys, in its order (jupyter_client.session.msg_header).
        head = {
            "msg_id": f"{s.session}_{pid}_{number}",
            "msg_type": msg_or_type,
            "username": s.username,
            "session": s.session,
            "date": utcnow(),
            "version": protocol_version,
        }
        meta = dict(s.metadata)
        if metadata is not None:
            meta.update(metadata)
        msg: dict[str, Any] = {
            "header": head,
            "msg_id": head["msg_id"],
            "msg_type": msg_or_type,
            "parent_header": {} if parent is None else extract_header(parent),
            "content": {} if content is None else content,
            "metadata": meta,
        }
        msg["tracker"] = DONE
        send_later = getattr(stream, "send_later", None)
        if send_later is None or not send_later(lambda: self._pack_and_send(s, stream, msg, ident)):
            self._pack_and_send(s, stream, msg, ident)
        return msg

    def _pack_and_send(
        self, s: _Settings, stream: Any, msg: dict[str, Any], ident: bytes | list[bytes] | None
    ) -> None:
        """Serialise and sign ``msg`` (built by ``send``), and send it on ``stream``."""
        pack = s.pack
        packed = [
            pack(msg["header"]),
            pack(msg["parent_header"]),
            pack(msg["metadata"]),
            pack(msg["content"]),
        ]
        if s.auth is None:
            signature = b""
        else:
            h = s.auth.copy()
            for part in packed:
                h.update(part)
            signature = h.hexdigest().encode()
        if ident is None:
            to_send = [DELIM, signature, *packed]
        elif isinstance(ident, list):
            to_send = [*ident, DELIM, signature, *packed]
        else:
            to_send = [ident, DELIM, signature, *packed]
        copy = max(len(p) for p in to_send) < s.copy_threshold
        stream.send_multipart(to_send, copy=copy)

    def deserialize(
        self,
        msg_list: list[Any],
        content: bool = True,
        copy: bool = True,
    ) -> dict[str, Any]:
        s = self._read_settings()
        if not s.short or len(msg_list) < 5:
            return super().deserialize(msg_list, content=content, copy=copy)
        parts = [bytes(m.bytes) for m in msg_list[:5]] if not copy else msg_list[:5]
        if s.auth is not None:
            signature = parts[0]
            if not signature:
                raise ValueError("Unsigned Message")
            if signature in self.digest_history:
                raise ValueError(f"Duplicate Signature: {signature!r}")
            if content:  # only a message that is read, not one peeked at, is remembered
                self._add_digest(signature)
            h = s.auth.copy()
            for part in parts[1:5]:
                h.update(part)
            if not compare_digest(signature, h.hexdigest().encode()):
                raise ValueError(f"Invalid Signature: {signature!r}")
        unpack = s.unpack
        header = unpack(parts[1])
        message: dict[str, Any] = {
            "header": header,
            "msg_id": header["msg_id"],
            "msg_type": header["msg_type"],
            "parent_header": unpack(parts[2]),
            "metadata": unpack(parts[3]),
            "content": unpack(parts[4]) if content else parts[4],
        }
        rest = msg_list[5:]
        buffers = [memoryview(b) for b in rest]
        if buffers and buffers[0].shape is None:  # pyzmq #646, as jupyter_client works around it
            buffers = [memoryview(bytes(b.bytes)) for b in rest]
        message["buffers"] = buffers
        return adapt(message)
