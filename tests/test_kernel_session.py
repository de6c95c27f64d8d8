"""The kernel's Session (jupyter/session.py) against jupyter_client's own: the same bytes on
the wire for what the kernel sends, the same messages read back (dates aside), and the same
refusals of a forged or replayed message. No Julia and no kernel: both sessions are real."""

from __future__ import annotations

import datetime
from typing import Any

import pytest
from jupyter_client.session import Session

from jutul_jkernel.jupyter import session as kernel_session
from jutul_jkernel.jupyter.session import KernelSession

WHEN = datetime.datetime(2026, 11, 29, 10, 0, 0, 123456, tzinfo=datetime.timezone.utc)


class Recorder:
    """Stands where a socket or stream is: keeps each message's parts."""

    def __init__(self) -> None:
        self.sent: list[list[Any]] = []

    def send_multipart(self, parts: list[Any], copy: bool = True) -> None:
        self.sent.append(list(parts))


def sends(key: bytes) -> list[tuple[Any, ...]]:
    """What the kernel sends: statuses with a topic, replies to a routed request, a message
    with no parent, one whose parent is a bare header, one with dates and non-ASCII text."""
    parent = Session(key=key).msg("execute_request", {"code": "1+1"})
    return [
        ("status", {"execution_state": "busy"}, parent, b"kernel.x.status", None),
        ("execute_reply", {"status": "ok", "when": WHEN}, parent, [b"id1", b"id2"], {"m": 1}),
        ("comm_msg", None, None, None, None),
        ("stream", {"name": "stdout", "text": "é ∑ \x00"}, parent["header"], b"stream", None),
    ]


@pytest.mark.parametrize("key", [b"a secret", b""], ids=["signed", "unsigned"])
def test_the_kernel_session_sends_the_bytes_jupyter_client_sends(
    key: bytes, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr("jupyter_client.session.utcnow", lambda: WHEN)
    monkeypatch.setattr(kernel_session, "utcnow", lambda: WHEN)
    theirs = Session(key=key, session="S", username="u")
    ours = KernelSession(key=key, session="S", username="u")
    got_theirs, got_ours = Recorder(), Recorder()
    for msg_type, content, parent, ident, metadata in sends(key):
        a = theirs.send(got_theirs, msg_type, content, parent, ident=ident, metadata=metadata)
        b = ours.send(got_ours, msg_type, content, parent, ident=ident, metadata=metadata)
        assert a is not None and b is not None
        assert a["header"] == b["header"] and a["content"] == b["content"]
    assert got_ours.sent == got_theirs.sent


def test_a_changed_setting_is_used_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """The short path reads its settings once: a key or session id set later is used too."""
    monkeypatch.setattr("jupyter_client.session.utcnow", lambda: WHEN)
    monkeypatch.setattr(kernel_session, "utcnow", lambda: WHEN)
    ours, theirs = KernelSession(key=b"old"), Session(key=b"old")
    ours.send(Recorder(), "status", {})  # the settings are read
    for s in (ours, theirs):
        s.key = b"new"
        s.session = "T"
        s.message_count = 5
    a, b = Recorder(), Recorder()
    theirs.send(a, "status", {"execution_state": "idle"})
    ours.send(b, "status", {"execution_state": "idle"})
    assert b.sent == a.sent


@pytest.mark.parametrize("key", [b"a secret", b""], ids=["signed", "unsigned"])
def test_the_kernel_session_reads_what_jupyter_client_reads(key: bytes) -> None:
    sender = Session(key=key)
    wire = Recorder()
    for msg_type, content, parent, ident, metadata in sends(key):
        sender.send(wire, msg_type, content, parent, ident=ident, metadata=metadata)
    for parts in wire.sent:
        _, rest = sender.feed_identities(parts)
        theirs = Session(key=key).deserialize(rest)
        ours = KernelSession(key=key).deserialize(rest)
        # jupyter_client makes datetimes of the dates; here they stay the sender's strings
        assert isinstance(theirs["header"]["date"], datetime.datetime)
        assert theirs["header"]["date"].isoformat().replace("+00:00", "Z") == ours["header"]["date"]
        for m in (theirs, ours):
            m["header"].pop("date")
            m["parent_header"].pop("date", None)
        assert ours == theirs


def test_a_forged_or_replayed_message_is_refused() -> None:
    sender = Session(key=b"a secret")
    wire = Recorder()
    sender.send(wire, "execute_request", {"code": "1+1"})
    _, rest = sender.feed_identities(wire.sent[0])
    ours = KernelSession(key=b"a secret")
    with pytest.raises(ValueError, match="Invalid Signature"):
        ours.deserialize([b"0" * 64, *rest[1:]])
    with pytest.raises(ValueError, match="Unsigned Message"):
        ours.deserialize([b"", *rest[1:]])
    forged = [rest[0], *rest[1:4], b'{"code": "run(`rm -rf ~`)"}']
    with pytest.raises(ValueError, match="Invalid Signature"):
        KernelSession(key=b"a secret").deserialize(forged)
    ours.deserialize(rest)
    with pytest.raises(ValueError, match="Duplicate Signature"):
        ours.deserialize(rest)
