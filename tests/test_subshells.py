"""Kernel subshells (Jupyter messaging 5.5, JEP 91) through jupyter_client: the three control
requests, requests on a subshell answered while the main shell's cell runs, each with its own
output, unknown ids, deletion while a request runs, Julia's death, a burst of subshells, what
an interrupt does, and a widget's comm messages over a subshell reaching a running cell."""

from __future__ import annotations

import queue
import re
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import psutil
import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from jutul_jkernel.jupyter.subshells import MAX_SUBSHELLS
from jutul_jkernel.supervisor import beside

from .clients import INTERRUPT_TIMEOUT, REPLY_TIMEOUT, wait_until_warm
from .conftest import Kernel, julia_of, shared_kernel
from .test_jupyterlab import SLIDER_EXAMPLE

pytestmark = pytest.mark.e2e

# The acceptance bound of issue 47: a subshell answers within this while the main cell runs.
ANSWER_BOUND = 0.2
COUNTING = 'while true; global x += 1; println("main ", x); sleep(0.01); end'


class Client:
    """One kernel client whose replies and IOPub messages are kept per request, as they come:
    the main shell and its subshells answer in any order."""

    def __init__(self, kc: BlockingKernelClient) -> None:
        self.kc = kc
        self._replies: dict[str, dict[str, Any]] = {}
        self._control: dict[str, dict[str, Any]] = {}
        self._iopub: dict[str, list[dict[str, Any]]] = defaultdict(list)

    # ---- sending ----

    def send(self, msg_type: str, content: dict[str, Any], subshell: str | None = None) -> str:
        msg = self.kc.session.msg(msg_type, content)
        if subshell is not None:
            msg["header"]["subshell_id"] = subshell
        self.kc.shell_channel.send(msg)
        return str(msg["header"]["msg_id"])

    def execute(self, code: str, subshell: str | None = None, **content: Any) -> str:
        body = {"code": code, "silent": False, "store_history": True, "allow_stdin": False}
        return self.send("execute_request", {**body, **content}, subshell)

    def control(
        self, msg_type: str, content: dict[str, Any] | None = None, timeout: float = REPLY_TIMEOUT
    ) -> dict[str, Any]:
        msg = self.kc.session.msg(msg_type, content or {})
        self.kc.control_channel.send(msg)
        msg_id = msg["header"]["msg_id"]
        deadline = time.monotonic() + timeout
        while msg_id not in self._control:
            left = deadline - time.monotonic()
            assert left > 0, f"no {msg_type} reply within {timeout:g} s"
            try:
                got = self.kc.get_control_msg(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            self._control[got["parent_header"].get("msg_id", "")] = got
        return self._control.pop(msg_id)

    def create(self) -> str:
        reply = self.control("create_subshell_request")["content"]
        assert reply["status"] == "ok", reply
        return str(reply["subshell_id"])

    def delete(self, subshell: str) -> dict[str, Any]:
        return self.control("delete_subshell_request", {"subshell_id": subshell})["content"]

    def listed(self) -> list[str]:
        reply = self.control("list_subshell_request")["content"]
        assert reply["status"] == "ok", reply
        return list(reply["subshell_id"])

    # ---- receiving ----

    def reply(self, msg_id: str, timeout: float = REPLY_TIMEOUT) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while msg_id not in self._replies:
            left = deadline - time.monotonic()
            assert left > 0, f"no reply to {msg_id} within {timeout:g} s"
            try:
                got = self.kc.get_shell_msg(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            self._replies[got["parent_header"].get("msg_id", "")] = got
        return self._replies.pop(msg_id)

    def outputs(self, msg_id: str, timeout: float = REPLY_TIMEOUT) -> list[dict[str, Any]]:
        """The IOPub messages under ``msg_id`` up to and including its idle."""
        deadline = time.monotonic() + timeout
        while not any(_is_idle(m) for m in self._iopub.get(msg_id, [])):
            left = deadline - time.monotonic()
            assert left > 0, f"no idle for {msg_id}: {[m['msg_type'] for m in self._iopub[msg_id]]}"
            try:
                got = self.kc.get_iopub_msg(timeout=min(left, 0.5))
            except queue.Empty:
                continue
            self._iopub[got["parent_header"].get("msg_id", "")].append(got)
        return self._iopub.pop(msg_id)

    def run(
        self, code: str, subshell: str | None = None, timeout: float = REPLY_TIMEOUT
    ) -> tuple[dict[str, Any], list[dict[str, Any]]]:
        msg_id = self.execute(code, subshell)
        return self.reply(msg_id, timeout), self.outputs(msg_id, timeout)

    def interrupt(self) -> None:
        assert self.control("interrupt_request")["content"]["status"] == "ok"


def _is_idle(msg: dict[str, Any]) -> bool:
    return msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"


def streams(outputs: list[dict[str, Any]], name: str = "stdout") -> str:
    return "".join(
        m["content"]["text"]
        for m in outputs
        if m["msg_type"] == "stream" and m["content"]["name"] == name
    )


def result(outputs: list[dict[str, Any]]) -> str | None:
    for m in outputs:
        if m["msg_type"] == "execute_result":
            return str(m["content"]["data"]["text/plain"])
    return None


@pytest.fixture(scope="module")
def kernel(kernel_env: dict[str, str]) -> Iterator[Kernel]:
    with shared_kernel() as k:
        wait_until_warm(k[1])
        yield k


@pytest.fixture
def client(kernel: Kernel) -> Iterator[Client]:
    """A client of the shared kernel; the subshells a test made are deleted after it."""
    c = Client(kernel[1])
    before = set(c.listed())
    try:
        yield c
    finally:
        for subshell in set(c.listed()) - before:
            c.delete(subshell)


# ---- the control requests ----


def test_kernel_info_lists_subshells_and_the_three_requests_round_trip(client: Client) -> None:
    """kernel_info advertises "kernel subshells"; create, list and delete answer as JEP 91
    says (the list under the singular key, the main shell not in it)."""
    info = client.reply(client.send("kernel_info_request", {}))["content"]
    assert "kernel subshells" in info["supported_features"]
    assert "debugger" not in info["supported_features"]
    before = client.listed()
    a, b = client.create(), client.create()
    assert a != b
    assert sorted(client.listed()) == sorted([*before, a, b])
    assert client.delete(a) == {"status": "ok"}
    assert sorted(client.listed()) == sorted([*before, b])
    assert client.delete(b) == {"status": "ok"}
    assert client.listed() == before


def test_an_unknown_subshell_gets_an_error_that_names_it(client: Client) -> None:
    """A request, a comm message and a delete for an id that names no subshell: each is
    answered with UnknownSubshellError naming it (a reply between busy and idle, or for a
    comm message the idle alone)."""
    msg_id = client.execute("1", subshell="nope")
    reply = client.reply(msg_id)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "UnknownSubshellError"
    assert reply["content"]["evalue"] == "Unknown subshell_id 'nope'"
    states = [m["content"]["execution_state"] for m in client.outputs(msg_id)]
    assert states == ["busy", "idle"]
    comm = client.send("comm_msg", {"comm_id": "x", "data": {}}, subshell="nope")
    assert _is_idle(client.outputs(comm)[-1])
    gone = client.delete("nope")
    assert gone["status"] == "error"
    assert gone["ename"] == "UnknownSubshellError"
    assert gone["evalue"] == "Unknown subshell_id 'nope'"
    assert gone["traceback"] == []


def test_kernel_info_is_answered_while_the_main_cell_runs(client: Client) -> None:
    """A new connection asks kernel_info before it can make a subshell (JupyterLab's subshell
    console waits for it): answered beside a running main cell, with its own busy and idle."""
    main = client.execute("sleep(30)")
    try:
        time.sleep(0.3)
        t0 = time.monotonic()
        info = client.send("kernel_info_request", {})
        reply = client.reply(info, 5.0)
        assert time.monotonic() - t0 < 2.0
        assert "kernel subshells" in reply["content"]["supported_features"]
        states = [m["content"]["execution_state"] for m in client.outputs(info)]
        assert states == ["busy", "idle"]
    finally:
        client.interrupt()
    assert client.reply(main, INTERRUPT_TIMEOUT)["content"]["ename"] == "InterruptException"


# ---- the acceptance case ----


def test_a_subshell_answers_while_the_main_cell_runs_and_each_keeps_its_output(
    client: Client,
) -> None:
    """Issue 47's acceptance case: while the main shell runs a loop that updates `x` and
    prints, `x` on a subshell gets its reply within 0.2 s, three times, a growing number; no
    line of the one is in the other's messages, and the replies and statuses carry their
    parent's subshell_id."""
    reply, _ = client.run("global x = 0")
    assert reply["content"]["status"] == "ok"
    sub = client.create()
    reply, _ = client.run('println("sub"); x', sub)  # its first request compiles the path
    assert reply["content"]["status"] == "ok"
    main = client.execute(COUNTING)
    values = []
    sub_outputs = []
    try:
        time.sleep(0.3)
        for _ in range(3):
            t0 = time.monotonic()
            msg_id = client.execute('println("sub"); x', sub)
            reply = client.reply(msg_id)
            took = time.monotonic() - t0
            assert reply["content"]["status"] == "ok", reply["content"]
            assert took < ANSWER_BOUND, f"the subshell answered in {took:.3f} s"
            assert reply["parent_header"]["subshell_id"] == sub
            outputs = client.outputs(msg_id)
            assert all(m["parent_header"]["subshell_id"] == sub for m in outputs)
            values.append(int(result(outputs) or "-1"))
            sub_outputs.extend(outputs)
            time.sleep(0.1)
    finally:
        client.interrupt()
    main_reply = client.reply(main, INTERRUPT_TIMEOUT)
    assert main_reply["content"]["ename"] == "InterruptException"
    assert "subshell_id" not in main_reply["parent_header"]
    assert values == sorted(values) and values[0] < values[-1], values
    assert streams(sub_outputs) == "sub\n" * 3
    main_lines = streams(client.outputs(main)).splitlines()
    assert main_lines and all(re.fullmatch(r"main \d+", line) for line in main_lines), main_lines


def test_a_subshell_counts_with_the_main_shell(client: Client) -> None:
    """One execution count for every shell, as ipykernel keeps it: a subshell's cell takes the
    next number, In and Out are shared, and a failing cell aborts its own shell's queue only."""
    sub = client.create()
    first, _ = client.run("1")
    second, outputs = client.run(f"Out[{first['content']['execution_count']}] + 1", sub)
    assert second["content"]["execution_count"] == first["content"]["execution_count"] + 1
    assert result(outputs) == "2"
    # It fails after a while: what it aborts is what waits behind it (ipykernel's abort takes
    # the requests received by then), and under load the second request was once sent later
    # than an instant error's reply was made.
    failing = client.execute('sleep(0.5); error("stop")', sub)
    aborted = client.execute("1", sub)
    assert client.reply(failing)["content"]["status"] == "error"
    assert client.reply(aborted)["content"]["status"] == "aborted"
    reply, _ = client.run("2")  # the main shell goes on
    assert reply["content"]["status"] == "ok"
    reply, _ = client.run("3", sub)  # and so does the subshell, after its queue
    assert reply["content"]["status"] == "ok"


# ---- failures ----


def test_deleting_a_subshell_ends_its_running_request(client: Client) -> None:
    """delete_subshell_request answers at once while a request runs on the subshell; that
    request ends with an error that says so, one queued behind it gets UnknownSubshellError,
    and a new subshell works."""
    sub = client.create()
    running = client.execute("sleep(60)", sub)
    time.sleep(0.3)
    queued = client.execute("1", sub)
    time.sleep(0.5)  # read by the kernel, waiting behind the running request: then deleted
    t0 = time.monotonic()
    assert client.delete(sub) == {"status": "ok"}
    assert time.monotonic() - t0 < 1.0
    ended = client.reply(running, 5.0)["content"]
    assert (ended["status"], ended["ename"]) == ("error", "SubshellDeleted")
    assert sub in ended["evalue"]
    assert client.reply(queued, 5.0)["content"]["ename"] == "UnknownSubshellError"
    assert sub not in client.listed()
    fresh = client.create()
    reply, outputs = client.run("1 + 1", fresh)
    assert reply["content"]["status"] == "ok" and result(outputs) == "2"


def test_an_interrupt_reaches_the_main_shell_only(client: Client) -> None:
    """As ipykernel does: interrupt_request stops the main cell; the subshell's request runs
    to its end and the subshell stays."""
    sub = client.create()
    main = client.execute("sleep(30)")
    time.sleep(0.3)
    slow = client.execute("sleep(1.5); 7", sub)
    time.sleep(0.3)
    client.interrupt()
    assert client.reply(main, INTERRUPT_TIMEOUT)["content"]["ename"] == "InterruptException"
    reply = client.reply(slow, 10.0)
    assert reply["content"]["status"] == "ok"
    assert result(client.outputs(slow)) == "7"
    assert sub in client.listed()


def test_a_burst_of_subshells_is_bounded_and_all_answer(client: Client, kernel: Kernel) -> None:
    """50 subshells, each running a cell at once: every one answers with its own value; the
    kernel starts no thread and opens no socket per subshell, and Julia runs at most
    beside.LIMIT at a time."""
    km, _ = kernel
    proc = psutil.Process(km.provisioner.pid)  # type: ignore[union-attr]
    threads, fds = proc.num_threads(), proc.num_fds()
    subs = [client.create() for _ in range(50)]
    sent = {client.execute(f"sleep(0.3); {k}", sub): k for k, sub in enumerate(subs)}
    for msg_id, k in sent.items():
        assert client.reply(msg_id, 30.0)["content"]["status"] == "ok"
        assert result(client.outputs(msg_id)) == str(k)
    assert proc.num_threads() <= threads
    assert proc.num_fds() <= fds + 4
    _, outputs = client.run("JKernel.BESIDE_WORKERS[]")
    assert int(result(outputs) or "99") <= beside.LIMIT
    for sub in subs:
        assert client.delete(sub) == {"status": "ok"}


def test_too_many_subshells_is_an_error_that_says_so(client: Client) -> None:
    """Beyond MAX_SUBSHELLS, create_subshell_request answers TooManySubshells."""
    made = [client.create() for _ in range(MAX_SUBSHELLS - len(client.listed()))]
    try:
        reply = client.control("create_subshell_request")["content"]
        assert reply["status"] == "error" and reply["ename"] == "TooManySubshells"
        assert str(MAX_SUBSHELLS) in reply["evalue"]
    finally:
        for sub in made:
            client.delete(sub)


# ---- comms over a subshell (JupyterLab's default for widgets) ----


def test_a_slider_moved_over_a_subshell_reaches_a_running_loop(client: Client) -> None:
    """examples/widget_slider.jl: while the main cell loops on `slider_value[]`, the
    frontend's update of the slider, sent on a subshell as JupyterLab sends it, runs the
    comm's on_msg at once and the loop sees the new value."""
    reply, outputs = client.run(f'include("{SLIDER_EXAMPLE}"); print(slider.comm.id)')
    assert reply["content"]["status"] == "ok", reply["content"]
    comm = streams(outputs)
    sub = client.create()
    loop = client.execute("while slider_value[] != 9; sleep(0.01); end; slider_value[]")
    time.sleep(0.3)
    update = {"comm_id": comm, "data": {"method": "update", "state": {"value": 9}}}
    moved = client.send("comm_msg", update, sub)
    outputs = client.outputs(moved)
    assert all(m["parent_header"].get("subshell_id") == sub for m in outputs)
    reply = client.reply(loop, 10.0)
    assert reply["content"]["status"] == "ok"
    assert result(client.outputs(loop)) == "9"


# ---- Julia's death, with the kernel still up ----


def test_julia_death_ends_every_pending_subshell_request(own_kernel: Kernel) -> None:
    """Julia dies while two subshells run a request: both reply JuliaDied within 2 s; the
    subshells stay, and the next request on one runs in a fresh Julia, saying so."""
    km, kc = own_kernel
    c = Client(kc)
    wait_until_warm(kc)
    a, b = c.create(), c.create()
    slow = [c.execute("sleep(30)", sub) for sub in (a, b)]
    time.sleep(0.5)
    crash = c.execute("ccall(:abort, Cvoid, ())")
    assert c.reply(crash, INTERRUPT_TIMEOUT)["content"]["ename"] == "JuliaDied"
    for msg_id in slow:  # within 2 s of the main cell's
        ended = c.reply(msg_id, 2.0)["content"]
        assert ended["ename"] == "JuliaDied" and "SIGABRT" in ended["evalue"], ended
    assert sorted(c.listed()) == sorted([a, b])
    again = c.execute("isdefined(Main, :JKernel)", a)
    assert c.reply(again, 60.0)["content"]["status"] == "ok"
    text = streams(c.outputs(again), "stderr")
    assert "fresh Julia session" in text, text
    assert julia_of(km)
