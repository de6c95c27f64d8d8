"""Jupyter comms through jupyter_client, both ways: IJulia's CommManager names in Julia, the
comm messages on the wire, their parents, binary buffers, and what faults leave standing."""

from __future__ import annotations

import queue
import time
from collections.abc import Iterator
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from .clients import INTERRUPT_TIMEOUT, REPLY_TIMEOUT, execute, result_of
from .conftest import Kernel, shared_kernel
from .test_jupyterlab import SLIDER_EXAMPLE

pytestmark = pytest.mark.e2e


# What a package does to accept the comms a frontend opens for its target (IJulia's
# CommManager: a method of register_comm for Comm{:target}): an echo that sends back what it
# gets, buffers included, and records what it saw.
ECHO_TARGET = """
const CM = IJulia.CommManager
seen = Any[]
closed = String[]
function CM.register_comm(comm::CM.Comm{:jk_echo}, msg)
    push!(seen, ("open", msg.content["data"]))
    comm.on_msg = m -> begin
        push!(seen, ("msg", m.content["data"], length(m.buffers)))
        haskey(m.content["data"], "boom") && error("callback failed on purpose")
        haskey(m.content["data"], "nap") && sleep(1000)
        haskey(m.content["data"], "slow") && sleep(m.content["data"]["slow"])
        println("echoing ", m.content["data"])
        CM.send_comm(comm, Dict("echo" => m.content["data"]); buffers = reverse(m.buffers))
    end
    comm.on_close = m -> push!(closed, comm.id)
end
nothing
"""


@pytest.fixture(scope="module")
def kernel(kernel_env: dict[str, str]) -> Iterator[Kernel]:
    with shared_kernel() as k:
        reply, _ = execute(k[1], ECHO_TARGET)
        assert reply["content"]["status"] == "ok", reply["content"]
        yield k


def _send(kc: BlockingKernelClient, msg_type: str, content: dict[str, Any], **kw: Any) -> str:
    """Send a comm message on the shell channel (with ``buffers=``) and return its id."""
    msg = kc.session.msg(msg_type, content)
    if "buffers" in kw:
        msg["buffers"] = kw["buffers"]
    kc.shell_channel.send(msg)
    return str(msg["header"]["msg_id"])


def _iopub_of(
    kc: BlockingKernelClient, parent_id: str, timeout: float = REPLY_TIMEOUT
) -> list[Any]:
    """Every IOPub message with ``parent_id`` as parent, up to and including its idle."""
    deadline = time.monotonic() + timeout
    got = []
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"no idle for {parent_id}; so far {[m['msg_type'] for m in got]}"
        try:
            msg = kc.get_iopub_msg(timeout=min(left, 1.0))
        except queue.Empty:
            continue
        if msg["parent_header"].get("msg_id") != parent_id:
            continue
        got.append(msg)
        if msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle":
            return got


def _iopub_stream(kc: BlockingKernelClient, timeout: float = REPLY_TIMEOUT) -> Iterator[Any]:
    """IOPub messages as they come; the test fails once none came for ``timeout`` s in all."""
    deadline = time.monotonic() + timeout
    while True:
        left = deadline - time.monotonic()
        assert left > 0, f"IOPub: not what the test waits for within {timeout:g} s"
        try:
            yield kc.get_iopub_msg(timeout=min(left, 1.0))
        except queue.Empty:
            continue


def _of_type(msgs: list[Any], msg_type: str) -> list[Any]:
    return [m for m in msgs if m["msg_type"] == msg_type]


def _comm_info(kc: BlockingKernelClient, target: str | None = None) -> dict[str, Any]:
    content = {} if target is None else {"target_name": target}
    msg_id = _send(kc, "comm_info_request", content)
    while True:
        reply = kc.get_shell_msg(timeout=REPLY_TIMEOUT)
        if reply["parent_header"].get("msg_id") == msg_id:
            assert reply["content"]["status"] == "ok", reply["content"]
            return dict(reply["content"]["comms"])


def _stderr(msgs: list[Any]) -> str:
    return "".join(
        m["content"]["text"] for m in _of_type(msgs, "stream") if m["content"]["name"] == "stderr"
    )


def test_a_comm_julia_opens_reaches_the_client_and_comm_info_lists_it(kernel: Kernel) -> None:
    """`Comm(:target; data)` in a cell: a comm_open with that target and data, parented by
    the cell; comm_info lists it, also when asked for its target, and not for another."""
    _, kc = kernel
    msg_id = kc.execute(
        'c = IJulia.CommManager.Comm(:jk_gauge; data = Dict("level" => 3)); '
        "(c.id, IJulia.CommManager.comm_target(c))"
    )
    msgs = _iopub_of(kc, msg_id)
    opened = _of_type(msgs, "comm_open")
    assert len(opened) == 1, msgs
    content = opened[0]["content"]
    assert content["target_name"] == "jk_gauge" and content["data"] == {"level": 3}, content
    comm_id = content["comm_id"]
    result = _of_type(msgs, "execute_result")[0]["content"]["data"]["text/plain"]
    assert result == f'("{comm_id}", :jk_gauge)'
    assert _comm_info(kc)[comm_id] == {"target_name": "jk_gauge"}
    assert comm_id in _comm_info(kc, "jk_gauge")
    assert comm_id not in _comm_info(kc, "jk_other")


def test_a_client_comm_reaches_its_target_and_round_trips_buffers(kernel: Kernel) -> None:
    """A comm_open for a registered target runs its register_comm; a comm_msg with binary
    buffers reaches on_msg, whose reply (buffers included) has the comm_msg as its parent,
    between the busy and idle of that message."""
    _, kc = kernel
    comm_id = "jk-echo-1"
    opening = _send(
        kc, "comm_open", {"comm_id": comm_id, "target_name": "jk_echo", "data": {"a": 1}}
    )
    msgs = _iopub_of(kc, opening)
    assert not _of_type(msgs, "comm_close"), msgs  # accepted
    assert comm_id in _comm_info(kc, "jk_echo")
    data = {"n": [1, 2], "s": 'é\n"😀\\'}  # escapes both ways
    sending = _send(
        kc, "comm_msg", {"comm_id": comm_id, "data": data}, buffers=[b"\x00\x01\xff", b"xyz"]
    )
    msgs = _iopub_of(kc, sending)
    kinds = [m["msg_type"] for m in msgs]
    assert kinds[0] == "status" and msgs[0]["content"]["execution_state"] == "busy", kinds
    replies = _of_type(msgs, "comm_msg")
    assert len(replies) == 1, kinds
    assert replies[0]["content"] == {"comm_id": comm_id, "data": {"echo": data}}
    assert [bytes(b) for b in replies[0]["buffers"]] == [b"xyz", b"\x00\x01\xff"]
    printed = "".join(m["content"]["text"] for m in _of_type(msgs, "stream"))
    assert "echoing" in printed, msgs  # the callback's output, under the comm_msg
    check = (
        'seen[end-1:end] == [("open", Dict("a" => 1)), '
        '("msg", Dict("n" => [1, 2], "s" => "é\\n\\"😀\\\\"), 2)]'
    )
    _, outputs = execute(kc, check)
    assert result_of(outputs) == "true"


def test_close_runs_on_close_and_the_comm_is_gone(kernel: Kernel) -> None:
    """comm_close from the client runs the comm's on_close; comm_info no longer lists it."""
    _, kc = kernel
    comm_id = "jk-echo-close"
    _iopub_of(
        kc, _send(kc, "comm_open", {"comm_id": comm_id, "target_name": "jk_echo", "data": {}})
    )
    _iopub_of(kc, _send(kc, "comm_close", {"comm_id": comm_id, "data": {}}))
    _, outputs = execute(kc, f'"{comm_id}" in closed')
    assert result_of(outputs) == "true"
    assert comm_id not in _comm_info(kc)


def test_an_unknown_target_is_closed_and_an_unknown_comm_is_dropped(kernel: Kernel) -> None:
    """A comm_open for a target nobody registered gets a comm_close back under it, as today
    and as in ipykernel; a comm_msg for an unknown id publishes nothing and breaks nothing."""
    _, kc = kernel
    opening = _send(
        kc, "comm_open", {"comm_id": "jk-nobody", "target_name": "jk_nobody", "data": {}}
    )
    closes = _of_type(_iopub_of(kc, opening), "comm_close")
    assert [m["content"]["comm_id"] for m in closes] == ["jk-nobody"]
    assert "jk-nobody" not in _comm_info(kc)
    msgs = _iopub_of(kc, _send(kc, "comm_msg", {"comm_id": "jk-never-opened", "data": {}}))
    assert [m["msg_type"] for m in msgs] == ["status", "status"], msgs
    _, outputs = execute(kc, "1 + 1")
    assert result_of(outputs) == "2"


def test_a_callback_that_throws_shows_its_error_and_the_comm_lives_on(kernel: Kernel) -> None:
    """on_msg throws: its error is on stderr under the comm_msg; the next message to the same
    comm is handled."""
    _, kc = kernel
    comm_id = "jk-echo-boom"
    _iopub_of(
        kc, _send(kc, "comm_open", {"comm_id": comm_id, "target_name": "jk_echo", "data": {}})
    )
    msgs = _iopub_of(kc, _send(kc, "comm_msg", {"comm_id": comm_id, "data": {"boom": True}}))
    assert "callback failed on purpose" in _stderr(msgs), msgs
    msgs = _iopub_of(kc, _send(kc, "comm_msg", {"comm_id": comm_id, "data": {"again": 1}}))
    assert [m["content"]["data"] for m in _of_type(msgs, "comm_msg")] == [{"echo": {"again": 1}}]
    _, outputs = execute(kc, "21 * 2")  # and the next cell runs
    assert result_of(outputs) == "42"


def test_an_interrupt_stops_a_callback_and_keeps_the_state(kernel: Kernel) -> None:
    """on_msg sleeps: interrupt_request stops it (InterruptException on its stderr), and the
    session, its variables and the comm are still there."""
    km, kc = kernel
    comm_id = "jk-echo-nap"
    _iopub_of(
        kc, _send(kc, "comm_open", {"comm_id": comm_id, "target_name": "jk_echo", "data": {}})
    )
    execute(kc, "keep_comm = 42")
    napping = _send(kc, "comm_msg", {"comm_id": comm_id, "data": {"nap": True}})
    deadline = time.monotonic() + REPLY_TIMEOUT
    while True:  # the callback runs
        assert time.monotonic() < deadline, "the callback never started"
        msg = kc.get_iopub_msg(timeout=REPLY_TIMEOUT)
        if msg["parent_header"].get("msg_id") == napping and msg["msg_type"] == "status":
            break
    time.sleep(0.5)
    km.interrupt_kernel()
    msgs = _iopub_of(kc, napping, INTERRUPT_TIMEOUT)
    assert "InterruptException" in _stderr(msgs), msgs
    _, outputs = execute(kc, "keep_comm")
    assert result_of(outputs) == "42"
    msgs = _iopub_of(kc, _send(kc, "comm_msg", {"comm_id": comm_id, "data": {"after": 1}}))
    assert [m["content"]["data"] for m in _of_type(msgs, "comm_msg")] == [{"echo": {"after": 1}}]


def test_a_widget_view_arrives_in_the_bundle_as_a_json_object(kernel: Kernel) -> None:
    """examples/widget_slider.jl: the slider's model is a comm_open to jupyter.widget with the
    IntSlider's state, and its view reaches the client as a JSON object naming that model."""
    _, kc = kernel
    msg_id = kc.execute(f'include(raw"{SLIDER_EXAMPLE}"); slider')
    msgs = _iopub_of(kc, msg_id)
    (opened,) = _of_type(msgs, "comm_open")
    assert opened["content"]["target_name"] == "jupyter.widget"
    assert opened["metadata"] == {"version": "2.1.0"}
    state = opened["content"]["data"]["state"]
    assert (state["_model_name"], state["value"]) == ("IntSliderModel", 5), state
    data = _of_type(msgs, "execute_result")[0]["content"]["data"]
    view = data["application/vnd.jupyter.widget-view+json"]
    assert view == {
        "model_id": opened["content"]["comm_id"],
        "version_major": 2,
        "version_minor": 0,
    }
    assert data["text/plain"] == "IntSliderModel(value = 5)"


def test_julia_dying_closes_every_comm(own_kernel: Kernel) -> None:
    """Julia ends (exit() in a cell): the kernel closes each comm it had, so that the frontend
    keeps no widget that nothing answers; comm_info lists none."""
    _, kc = own_kernel
    msg_id = kc.execute('IJulia.CommManager.Comm(:jk_gauge; data = Dict("level" => 1)).id')
    comm_id = _of_type(_iopub_of(kc, msg_id), "comm_open")[0]["content"]["comm_id"]
    ending = kc.execute("exit()")
    closes = _of_type(_iopub_of(kc, ending), "comm_close")
    assert [m["content"]["comm_id"] for m in closes] == [comm_id]
    assert _comm_info(kc) == {}


def test_a_comm_message_sent_while_a_cell_runs_waits_for_it_and_is_not_lost(kernel: Kernel) -> None:
    """A comm_msg sent while a cell runs is handled once the cell has ended, not lost.

    (ipykernel 7 dispatches a comm message that arrives during a cell at once, without busy
    and idle, as it does for its own comms; Julia runs the callback after the cell.)"""
    _, kc = kernel
    comm_id = "jk-echo-queued"
    _iopub_of(
        kc, _send(kc, "comm_open", {"comm_id": comm_id, "target_name": "jk_echo", "data": {}})
    )
    cell = kc.execute('sleep(1); println("cell done")')
    sending = _send(kc, "comm_msg", {"comm_id": comm_id, "data": {"queued": 1}})
    order = []
    for msg in _iopub_stream(kc):
        parent = msg["parent_header"].get("msg_id")
        if parent == cell and msg["msg_type"] == "stream":
            order.append("cell output")
        elif parent == cell and msg["content"].get("execution_state") == "idle":
            order.append("cell idle")
        elif parent == sending and msg["msg_type"] == "comm_msg":
            assert msg["content"]["data"] == {"echo": {"queued": 1}}, msg
            order.append("echo")
            break
    assert order == ["cell output", "cell idle", "echo"], order


def test_the_cell_after_a_comm_queued_behind_a_cell_gets_its_own_idle(kernel: Kernel) -> None:
    """A comm_msg arrives while a cell runs, a second cell is queued behind both, and the
    callback is still running in Julia when that second cell's turn comes: the second cell
    still gets its idle (JupyterLab keeps a cell at [*] until it has).

    ipykernel 7 dispatches such a comm message beside the cell and, once its handler returns,
    restores the parent it saw when the message came (kernelbase.py, shell_main); every shell
    message shares that parent, so a handler that waited for Julia put the first cell's parent
    back under the second cell, whose idle then went out as the first cell's."""
    _, kc = kernel
    comm_id = "jk-echo-slow"
    _iopub_of(
        kc, _send(kc, "comm_open", {"comm_id": comm_id, "target_name": "jk_echo", "data": {}})
    )
    kc.execute("sleep(1)")
    sending = _send(kc, "comm_msg", {"comm_id": comm_id, "data": {"slow": 1}})
    second = kc.execute('"second"')
    echoes, msgs = [], []
    for msg in _iopub_stream(kc):
        parent = msg["parent_header"].get("msg_id")
        if parent == sending and msg["msg_type"] == "comm_msg":
            echoes.append(msg["content"]["data"])
        elif parent == second:
            msgs.append(msg)
            if msg["content"].get("execution_state") == "idle":
                break
    assert result_of(msgs) == '"second"', msgs
    assert echoes == [{"echo": {"slow": 1}}], echoes  # the callback ran before the second cell
    msgs = _iopub_of(kc, kc.execute('"third"'))  # and the kernel goes on
    assert result_of(msgs) == '"third"', msgs


def test_a_comm_open_queued_behind_a_callback_is_handled_before_the_next_cell(
    kernel: Kernel,
) -> None:
    """A comm_open that arrives while a callback runs waits for it, and then for Julia's word
    on its target; the cell sent after it still runs after it, as with ipykernel, and sees
    what register_comm did."""
    _, kc = kernel
    comm_id = "jk-echo-first"
    _iopub_of(
        kc, _send(kc, "comm_open", {"comm_id": comm_id, "target_name": "jk_echo", "data": {}})
    )
    _send(kc, "comm_msg", {"comm_id": comm_id, "data": {"slow": 0.5}})
    opening = {"comm_id": "jk-echo-second", "target_name": "jk_echo", "data": {"second": 1}}
    _send(kc, "comm_open", opening)
    cell = kc.execute('("open", Dict("second" => 1)) in seen')
    assert result_of(_iopub_of(kc, cell)) == "true"


def test_a_restart_closes_every_comm(own_kernel: Kernel) -> None:
    """Restarting the kernel closes the comms of the Julia it ends, before the new one starts."""
    km, kc = own_kernel
    msg_id = kc.execute('IJulia.CommManager.Comm(:jk_gauge; data = Dict("level" => 2)).id')
    comm_id = _of_type(_iopub_of(kc, msg_id), "comm_open")[0]["content"]["comm_id"]
    km.restart_kernel()
    for msg in _iopub_stream(kc):
        if msg["msg_type"] == "comm_close":
            assert msg["content"]["comm_id"] == comm_id, msg
            break
    kc.wait_for_ready(timeout=REPLY_TIMEOUT)
    assert _comm_info(kc) == {}


def test_an_unknown_target_is_closed_by_julia_after_a_cell_that_never_yields(
    kernel: Kernel,
) -> None:
    """While a cell computes without yielding, Julia cannot say whether it knows a target: the
    comm_open waits for the cell, and then Julia closes it."""
    _, kc = kernel
    cell = kc.execute('println("spinning"); t0 = time(); while time() - t0 < 3; end')
    order: list[str] = []
    opening = ""
    for msg in _iopub_stream(kc):
        parent = msg["parent_header"].get("msg_id")
        if parent == cell and msg["msg_type"] == "stream" and not opening:
            opening = _send(
                kc, "comm_open", {"comm_id": "jk-spin", "target_name": "jk_nobody", "data": {}}
            )
        elif parent == cell and msg["content"].get("execution_state") == "idle":
            order.append("cell idle")
        elif parent == opening and msg["msg_type"] == "comm_close":
            assert msg["content"]["comm_id"] == "jk-spin", msg
            order.append("closed")
            break
    assert order == ["cell idle", "closed"], order
    assert "jk-spin" not in _comm_info(kc)
