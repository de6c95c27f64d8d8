"""IOPub's hold (jupyter/sockets.py): a shell request's busy and execute_input leave once its
handler has sent Julia the request, never after its reply and never later than the main loop's
next turn. Real zmq sockets (inproc) on a real main loop; what is checked is the order in which
the kernel's sockets were given the messages, which is what the promise is about (two sockets'
messages reach a client in no order zmq guarantees)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import pytest
import zmq
from jupyter_client.session import Session

from jutul_jkernel.jupyter import sockets
from jutul_jkernel.jupyter.session import KernelSession
from jutul_jkernel.jupyter.sockets import MainLoopIOPub, SendNowStream

from .main_loop import run


@pytest.fixture
def sent(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[bytes]]:
    """The first part of every message the kernel's sockets are given, in order."""
    order: list[bytes] = []
    send_parts = sockets.send_parts

    def recording(socket: Any, parts: list[Any], *args: Any, **kwargs: Any) -> None:
        order.append(bytes(parts[0]))
        send_parts(socket, parts, *args, **kwargs)

    monkeypatch.setattr(sockets, "send_parts", recording)
    yield order


async def kernel_sockets(ctx: zmq.Context[Any]) -> tuple[MainLoopIOPub, SendNowStream, Any]:
    """IOPub and the shell stream as the kernel app wires them (jupyter/app.py), and a
    subscriber that has been welcomed."""
    xpub = ctx.socket(zmq.XPUB)
    xpub.bind("inproc://iopub")
    iopub = MainLoopIOPub(xpub, Session(key=b"k"))
    router = ctx.socket(zmq.ROUTER)
    router.bind("inproc://shell")
    shell = SendNowStream(router)
    shell.before_send = iopub.release
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect("inproc://iopub")
    for _ in range(200):  # the welcome (JEP 65) says the subscription is active
        await asyncio.sleep(0.005)
        if sub.poll(0):
            sub.recv_multipart()
            break
    return iopub, shell, sub


def close(iopub: MainLoopIOPub, shell: SendNowStream, sub: Any) -> None:
    iopub.stop()
    iopub.close()
    shell.close(linger=0)
    sub.close(linger=0)


def test_a_reply_never_overtakes_what_iopub_holds(sent: list[bytes]) -> None:
    async def test(ctx: zmq.Context[Any]) -> None:
        iopub, shell, sub = await kernel_sockets(ctx)
        sent.clear()
        iopub.hold()
        iopub.send_multipart([b"busy"])
        iopub.send_multipart([b"execute_input"])
        assert sent == []  # held: the handler has not sent Julia the cell yet
        shell.send_multipart([b"client", b"reply"])
        assert sent == [b"busy", b"execute_input", b"client"]
        close(iopub, shell, sub)

    run(test)


def test_what_iopub_holds_leaves_at_the_next_turn_of_the_loop(sent: list[bytes]) -> None:
    async def test(ctx: zmq.Context[Any]) -> None:
        iopub, shell, sub = await kernel_sockets(ctx)
        sent.clear()
        iopub.hold()
        iopub.send_multipart([b"busy"])
        await asyncio.sleep(0)  # the handler waits (for Julia, say): the loop turns
        assert sent == [b"busy"]
        assert sub.poll(1000) and sub.recv_multipart() == [b"busy"]
        iopub.send_multipart([b"idle"])  # no longer held
        assert sent == [b"busy", b"idle"]
        close(iopub, shell, sub)

    run(test)


def test_a_held_message_is_serialised_when_it_leaves_and_in_its_turn(sent: list[bytes]) -> None:
    """The kernel's session hands a message sent while IOPub holds over unserialised (its JSON
    and signature are made while Julia works), and it still leaves in its turn among the
    messages held before and after it, as the subscriber reads it."""

    async def test(ctx: zmq.Context[Any]) -> None:
        iopub, shell, sub = await kernel_sockets(ctx)
        session = KernelSession(key=b"k")
        packed: list[Any] = []

        def pack(obj: Any) -> bytes:
            packed.append(obj)
            return Session(key=b"k").pack(obj)

        session.pack = pack
        sent.clear()
        iopub.hold()
        iopub.send_multipart([b"first"])
        session.send(iopub, "status", {"execution_state": "busy"}, ident=b"status")
        iopub.send_multipart([b"last"])
        assert sent == []
        assert packed == []  # not serialised yet
        iopub.release()
        assert sent == [b"first", b"status", b"last"]
        assert {"execution_state": "busy"} in packed
        got = [sub.recv_multipart() for _ in range(3) if sub.poll(1000)]
        assert [m[0] for m in got] == [b"first", b"status", b"last"]
        msg = Session(key=b"k").deserialize(Session(key=b"k").feed_identities(got[1])[1])
        assert msg["content"] == {"execution_state": "busy"}
        session.send(iopub, "status", {"execution_state": "idle"}, ident=b"status")
        assert sent[-1] == b"status"  # not held: serialised and sent at once
        close(iopub, shell, sub)

    run(test)


def test_a_held_message_that_cannot_be_serialised_loses_none_after_it(
    sent: list[bytes], caplog: pytest.LogCaptureFixture
) -> None:
    """Serialised late, a message whose content JSON cannot take fails at the release, not
    where it was made: it is logged, and the messages held after it still leave."""

    async def test(ctx: zmq.Context[Any]) -> None:
        iopub, shell, sub = await kernel_sockets(ctx)
        session = KernelSession(key=b"k")
        sent.clear()
        iopub.hold()
        session.send(iopub, "status", {"execution_state": "busy"}, ident=b"busy")
        session.send(iopub, "display_data", {"data": object()}, ident=b"bad")
        session.send(iopub, "status", {"execution_state": "idle"}, ident=b"idle")
        iopub.release()
        assert sent == [b"busy", b"idle"]
        assert "could not be sent" in caplog.text
        close(iopub, shell, sub)

    run(test)
