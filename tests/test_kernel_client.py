"""The installed kernel seen through jupyter_client: what a notebook or console gets."""

from __future__ import annotations

import json
import os
import signal
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
import zmq
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from .clients import (
    INTERRUPT_TIMEOUT,
    REPLY_TIMEOUT,
    collect,
    drain,
    execute,
    reply_to,
    result_of,
    text_of,
    wait_until_warm,
)
from .conftest import (
    KERNEL_NAME,
    START_TIMEOUT,
    Kernel,
    StartSignal,
    julia_descendants,
    shared_kernel,
    stop_kernel,
)

pytestmark = pytest.mark.e2e


@pytest.fixture(scope="module")
def shared(kernel_env: dict[str, str]) -> Iterator[Kernel]:
    """One kernel for the tests that do not end it, warmed up as an interactive one is."""
    with shared_kernel() as kernel:
        wait_until_warm(kernel[1])
        yield kernel


# ---- interrupts through jupyter_client ----

# Each cell signals `{started}` once it runs the code to interrupt (see StartSignal), inside a
# function where compiling would otherwise be mistaken for computing.
INTERRUPT_CASES = {
    "allocating loop": "function alloc_loop(); {started}; while true; global junk = [1, 2, 3]; "
    "end; end; alloc_loop()",
    "sleep": "{started}; sleep(1000)",
    "wait on a Condition": "{started}; wait(Condition())",
    "printing loop": 'function print_loop(); {started}; while true; println("spam spam spam"); '
    "end; end; print_loop()",
    "blocking ccall": "{started}; ccall(:sleep, Cuint, (Cuint,), 1000)",
    "finished task then sleep": "t = @async 1 + 1; {started}; sleep(1000)",
    "loop without safepoints": "function spin(); {started}; x = 0.0; while true; x += 1.0; end; "
    "end; spin()",
}
FORCED_NOTICE = "[jutul-jkernel] The interrupt had to be forced"
CUT_SHORT_NOTICE = "[jutul-jkernel] Output cut short:"


@pytest.mark.parametrize("case", list(INTERRUPT_CASES))
def test_interrupt_request_keeps_state(
    shared: tuple[KernelManager, BlockingKernelClient], start_signal: StartSignal, case: str
) -> None:
    """interrupt_request ends the cell with InterruptException; earlier variables survive in
    the same Julia. Only the loop without safepoints says it was forced; none is restarted."""
    km, kc = shared
    drain(kc)
    execute(kc, "keep = 42")
    msg_id = kc.execute(INTERRUPT_CASES[case].format(started=start_signal.julia))
    start_signal.wait(REPLY_TIMEOUT)
    t0 = time.perf_counter()
    km.interrupt_kernel()
    reply, outputs = collect(kc, msg_id, INTERRUPT_TIMEOUT)
    latency = time.perf_counter() - t0
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "InterruptException"
    assert [m for m in outputs if m["msg_type"] == "error"]
    stderr = text_of(outputs, "stderr").splitlines()
    notices = [line for line in stderr if "[jutul-jkernel]" in line]
    if case == "printing loop":
        # What was in the pipes beyond 8 KiB when the interrupt came is dropped and said: with
        # the reader behind (a fresh clone's make test beside make mutants), 36 KB once.
        notices = [line for line in notices if not line.startswith(CUT_SHORT_NOTICE)]
    if case == "loop without safepoints":
        assert len(notices) == 1 and notices[0].startswith(FORCED_NOTICE), notices
    else:
        assert notices == []
    _, outputs = execute(kc, "isdefined(Main, :keep) ? keep : :lost")
    assert result_of(outputs) == "42"
    print(f"\n[jupyter interrupt] {case}: {latency * 1000:.0f} ms to reply, state kept")


def test_signal_mode_interrupt_also_works(
    own_kernel: tuple[KernelManager, BlockingKernelClient], start_signal: StartSignal
) -> None:
    """A client that SIGINTs the kernel process (signal mode) interrupts the cell too."""
    km, kc = own_kernel
    execute(kc, "keep = 1")
    msg_id = kc.execute(f"{start_signal.julia}; sleep(1000)")
    start_signal.wait(REPLY_TIMEOUT)
    pid = km.provisioner.pid if km.provisioner else None
    assert pid is not None
    os.kill(pid, signal.SIGINT)
    reply, _ = collect(kc, msg_id, INTERRUPT_TIMEOUT)
    assert reply["content"]["ename"] == "InterruptException"
    assert km.is_alive()
    assert result_of(execute(kc, "keep")[1]) == "1"


def test_forced_interrupt_tells_the_user(
    shared: tuple[KernelManager, BlockingKernelClient], start_signal: StartSignal
) -> None:
    """When only a forced throw stops a cell, a stderr notice says so and state is kept: a
    restart would be a different promise (and a different notice)."""
    km, kc = shared
    drain(kc)
    execute(kc, "keep = 7")
    code = INTERRUPT_CASES["loop without safepoints"].format(started=start_signal.julia)
    msg_id = kc.execute(code)
    start_signal.wait(REPLY_TIMEOUT)
    km.interrupt_kernel()
    reply, outputs = collect(kc, msg_id, INTERRUPT_TIMEOUT)
    assert reply["content"]["ename"] == "InterruptException"
    stderr = text_of(outputs, "stderr")
    assert FORCED_NOTICE in stderr, stderr
    assert "restarted" not in stderr
    assert result_of(execute(kc, "keep")[1]) == "7"


# ---- live output ----


def test_output_is_live(shared: tuple[KernelManager, BlockingKernelClient], tmp_path: Path) -> None:
    """Output printed by a running cell reaches the client before the cell ends: the cell
    waits (bounded) for a file that the test creates only once the first line arrived."""
    _, kc = shared
    drain(kc)
    go = tmp_path / "go"
    msg_id = kc.execute(
        f'println("first"); for _ in 1:6000; isfile("{go}") && break; sleep(0.01); end; '
        'println("second")'
    )
    deadline = time.monotonic() + REPLY_TIMEOUT
    seen = ""
    while "first" not in seen:
        msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") == msg_id:
            assert msg["msg_type"] != "execute_result" and not (
                msg["msg_type"] == "status" and msg["content"]["execution_state"] == "idle"
            ), "the cell ended before its first line arrived"
            if msg["msg_type"] == "stream":
                seen += msg["content"]["text"]
    go.touch()
    reply, outputs = collect(kc, msg_id)
    assert reply["content"]["status"] == "ok"
    assert seen + text_of(outputs) == "first\nsecond\n"


def test_background_task_output_and_display_reach_the_last_cell(
    shared: tuple[KernelManager, BlockingKernelClient], tmp_path: Path
) -> None:
    """A task that outlives its cell prints and displays under that cell (decided in issue
    14: displays follow println rather than vanish), once the cell has replied."""
    _, kc = shared
    drain(kc)
    go = tmp_path / "go"
    reply, outputs = execute(
        kc,
        f'bg = @async begin; for _ in 1:6000; isfile("{go}") && break; sleep(0.01); end; '
        'println("late print"); display("text/html", HTML("<i>late display</i>")); '
        'println("late end"); end; nothing',
    )
    msg_id = reply["parent_header"]["msg_id"]
    assert reply["content"]["status"] == "ok"
    assert outputs == []
    go.touch()
    deadline = time.monotonic() + REPLY_TIMEOUT
    late: list[dict[str, Any]] = []
    while "late end\n" not in text_of(late):  # println may arrive as text, then its newline
        msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        if msg["parent_header"].get("msg_id") == msg_id:
            late.append(msg)
    assert text_of(late) == "late print\nlate end\n"
    shown = [m["content"]["data"] for m in late if m["msg_type"] == "display_data"]
    assert len(shown) == 1 and shown[0]["text/html"] == "<i>late display</i>", late
    assert result_of(execute(kc, "istaskdone(bg)")[1]) == "true"


# ---- cells ----


def test_prints_display_and_result_arrive_in_order(
    shared: tuple[KernelManager, BlockingKernelClient],
) -> None:
    """Within a cell: stream, display_data, stream, then execute_result, as written."""
    _, kc = shared
    drain(kc)
    code = (
        'println("first"); display("text/html", HTML("<i>shown</i>")); '
        'println(stderr, "second"); 42'
    )
    reply, outputs = execute(kc, code)
    assert reply["content"]["status"] == "ok"
    kinds = [(m["msg_type"], m["content"].get("name")) for m in outputs]
    assert kinds == [
        ("stream", "stdout"),
        ("display_data", None),
        ("stream", "stderr"),
        ("execute_result", None),
    ]
    assert outputs[1]["content"]["data"]["text/html"] == "<i>shown</i>"
    assert result_of(outputs) == "42"


def test_update_display_and_clear_output(
    shared: tuple[KernelManager, BlockingKernelClient],
) -> None:
    """JKernel.display with an id, update_display and clear_output map to their messages."""
    _, kc = shared
    drain(kc)
    code = (
        'id = JKernel.display("one"; display_id=true); '
        'JKernel.update_display("two"; display_id=id); JKernel.clear_output(true)'
    )
    reply, outputs = execute(kc, code)
    assert reply["content"]["status"] == "ok"
    types = [m["msg_type"] for m in outputs]
    assert types[:3] == ["display_data", "update_display_data", "clear_output"]
    first, update = outputs[0]["content"], outputs[1]["content"]
    assert first["transient"]["display_id"] == update["transient"]["display_id"]
    assert update["data"]["text/plain"] == '"two"'
    assert outputs[2]["content"]["wait"] is True


def test_stop_on_error_aborts_queued_cells(
    shared: tuple[KernelManager, BlockingKernelClient],
) -> None:
    """An error aborts the cells already queued behind it; later ones run again."""
    _, kc = shared
    drain(kc)
    first = kc.execute('sleep(0.3); error("stop here")')
    second = kc.execute("aborted_flag = true")
    r1, _ = collect(kc, first)
    r2, _ = collect(kc, second)
    assert r1["content"]["status"] == "error"
    assert r2["content"]["status"] == "aborted"
    # ipykernel aborts every request until its stop-on-error window closes; it says when.
    deadline = time.monotonic() + REPLY_TIMEOUT
    while reply_to(kc, kc.kernel_info())["content"].get("status") == "aborted":
        assert time.monotonic() < deadline, "ipykernel kept aborting requests"
    _, outputs = execute(kc, "isdefined(Main, :aborted_flag)")
    assert result_of(outputs) == "false"
    third = kc.execute('error("no stop")', stop_on_error=False)
    fourth = kc.execute("ran_anyway = true")
    collect(kc, third)
    assert collect(kc, fourth)[0]["content"]["status"] == "ok"


def test_silent_cell_publishes_nothing(shared: tuple[KernelManager, BlockingKernelClient]) -> None:
    """silent=True runs the code but publishes no output and no result."""
    _, kc = shared
    drain(kc)
    reply, outputs = execute(kc, 'println("hidden"); silent_value = 5', silent=True)
    assert reply["content"]["status"] == "ok"
    assert outputs == []
    assert result_of(execute(kc, "silent_value")[1]) == "5"


def test_user_expressions(shared: tuple[KernelManager, BlockingKernelClient]) -> None:
    """user_expressions are evaluated after the cell and returned as MIME bundles."""
    _, kc = shared
    reply, _ = execute(kc, "ux = 20", user_expressions={"double": "2ux", "bad": "nope_"})
    exprs = reply["content"]["user_expressions"]
    assert exprs["double"]["status"] == "ok"
    assert exprs["double"]["data"]["text/plain"] == "40"
    assert exprs["bad"]["status"] == "error"
    assert exprs["bad"]["ename"] == "UndefVarError"


def test_execution_count_and_history(shared: tuple[KernelManager, BlockingKernelClient]) -> None:
    """execution_count increments per non-silent cell; history returns the cells."""
    _, kc = shared
    r1, _ = execute(kc, "hist_a = 1")
    r2, _ = execute(kc, "hist_b = 2")
    assert r2["content"]["execution_count"] == r1["content"]["execution_count"] + 1
    msg_id = kc.history(hist_access_type="tail", n=2, output=False, raw=True)
    reply = reply_to(kc, msg_id)
    assert [h[2] for h in reply["content"]["history"]] == ["hist_a = 1", "hist_b = 2"]


def test_a_request_that_stores_no_history_takes_no_count(
    shared: tuple[KernelManager, BlockingKernelClient],
) -> None:
    """`store_history: false` (variable inspectors, tools) takes no execution count and leaves
    In, Out and ans as they were; its output and result still reach the client."""
    _, kc = shared
    r1, _ = execute(kc, "nohist_x = 41")
    n = r1["content"]["execution_count"]
    drain(kc)
    msg_id = kc.execute('println("asked"); nohist_x + 1', store_history=False)
    reply, outputs = collect(kc, msg_id)
    assert reply["content"]["status"] == "ok"
    assert reply["content"]["execution_count"] == n, "a request without history took a count"
    assert text_of(outputs) == "asked\n" and result_of(outputs) == "42"
    r2, outputs = execute(
        kc, f"(ans, haskey(In, {n + 1}), maximum(keys(In)), haskey(Out, {n + 1}))"
    )
    assert r2["content"]["execution_count"] == n + 1
    assert result_of(outputs) == f"(41, true, {n + 1}, false)"
    msg_id = kc.history(hist_access_type="tail", n=2, output=False, raw=True)
    history = reply_to(kc, msg_id)["content"]["history"]
    assert [h[1] for h in history] == [n, n + 1], history


def test_stdin_round_trip(shared: tuple[KernelManager, BlockingKernelClient]) -> None:
    """readline() sends input_request when the frontend allows stdin and returns the answer."""
    _, kc = shared
    drain(kc)
    msg_id = kc.execute(
        'print("Your name: "); name = readline(); "hello " * name', allow_stdin=True
    )
    request = kc.get_stdin_msg(timeout=REPLY_TIMEOUT)
    assert request["msg_type"] == "input_request"
    kc.input("Ada")
    reply, outputs = collect(kc, msg_id)
    assert reply["content"]["status"] == "ok"
    assert text_of(outputs) == "Your name: "
    assert result_of(outputs) == '"hello Ada"'


def test_stdin_refused_is_a_clear_error(shared: tuple[KernelManager, BlockingKernelClient]) -> None:
    """Without allow_stdin, readline() fails with an error that says stdin is unavailable."""
    _, kc = shared
    reply, _ = execute(kc, "readline()", allow_stdin=False)
    assert reply["content"]["status"] == "error"
    assert "stdin is not available" in reply["content"]["evalue"]


def test_complete_inspect_is_complete(shared: tuple[KernelManager, BlockingKernelClient]) -> None:
    """complete / inspect / is_complete replies come from Julia."""
    _, kc = shared
    reply = reply_to(kc, kc.complete("printl", 6))["content"]
    assert "println" in reply["matches"]
    reply = reply_to(kc, kc.inspect("sum", 3))["content"]
    assert reply["found"] and "sum" in reply["data"]["text/plain"]
    reply = reply_to(kc, kc.is_complete("function f(x)"))["content"]
    assert reply == {"status": "incomplete", "indent": "    "}


def test_kernel_info(shared: tuple[KernelManager, BlockingKernelClient]) -> None:
    """language_info names the running Julia; subshells are advertised, the debugger not."""
    _, kc = shared
    reply = reply_to(kc, kc.kernel_info())["content"]
    info = reply["language_info"]
    assert info["name"] == "julia"
    assert info["version"].count(".") == 2
    assert info["mimetype"] == "application/julia"
    assert info["file_extension"] == ".jl"
    assert "debugger" not in reply["supported_features"]
    assert "kernel subshells" in reply["supported_features"]
    assert info["version"] in reply["banner"]


# The installed kernel with its start() held until a request waits on its shell socket, as one
# does when a client connects and asks at once while the kernel process still sets up.
_LATE_START = """
import runpy, sys, time

import zmq
from jutul_jkernel.jupyter import kernel

start = kernel.JuliaKernel.start


def late_start(self):
    deadline = time.monotonic() + 60
    while not self.shell_stream.socket.get(zmq.EVENTS) & zmq.POLLIN:
        if time.monotonic() > deadline:
            sys.exit("no request came")
        time.sleep(0.01)
    start(self)


kernel.JuliaKernel.start = late_start
sys.argv = ["jutul_jkernel", *sys.argv[1:]]
runpy.run_module("jutul_jkernel", run_name="__main__", alter_sys=True)
"""


def test_a_kernel_info_request_there_before_the_start_waits_for_julia(
    kernel_env: dict[str, str], tmp_path: Path
) -> None:
    """A client that connects and asks at once (nbclient, JupyterLab) can have its
    kernel_info_request waiting on the shell socket before the kernel's start(): the reply
    still waits for Julia and names its version, as a later one does (it said "unknown" while
    Julia's start became a task only a turn of the loop after such a request was handled)."""
    kernels = Path(kernel_env["JUPYTER_PATH"]) / "kernels"
    spec = json.loads((kernels / KERNEL_NAME / "kernel.json").read_text())
    wrapper = tmp_path / "late_start.py"
    wrapper.write_text(_LATE_START)
    python, _, _, *rest = spec["argv"]  # python -m jutul_jkernel -f {connection_file}
    spec["argv"] = [python, str(wrapper), *rest]
    name = f"{KERNEL_NAME}-late-start"
    (kernels / name).mkdir(exist_ok=True)
    (kernels / name / "kernel.json").write_text(json.dumps(spec))
    km = KernelManager(kernel_name=name)
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    try:
        reply = reply_to(kc, kc.kernel_info(), START_TIMEOUT)["content"]
        version = reply["language_info"]["version"]
        assert version.count(".") == 2, reply["banner"]
        assert version in reply["banner"]
    finally:
        stop_kernel(km, kc)


# ---- crashes, shutdown, restart ----


def test_crash_fails_the_cell_and_the_next_cell_runs_fresh(
    own_kernel: tuple[KernelManager, BlockingKernelClient],
) -> None:
    """Julia aborting fails its cell with the reason; the kernel stays up and says state is gone."""
    km, kc = own_kernel
    execute(kc, "keep = 1")
    reply, outputs = execute(kc, "ccall(:abort, Cvoid, ())")
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "JuliaDied"
    assert "SIGABRT" in reply["content"]["evalue"]
    assert km.is_alive()
    reply, outputs = execute(kc, "isdefined(Main, :keep)")
    assert result_of(outputs) == "false"
    assert "fresh Julia" in text_of(outputs, "stderr")


def _kernel_and_julia(km: KernelManager) -> tuple[int, list[psutil.Process]]:
    pid = km.provisioner.pid if km.provisioner else None
    assert pid is not None
    julias = [p for p in julia_descendants() if pid in {a.pid for a in p.parents()}]
    assert julias, "the kernel has no Julia running"
    return pid, julias


def _gone(procs: list[psutil.Process], within: float) -> bool:
    _, alive = psutil.wait_procs(procs, timeout=within)
    return not alive


@pytest.mark.parametrize("restart", [False, True])
def test_shutdown_request_stops_julia_in_time(
    own_kernel: tuple[KernelManager, BlockingKernelClient],
    start_signal: StartSignal,
    restart: bool,
) -> None:
    """shutdown_request ends kernel and Julia within jupyter_client's 2.5 s, even mid-cell."""
    km, kc = own_kernel
    _, julias = _kernel_and_julia(km)
    kc.execute(INTERRUPT_CASES["loop without safepoints"].format(started=start_signal.julia))
    start_signal.wait(REPLY_TIMEOUT)
    t0 = time.perf_counter()
    kc.shutdown(restart=restart)
    assert _gone(julias, 2.5)
    elapsed = time.perf_counter() - t0
    deadline = time.monotonic() + 5
    while km.is_alive() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not km.is_alive()
    print(f"\n[shutdown restart={restart}] Julia gone after {elapsed:.2f} s")


def test_restart_through_the_manager_gives_fresh_state(
    own_kernel: tuple[KernelManager, BlockingKernelClient],
) -> None:
    """KernelManager.restart_kernel: a new kernel and Julia, no state, no orphan."""
    km, kc = own_kernel
    execute(kc, "keep = 1")
    _, julias = _kernel_and_julia(km)
    km.restart_kernel()
    kc.wait_for_ready(timeout=START_TIMEOUT)
    assert _gone(julias, 5)
    drain(kc)
    assert result_of(execute(kc, "isdefined(Main, :keep)")[1]) == "false"


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_killed_kernel_leaves_no_julia(
    own_kernel: tuple[KernelManager, BlockingKernelClient],
    start_signal: StartSignal,
    sig: signal.Signals,
) -> None:
    """SIGTERM or SIGKILL to the kernel mid-cell: its Julia is gone within 2 s."""
    km, kc = own_kernel
    pid, julias = _kernel_and_julia(km)
    kc.execute(INTERRUPT_CASES["loop without safepoints"].format(started=start_signal.julia))
    start_signal.wait(REPLY_TIMEOUT)
    os.kill(pid, sig)
    assert _gone(julias, 2.0)
    km.shutdown_kernel(now=True)


def test_unsupported_control_request_gets_an_error_reply(
    shared: tuple[KernelManager, BlockingKernelClient],
) -> None:
    """debug_request (no debugger here) is answered with status error, not silence."""
    _, kc = shared
    msg = kc.session.msg("debug_request", {"seq": 1, "type": "request", "command": "initialize"})
    kc.control_channel.send(msg)
    reply = kc.get_control_msg(timeout=REPLY_TIMEOUT)
    assert reply["parent_header"]["msg_id"] == msg["header"]["msg_id"]
    assert reply["msg_type"] == "debug_reply"
    assert reply["content"]["status"] == "error"


def test_a_request_to_an_unknown_subshell_is_answered_with_its_error(
    shared: tuple[KernelManager, BlockingKernelClient],
) -> None:
    """A shell request whose header names a subshell the kernel does not have gets busy, an
    error reply naming the id (ipykernel's UnknownSubshellError) and idle, and the kernel goes
    on: the main loop reads the shell socket itself (jupyter/app.py), so this is its answer."""
    _, kc = shared
    drain(kc)
    msg = kc.session.msg("execute_request", {"code": "1+1", "silent": False})
    msg["header"]["subshell_id"] = "no-such-subshell"
    kc.shell_channel.send(msg)
    msg_id = msg["header"]["msg_id"]
    reply, outputs = collect(kc, msg_id)
    assert reply["msg_type"] == "execute_reply"
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "UnknownSubshellError"
    assert "no-such-subshell" in reply["content"]["evalue"]
    assert outputs == [], outputs
    _, after = execute(kc, "1+1")
    assert result_of(after) == "2"


def test_a_new_iopub_subscriber_is_welcomed(
    shared: tuple[KernelManager, BlockingKernelClient],
) -> None:
    """A client that subscribes to IOPub gets iopub_welcome (JEP 65), as from ipykernel's IOPub
    thread: it then knows that what the kernel publishes reaches it. The kernel's IOPub socket
    is run by its main loop (jupyter/sockets.py), which sends the welcome. (XPUB passes on only
    the first subscription to a topic, so this one subscribes to a topic of its own.)"""
    km, kc = shared
    sub = km.context.socket(zmq.SUB)
    try:
        sub.connect(f"{km.transport}://{km.ip}:{km.iopub_port}")
        topic = b"kernel.welcome-test"
        sub.setsockopt(zmq.SUBSCRIBE, topic)
        assert sub.poll(int(REPLY_TIMEOUT * 1000)), "no iopub_welcome within the timeout"
        frames = sub.recv_multipart()
        assert frames[0] == topic
        _, parts = kc.session.feed_identities(frames)
        welcome = kc.session.deserialize(parts)
        assert welcome["msg_type"] == "iopub_welcome"
        assert welcome["content"]["subscription"] == topic.decode()
    finally:
        sub.close(linger=0)


def test_kernel_log_has_no_tracebacks(kernel_env: dict[str, str], tmp_path: Path) -> None:
    """A short session (cells, an error, an interrupt, shutdown) logs no kernel exception."""
    log = tmp_path / "kernel.log"
    km = KernelManager(kernel_name=KERNEL_NAME)
    with open(log, "w") as f:
        km.start_kernel(stdout=f, stderr=f)
        kc = km.client()
        kc.start_channels()
        try:
            kc.wait_for_ready(timeout=START_TIMEOUT)
            execute(kc, "1 + 1")
            execute(kc, 'error("x")')
            started = StartSignal(tmp_path)
            msg_id = kc.execute(f"{started.julia}; sleep(1000)")
            started.wait(REPLY_TIMEOUT)
            started.close()
            km.interrupt_kernel()
            collect(kc, msg_id, INTERRUPT_TIMEOUT)
        finally:
            stop_kernel(km, kc)
    text = log.read_text()
    assert "Traceback" not in text, text
    assert "Exception in" not in text, text


def test_debug_logs_each_message(kernel_env: dict[str, str], tmp_path: Path) -> None:
    """With --debug the kernel logs each message it handles (ipykernel's DEBUG lines), and
    without it none: the app's logger follows its handlers' level (jupyter/app.py)."""
    logs = {}
    for args in ([], ["--debug"]):
        log = tmp_path / f"kernel{len(args)}.log"
        km = KernelManager(kernel_name=KERNEL_NAME)
        with open(log, "w") as f:
            km.start_kernel(stdout=f, stderr=f, extra_arguments=args)
            kc = km.client()
            kc.start_channels()
            try:
                kc.wait_for_ready(timeout=START_TIMEOUT)
                reply, _ = execute(kc, "1 + 1")
                assert reply["content"]["status"] == "ok", reply
            finally:
                stop_kernel(km, kc)
        logs[bool(args)] = log.read_text()
    assert "*** MESSAGE TYPE:execute_request***" in logs[True], logs[True][-2000:]
    assert "MESSAGE TYPE" not in logs[False], logs[False][-2000:]


def test_kernel_info_on_the_control_channel(
    shared: tuple[KernelManager, BlockingKernelClient],
) -> None:
    """kernel_info_request is answered on the control channel too (JupyterLab asks there)."""
    _, kc = shared
    msg = kc.session.msg("kernel_info_request")
    kc.control_channel.send(msg)
    reply = kc.get_control_msg(timeout=REPLY_TIMEOUT)
    assert reply["parent_header"]["msg_id"] == msg["header"]["msg_id"]
    assert reply["content"]["language_info"]["name"] == "julia"
