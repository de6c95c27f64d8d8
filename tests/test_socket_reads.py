"""A send made past a socket's stream never stops the stream's reading (jupyter/sockets.py,
"Sends past a stream").

The kernel reads the shell and IOPub sockets through ``ZMQStream``s and writes them directly.
A zmq socket's file descriptor is edge-triggered, and a send may take in the command that was
the only news of a request that had just come; then the stream did not read it, nor anything
after it on that pipe (JupyterLab's first cell stayed at [*]: CI, and a loaded machine here).
Each test makes that happen for certain: the request comes while a later task (as a handler's
is) sends, with a pause in between longer than libzmq's throttle on looking at commands. Real
zmq sockets over TCP, as the kernel's, on a real main loop.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import zmq
from jupyter_client.session import Session

from jutul_jkernel.jupyter.sockets import MainLoopIOPub, SendNowStream

from .main_loop import run

# Seconds: long enough for a message sent over loopback TCP to reach the other socket's pipe,
# and for libzmq's next send to look at the socket's commands (it does at most every ~1 ms).
_ARRIVAL = 0.05


async def until(condition: Any, seconds: float = 2.0) -> bool:
    deadline = time.monotonic() + seconds
    while not condition():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


def test_a_request_that_comes_while_a_reply_is_sent_is_read() -> None:
    async def test(ctx: zmq.Context[Any]) -> None:
        router = ctx.socket(zmq.ROUTER)
        port = router.bind_to_random_port("tcp://127.0.0.1")
        shell = SendNowStream(router)
        client = ctx.socket(zmq.DEALER)
        client.connect(f"tcp://127.0.0.1:{port}")
        read: list[bytes] = []

        def answer_later(identity: bytes) -> None:  # a handler's task, a turn or more later
            client.send(b"second")  # comes while the first is being answered
            time.sleep(_ARRIVAL)
            shell.send_multipart([identity, b"first answered"])

        def received(msg: list[Any]) -> None:
            read.append(bytes(msg[-1]))
            if msg[-1] == b"first":
                asyncio.get_running_loop().call_later(0.02, answer_later, bytes(msg[0]))

        shell.on_recv(received)
        client.send(b"first")
        assert await until(lambda: b"second" in read), f"the stream read only {read}"
        assert client.poll(1000) and client.recv() == b"first answered"
        shell.close(linger=0)
        client.close(linger=0)

    run(test)


def test_a_subscription_that_comes_while_iopub_sends_is_welcomed() -> None:
    async def test(ctx: zmq.Context[Any]) -> None:
        xpub = ctx.socket(zmq.XPUB)
        port = xpub.bind_to_random_port("tcp://127.0.0.1")
        iopub = MainLoopIOPub(xpub, Session(key=b"k"))
        late = ctx.socket(zmq.SUB)
        late.setsockopt(zmq.SUBSCRIBE, b"topic")  # its own topic: the XPUB reports it

        def send_later() -> None:  # a handler's IOPub message, a turn or more later
            late.connect(f"tcp://127.0.0.1:{port}")  # subscribes while IOPub sends
            time.sleep(_ARRIVAL)
            iopub.send_multipart([b"other", b"status"])

        asyncio.get_running_loop().call_later(0.02, send_later)
        welcomed = await until(lambda: bool(late.poll(0)))
        assert welcomed, "no iopub_welcome for a subscription that came while IOPub sent"
        assert b"iopub_welcome" in b"".join(late.recv_multipart())
        iopub.stop()
        iopub.close()
        late.close(linger=0)

    run(test)
