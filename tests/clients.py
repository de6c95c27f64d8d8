"""Talking to a kernel through jupyter_client, as a notebook does: every wait is bounded.

conftest.py starts and stops the kernels (and keeps track of their Julias); this module sends
them requests and reads what comes back: a cell's reply, its IOPub messages up to its idle
status, and the text or result among them.
"""

from __future__ import annotations

import queue
import time
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from .conftest import WARM_UP_BOUND, WARM_UP_POLL

REPLY_TIMEOUT = 30.0
# Per-cell bound for the interrupt cases: the escalation's own worst case is ~6 s.
INTERRUPT_TIMEOUT = 20.0


def wait_until_warm(kc: BlockingKernelClient) -> None:
    """Poll, idle between polls, until the kernel's Julia has finished its warm-up."""
    deadline = time.monotonic() + WARM_UP_BOUND
    while result_of(execute(kc, "JKernel.WARMING[]")[1]) != "false":
        assert time.monotonic() < deadline, "Julia did not finish its warm-up"
        time.sleep(WARM_UP_POLL)


def drain(kc: BlockingKernelClient) -> None:
    """Drop the IOPub messages that came before, up to a 0.2 s pause."""
    while True:
        try:
            kc.get_iopub_msg(timeout=0.2)
        except queue.Empty:
            return


def reply_to(
    kc: BlockingKernelClient, msg_id: str, timeout: float = REPLY_TIMEOUT
) -> dict[str, Any]:
    """The next shell reply, which must answer ``msg_id``.

    Tests read replies in the order they sent requests, as the kernel answers them, so a reply
    to anything else is a second reply to a request already answered (or one out of order):
    a failure, never skipped. The one exception: ``wait_for_ready`` sends a kernel_info_request
    a second while the kernel starts and reads one reply; the others may still be queued.
    """
    deadline = time.monotonic() + timeout
    while True:
        msg = kc.get_shell_msg(timeout=max(0.01, deadline - time.monotonic()))
        parent = msg["parent_header"].get("msg_id")
        if parent == msg_id:
            return msg
        if msg["msg_type"] == "kernel_info_reply":
            continue
        pytest.fail(f"a {msg['msg_type']} to {parent} arrived while waiting for {msg_id}")


def collect(
    kc: BlockingKernelClient, msg_id: str, timeout: float = REPLY_TIMEOUT
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The reply to ``msg_id`` (see reply_to) and every IOPub message it caused, up to its
    idle status."""
    deadline = time.monotonic() + timeout
    reply = reply_to(kc, msg_id, timeout)
    outputs = []
    while True:
        msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") != msg_id:
            continue
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            break
        if msg["msg_type"] not in ("status", "execute_input"):
            outputs.append(msg)
    return reply, outputs


def execute(
    kc: BlockingKernelClient, code: str, timeout: float = REPLY_TIMEOUT, **kwargs: Any
) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    return collect(kc, kc.execute(code, **kwargs), timeout)


def text_of(outputs: list[dict[str, Any]], name: str = "stdout") -> str:
    return "".join(
        m["content"]["text"]
        for m in outputs
        if m["msg_type"] == "stream" and m["content"]["name"] == name
    )


def result_of(outputs: list[dict[str, Any]]) -> str | None:
    for m in outputs:
        if m["msg_type"] == "execute_result":
            return str(m["content"]["data"]["text/plain"])
    return None
