"""The kernel behind a Jupyter Kernel Gateway, and behind a Jupyter server that uses the gateway.

On a shared server users reach kernels through HTTP and websockets, never ZMQ: a Kernel Gateway
(``jupyter kernelgateway``) starts kernels from our kernelspec and exposes them as REST
resources with a websocket per kernel; a Jupyter server started with ``--gateway-url`` lists and
runs those kernels as if they were its own. These tests run both as real processes on loopback
ports, talk to them with a real websocket client, and check what a frontend sees.

Kernels started by the gateway are its children, not the test's: the module fixture records
every process under the servers after each test, and when the servers have stopped checks that
none of those processes (kernels, Julia) is left, killing and failing if one is.
"""

from __future__ import annotations

import contextlib
import datetime
import json
import os
import pprint
import secrets
import signal
import socket
import statistics
import subprocess
import sys
import time
import urllib.error
import urllib.request
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import nbformat
import psutil
import pytest
import websocket
from jupyter_client.blocking.client import BlockingKernelClient

from . import conftest
from .clients import collect, result_of
from .conftest import install_spec
from .test_notebooks import GOLDEN, code_cells, normalise
from .test_xvfb import wait_gone

pytestmark = pytest.mark.e2e

GATEWAY_KERNEL = "julia-supervised-gateway-test"
# A server process answers /api within ~2 s here; under load (two cores shared) much later.
SERVER_START_TIMEOUT = 60.0
# The kernel's first reply needs Julia started (~1-3 s, more under load).
KERNEL_START_TIMEOUT = 90.0
REPLY_TIMEOUT = 30.0
# A server stops its kernels on SIGTERM (each within jupyter_client's 5 s) before it exits.
SERVER_STOP_TIMEOUT = 20.0
# Round trips of a trivial cell, per path, for the gateway/direct ratio.
ROUND_TRIPS = int(os.environ.get("JKERNEL_GATEWAY_ROUND_TRIPS", "200"))


# ---- server processes ----


def free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@dataclass
class Server:
    """A Jupyter server process (a kernel gateway or jupyter_server) on a loopback port."""

    name: str
    proc: subprocess.Popen[bytes]
    port: int
    token: str
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def ws_url(self) -> str:
        return f"ws://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:]

    def api(self, method: str, path: str, body: Any = None) -> tuple[int, Any]:
        """One REST call; return the status and the decoded JSON body (None if empty)."""
        data = None if body is None else json.dumps(body).encode()
        req = urllib.request.Request(
            self.url + path,
            data=data,
            method=method,
            headers={"Authorization": f"token {self.token}", "Content-Type": "application/json"},
        )
        try:
            with urllib.request.urlopen(req, timeout=REPLY_TIMEOUT + 30) as resp:
                raw = resp.read()
                return resp.status, json.loads(raw) if raw else None
        except urllib.error.HTTPError as exc:
            raw = exc.read()
            return exc.code, raw.decode(errors="replace")

    def wait_ready(self) -> None:
        """Poll /api (bounded) until the server answers; fail with its log if it exits."""
        deadline = time.monotonic() + SERVER_START_TIMEOUT
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                pytest.fail(f"{self.name} exited with {self.proc.returncode}:\n{self.log()}")
            with contextlib.suppress(OSError):
                status, _ = self.api("GET", "/api")
                if status == 200:
                    return
            time.sleep(0.2)
        pytest.fail(
            f"{self.name} did not answer within {SERVER_START_TIMEOUT:.0f} s:\n{self.log()}"
        )

    def descendants(self) -> list[psutil.Process]:
        try:
            return psutil.Process(self.proc.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return []

    def stop(self) -> None:
        """SIGTERM (the server shuts its kernels down first), bounded wait, then SIGKILL."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(SERVER_STOP_TIMEOUT)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(REPLY_TIMEOUT)
            pytest.fail(f"{self.name} did not stop on SIGTERM:\n{self.log()}")


def start_server(
    name: str, argv: Callable[[int, str], list[str]], root: Path, env: dict[str, str]
) -> Server:
    """Start ``argv(port, token)`` on a free loopback port and wait until it answers."""
    port = free_port()
    token = secrets.token_hex(16)
    log_path = root / f"{name}.log"
    with open(log_path, "wb") as log:
        proc = subprocess.Popen(
            argv(port, token),
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            env=env,
            cwd=root,
        )
    server = Server(name, proc, port, token, log_path)
    try:
        server.wait_ready()
    except BaseException:
        server.stop()
        raise
    return server


def describe(procs: list[psutil.Process]) -> list[str]:
    out = []
    for p in procs:
        try:
            out.append(f"{p.pid} {' '.join(p.cmdline())[:120]}")
        except psutil.Error:
            out.append(str(p.pid))
    return out


@dataclass
class Servers:
    root: Path
    env: dict[str, str]
    gateway: Server
    seen: dict[int, psutil.Process] = field(default_factory=dict)
    front: Server | None = None

    def record(self) -> None:
        """Remember every process under the servers, for the leftover check at the end."""
        for server in (self.gateway, self.front):
            if server is not None:
                for p in server.descendants():
                    self.seen.setdefault(p.pid, p)

    def jupyter_server(self) -> Server:
        """A Jupyter server whose kernels come from the gateway (started once)."""
        if self.front is None:
            self.front = start_server(
                "jupyter-server",
                lambda port, token: [
                    sys.executable,
                    "-m",
                    "jupyter",
                    "server",
                    "--ServerApp.ip=127.0.0.1",
                    "--ServerApp.port_retries=0",
                    "--ServerApp.open_browser=False",
                    "--ServerApp.allow_root=True",  # CI runs as root; harmless otherwise
                    f"--gateway-url={self.gateway.url}",
                    f"--GatewayClient.auth_token={self.gateway.token}",
                    f"--GatewayClient.request_timeout={KERNEL_START_TIMEOUT}",
                    f"--ServerApp.port={port}",
                    f"--IdentityProvider.token={token}",
                ],
                self.root,
                self.env,
            )
            conftest.SHARED_KERNEL_PIDS.add(self.front.proc.pid)
        return self.front


@pytest.fixture(scope="module")
def servers(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Servers]:
    """A kernel gateway serving our kernelspec from a private prefix, on 127.0.0.1."""
    root = tmp_path_factory.mktemp("gateway")
    install_spec(root / "prefix", GATEWAY_KERNEL)
    env = {
        **os.environ,
        "JUPYTER_PATH": str(root / "prefix" / "share" / "jupyter"),
        "JUPYTER_DATA_DIR": str(root / "data"),
        "JUPYTER_RUNTIME_DIR": str(root / "runtime"),
        "JUPYTER_CONFIG_DIR": str(root / "config"),
        "IPYTHONDIR": str(root / "ipython"),
    }
    gateway = start_server(
        "gateway",
        lambda port, token: [
            sys.executable,
            "-m",
            "jupyter",
            "kernelgateway",
            "--KernelGatewayApp.ip=127.0.0.1",
            "--KernelGatewayApp.port_retries=0",
            f"--KernelGatewayApp.default_kernel_name={GATEWAY_KERNEL}",
            "--JupyterWebsocketPersonality.list_kernels=True",
            f"--KernelGatewayApp.port={port}",
            f"--KernelGatewayApp.auth_token={token}",
        ],
        root,
        env,
    )
    # Julia under the servers is theirs to stop (checked below), not a per-test leftover.
    conftest.SHARED_KERNEL_PIDS.add(gateway.proc.pid)
    found = Servers(root, env, gateway)
    try:
        yield found
    finally:
        found.record()
        if found.front is not None:
            conftest.SHARED_KERNEL_PIDS.discard(found.front.proc.pid)
            found.front.stop()
        gateway.stop()
        conftest.SHARED_KERNEL_PIDS.discard(gateway.proc.pid)
        left = wait_gone(list(found.seen.values()))
        for p in left:
            with contextlib.suppress(psutil.NoSuchProcess):
                p.kill()
        assert not left, f"processes left after the servers stopped: {describe(left)}"


@pytest.fixture(autouse=True)
def _record(servers: Servers) -> Iterator[None]:
    yield
    servers.record()


# ---- a websocket client, as a browser frontend is ----


@dataclass
class Cell:
    """What one execute_request produced, matched by parent msg_id."""

    reply: dict[str, Any]
    outputs: list[dict[str, Any]]
    statuses: list[str]

    def text(self, name: str = "stdout") -> str:
        return "".join(
            m["content"]["text"]
            for m in self.outputs
            if m["msg_type"] == "stream" and m["content"]["name"] == name
        )

    def result(self) -> str | None:
        for m in self.outputs:
            if m["msg_type"] == "execute_result":
                return str(m["content"]["data"]["text/plain"])
        return None


class WsKernel:
    """One kernel's websocket (``/api/kernels/<id>/channels``), messages matched by parent.

    A message for a request this client did not send is kept in ``stray``; a test fails if a
    reply or an output is among them (see assert_no_stray_output for what may come). Messages
    for ``foreign`` requests (another client's) are expected and ignored.
    """

    def __init__(self, server: Server, kernel_id: str) -> None:
        self.session = uuid.uuid4().hex
        self.kernel_id = kernel_id
        self.ws = websocket.create_connection(
            f"{server.ws_url}/api/kernels/{kernel_id}/channels?session_id={self.session}",
            header=[f"Authorization: token {server.token}"],
            timeout=REPLY_TIMEOUT,
        )
        self.stray: list[dict[str, Any]] = []
        self.foreign: set[str] = set()
        self.quick_ack = False  # acknowledge every segment at once (see the round-trip test)

    def close(self) -> None:
        self.ws.close()

    def send(
        self,
        channel: str,
        msg_type: str,
        content: dict[str, Any],
        parent: dict[str, Any] | None = None,
    ) -> str:
        msg_id = uuid.uuid4().hex
        header = {
            "msg_id": msg_id,
            "msg_type": msg_type,
            "username": "test",
            "session": self.session,
            "date": datetime.datetime.now(datetime.timezone.utc).isoformat(),
            "version": "5.3",
        }
        msg = {
            "header": header,
            "parent_header": parent or {},
            "metadata": {},
            "content": content,
            "channel": channel,
            "buffers": [],
        }
        self.ws.send(json.dumps(msg))
        return msg_id

    def receive(self, deadline: float) -> dict[str, Any]:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError
        self.ws.settimeout(remaining)
        try:
            frame = self.ws.recv()
        except websocket.WebSocketTimeoutException:
            raise TimeoutError from None
        if self.quick_ack:  # Linux clears it after each ACK it sends
            self.ws.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_QUICKACK, 1)
        assert isinstance(frame, str), "binary frames (buffers) are not expected here"
        msg: dict[str, Any] = json.loads(frame)
        return msg

    def execute(
        self,
        code: str,
        *,
        timeout: float = REPLY_TIMEOUT,
        answers: list[str] | None = None,
        on_output: Callable[[dict[str, Any]], None] | None = None,
    ) -> Cell:
        """Run a cell; answer its input requests from ``answers``; return what it produced.

        ``on_output(msg)`` sees each output message of the cell as it arrives.
        """
        msg_id = self.send(
            "shell",
            "execute_request",
            {
                "code": code,
                "silent": False,
                "store_history": True,
                "user_expressions": {},
                "allow_stdin": answers is not None,
                "stop_on_error": False,
            },
        )
        return self.collect(msg_id, timeout=timeout, answers=answers, on_output=on_output)

    def collect(
        self,
        msg_id: str,
        *,
        timeout: float = REPLY_TIMEOUT,
        answers: list[str] | None = None,
        on_output: Callable[[dict[str, Any]], None] | None = None,
    ) -> Cell:
        deadline = time.monotonic() + timeout
        pending = list(answers or [])
        reply: dict[str, Any] | None = None
        outputs: list[dict[str, Any]] = []
        statuses: list[str] = []
        idle = False
        while reply is None or not idle:
            try:
                msg = self.receive(deadline)
            except TimeoutError:
                pytest.fail(
                    f"no {'reply' if reply is None else 'idle'} for request {msg_id} within "
                    f"{timeout:.0f} s; outputs so far: {outputs}, statuses: {statuses}"
                )
            parent = msg["parent_header"].get("msg_id")
            kind = msg["msg_type"]
            if parent != msg_id:
                if parent not in self.foreign:
                    self.stray.append(msg)
                continue
            if msg["channel"] == "shell":
                assert reply is None, f"a second reply to one request: {msg}"
                reply = msg
            elif msg["channel"] == "stdin":
                assert kind == "input_request", msg
                assert pending, f"an input request nobody expected: {msg['content']}"
                self.send("stdin", "input_reply", {"value": pending.pop(0)}, parent=msg["header"])
            elif kind == "status":
                statuses.append(msg["content"]["execution_state"])
                idle = statuses[-1] == "idle"
            elif kind != "execute_input":
                outputs.append(msg)
                if on_output is not None:
                    on_output(msg)
        assert not pending, f"input answers never asked for: {pending}"
        return Cell(reply, outputs, statuses)

    def assert_no_stray_output(self) -> None:
        # Expected from elsewhere: statuses (the server's kernel_info nudges, restarts), the
        # shutdown_reply ipykernel broadcasts on IOPub when the server restarts the kernel, and
        # the iopub_welcome a new kernel's IOPub sends each subscriber.
        expected = ("status", "shutdown_reply", "iopub_welcome")
        bad = [m for m in self.stray if m["msg_type"] not in expected]
        assert not bad, f"replies or outputs for requests this client never sent: {bad}"


def start_kernel(server: Server, name: str = GATEWAY_KERNEL) -> str:
    status, model = server.api("POST", "/api/kernels", {"name": name})
    assert status == 201, f"starting a kernel through {server.name}: {status} {model}"
    return str(model["id"])


def kernel_tree(gateway: Server, kernel_id: str) -> list[psutil.Process]:
    """The kernel process the gateway started for ``kernel_id`` and its Julia."""
    for p in gateway.descendants():
        with contextlib.suppress(psutil.Error):
            if any(f"kernel-{kernel_id}.json" in a for a in p.cmdline()):
                return [p, *p.children(recursive=True)]
    pytest.fail(f"no kernel process for {kernel_id} under the gateway")


def julia_of(tree: list[psutil.Process]) -> list[psutil.Process]:
    found = []
    for p in tree:
        with contextlib.suppress(psutil.Error):
            if "julia" in p.name():
                found.append(p)
    return found


@pytest.fixture(scope="module")
def kernel(servers: Servers) -> Iterator[WsKernel]:
    """A kernel started through the gateway's REST API, with a websocket open to it."""
    kernel_id = start_kernel(servers.gateway)
    ws = WsKernel(servers.gateway, kernel_id)
    try:
        first = ws.execute("VERSION", timeout=KERNEL_START_TIMEOUT)
        assert first.reply["content"]["status"] == "ok", first.reply["content"]
        yield ws
    finally:
        ws.close()
        servers.gateway.api("DELETE", f"/api/kernels/{kernel_id}")


# ---- the kernel through the gateway ----


def test_the_gateway_offers_our_kernelspec(servers: Servers) -> None:
    status, specs = servers.gateway.api("GET", "/api/kernelspecs")
    assert status == 200
    assert specs["default"] == GATEWAY_KERNEL
    spec = specs["kernelspecs"][GATEWAY_KERNEL]["spec"]
    assert spec["language"] == "julia"
    assert spec["interrupt_mode"] == "message"


def test_live_output_arrives_while_the_cell_runs(kernel: WsKernel, tmp_path: Path) -> None:
    """The cell waits for a file that the test creates only once it has seen the cell's
    first line: output reaches the websocket while the cell runs, not at its end."""
    flag = tmp_path / "seen"

    def on_output(msg: dict[str, Any]) -> None:
        if msg["msg_type"] == "stream" and "waiting for the client" in msg["content"]["text"]:
            flag.touch()

    code = (
        'println("waiting for the client"); t0 = time()\n'
        f'while !isfile(raw"{flag}") && time() - t0 < 60; sleep(0.02); end\n'
        f'println("seen"); isfile(raw"{flag}")'
    )
    cell = kernel.execute(code, timeout=90, on_output=on_output)
    assert cell.reply["content"]["status"] == "ok"
    assert cell.result() == "true", "the first line did not arrive while the cell ran"
    assert cell.text() == "waiting for the client\nseen\n"
    assert cell.statuses == ["busy", "idle"]
    kernel.assert_no_stray_output()


def test_rich_display_result_and_error(kernel: WsKernel) -> None:
    """A display in the middle of a cell, a rich result, and an error, each as a frontend wants."""
    cell = kernel.execute('println("before"); display(HTML("<b>rich</b>")); println("after")')
    assert [m["msg_type"] for m in cell.outputs] == ["stream", "display_data", "stream"]
    assert cell.outputs[1]["content"]["data"]["text/html"] == "<b>rich</b>"
    cell = kernel.execute('HTML("<i>result</i>")')
    (result,) = cell.outputs
    assert result["msg_type"] == "execute_result"
    assert result["content"]["data"]["text/html"] == "<i>result</i>"
    cell = kernel.execute('error("boom")')
    assert cell.reply["content"]["status"] == "error"
    assert cell.reply["content"]["ename"] == "ErrorException"
    (err,) = cell.outputs
    assert err["msg_type"] == "error"
    assert err["content"]["evalue"] == "boom"
    kernel.assert_no_stray_output()


def test_readline_is_answered_over_the_websocket(kernel: WsKernel) -> None:
    cell = kernel.execute('name = readline(); "hello, " * name', answers=["gateway"])
    assert cell.reply["content"]["status"] == "ok"
    assert cell.result() == '"hello, gateway"'
    kernel.assert_no_stray_output()


def test_interrupt_through_the_gateway_keeps_state(servers: Servers, kernel: WsKernel) -> None:
    """POST /api/kernels/<id>/interrupt stops a sleeping cell; variables survive."""
    assert kernel.execute("kept = 42").result() == "42"
    answered: list[int] = []

    def interrupt(msg: dict[str, Any]) -> None:
        # Only once the cell printed: an interrupt before it starts would have nothing to stop.
        if msg["msg_type"] == "stream" and not answered:
            status, _ = servers.gateway.api("POST", f"/api/kernels/{kernel.kernel_id}/interrupt")
            answered.append(status)

    cell = kernel.execute('println("sleeping"); sleep(600)', on_output=interrupt)
    assert answered == [204]
    assert cell.reply["content"]["status"] == "error"
    assert cell.reply["content"]["ename"] == "InterruptException"
    assert kernel.execute("kept + 1").result() == "43"
    kernel.assert_no_stray_output()


def test_restart_and_shutdown_through_the_gateway(servers: Servers) -> None:
    """A restart gives a fresh Julia (the old one gone); DELETE leaves no kernel, no Julia."""
    gateway = servers.gateway
    kernel_id = start_kernel(gateway)
    ws = WsKernel(gateway, kernel_id)
    try:
        first = ws.execute("kept = 1", timeout=KERNEL_START_TIMEOUT)
        assert first.reply["content"]["status"] == "ok"
        before = kernel_tree(gateway, kernel_id)
        assert julia_of(before), "no Julia under the gateway's kernel"
        status, model = gateway.api("POST", f"/api/kernels/{kernel_id}/restart")
        assert status == 200, model
        assert not wait_gone(before), "the restarted kernel's old processes are still running"
        # The websocket survives the restart; the next cell waits for the new kernel.
        cell = ws.execute("isdefined(Main, :kept)", timeout=KERNEL_START_TIMEOUT)
        assert cell.result() == "false"
        after = kernel_tree(gateway, kernel_id)
        assert julia_of(after)
        assert {p.pid for p in after}.isdisjoint(p.pid for p in before)
        ws.assert_no_stray_output()
    finally:
        ws.close()
    status, _ = gateway.api("DELETE", f"/api/kernels/{kernel_id}")
    assert status == 204
    assert not wait_gone(after), f"left after DELETE: {describe(after)}"
    status, kernels = gateway.api("GET", "/api/kernels")
    assert kernel_id not in {k["id"] for k in kernels}


def _round_trip_ws(ws: WsKernel) -> float:
    t0 = time.perf_counter()
    cell = ws.execute("1")
    elapsed = time.perf_counter() - t0
    assert cell.result() == "1"
    return elapsed


def _round_trip_direct(kc: BlockingKernelClient, ws: WsKernel) -> float:
    t0 = time.perf_counter()
    msg_id = kc.execute("1")
    ws.foreign.add(msg_id)  # the websocket sees this cell's IOPub too
    reply, outputs = collect(kc, msg_id, REPLY_TIMEOUT)
    elapsed = time.perf_counter() - t0
    assert reply["content"]["status"] == "ok"
    assert result_of(outputs) == "1"
    return elapsed


def test_round_trip_through_the_gateway_against_a_direct_connection(
    servers: Servers, kernel: WsKernel
) -> None:
    """A trivial cell through the gateway's websocket and through ZMQ directly (the same
    kernel, via its connection file), interleaved; the ratio of medians is printed.

    A third series acknowledges every TCP segment from the websocket at once (TCP_QUICKACK):
    the server writes a cell's five messages as separate small segments with Nagle's
    algorithm on, so all but the first wait for the client's delayed ACK (~40 ms on Linux).
    The difference between the two websocket series is that wait, not the gateway's work.
    """
    connection_file = servers.root / "runtime" / f"kernel-{kernel.kernel_id}.json"
    assert connection_file.is_file(), f"no connection file at {connection_file}"
    kc = BlockingKernelClient()
    kc.load_connection_file(str(connection_file))
    kc.start_channels()
    try:
        kc.wait_for_ready(timeout=REPLY_TIMEOUT)
        ws_times: list[float] = []
        quick_times: list[float] = []
        direct_times: list[float] = []
        for _ in range(3):  # warm both paths
            _round_trip_ws(kernel)
            _round_trip_direct(kc, kernel)
        for i in range(ROUND_TRIPS):
            if i % 2:
                ws_times.append(_round_trip_ws(kernel))
                direct_times.append(_round_trip_direct(kc, kernel))
            else:
                direct_times.append(_round_trip_direct(kc, kernel))
                ws_times.append(_round_trip_ws(kernel))
            if hasattr(socket, "TCP_QUICKACK"):
                kernel.quick_ack = True
                try:
                    quick_times.append(_round_trip_ws(kernel))
                finally:
                    kernel.quick_ack = False
    finally:
        kc.stop_channels()
    kernel.assert_no_stray_output()
    ws_median = statistics.median(ws_times)
    direct_median = statistics.median(direct_times)
    quick = (
        f"; with TCP_QUICKACK on the client {statistics.median(quick_times) * 1000:.2f} ms, "
        f"ratio {statistics.median(quick_times) / direct_median:.2f}"
        if quick_times
        else ""
    )
    print(
        f"\n[gateway] trivial cell round trip, median of {ROUND_TRIPS}: gateway websocket "
        f"{ws_median * 1000:.2f} ms, direct ZMQ {direct_median * 1000:.2f} ms, ratio "
        f"{ws_median / direct_median:.2f}{quick}"
    )


# ---- a Jupyter server whose kernels come from the gateway ----


class NotebookRun:
    """Build a cell's outputs from its messages as nbclient does (clear_output, displays)."""

    def __init__(self) -> None:
        self.by_display_id: dict[str, list[dict[str, Any]]] = {}

    def outputs(self, cell: Cell) -> list[nbformat.NotebookNode]:
        outs: list[nbformat.NotebookNode] = []
        clear_pending = False
        for msg in cell.outputs:
            kind, content = msg["msg_type"], msg["content"]
            if kind == "clear_output":
                if content.get("wait"):
                    clear_pending = True
                else:
                    outs.clear()
                continue
            if kind == "update_display_data":
                for out in self.by_display_id.get(content["transient"]["display_id"], []):
                    out["data"] = content["data"]
                    out["metadata"] = content["metadata"]
                continue
            if clear_pending:
                outs.clear()
                clear_pending = False
            out = nbformat.v4.output_from_msg(msg)
            display_id = content.get("transient", {}).get("display_id")
            if display_id:
                self.by_display_id.setdefault(display_id, []).append(out)
            outs.append(out)
        return outs


def test_the_gateway_kernel_seen_through_a_jupyter_server(servers: Servers) -> None:
    """``jupyter server --gateway-url``: its kernelspecs and kernels are the gateway's, the
    kernel it starts runs under the gateway, and the golden notebooks run through it with the
    outputs nbconvert gives."""
    front = servers.jupyter_server()
    status, specs = front.api("GET", "/api/kernelspecs")
    assert status == 200
    assert GATEWAY_KERNEL in specs["kernelspecs"]
    for path in GOLDEN:
        nb = nbformat.read(path, as_version=4)
        kernel_id = start_kernel(front, GATEWAY_KERNEL)
        # one kernel, two servers: the same id in both listings, the process under the gateway
        status, through_front = front.api("GET", "/api/kernels")
        assert status == 200 and kernel_id in {k["id"] for k in through_front}
        status, at_gateway = servers.gateway.api("GET", "/api/kernels")
        assert status == 200 and kernel_id in {k["id"] for k in at_gateway}
        tree = kernel_tree(servers.gateway, kernel_id)
        assert not any(p.pid in {d.pid for d in tree} for p in front.descendants())
        ws = WsKernel(front, kernel_id)
        run = NotebookRun()
        got = []
        try:
            for i, cell in enumerate(code_cells(nb)):
                done = ws.execute(cell.source, timeout=KERNEL_START_TIMEOUT if i == 0 else 60)
                got.append(run.outputs(done))
            ws.assert_no_stray_output()
        finally:
            ws.close()
        status, _ = front.api("DELETE", f"/api/kernels/{kernel_id}")
        assert status == 204
        assert not wait_gone(tree), f"left after DELETE through the server: {describe(tree)}"
        differences = [
            f"cell {want.id!r}: expected {pprint.pformat(normalise(want.outputs))}\n"
            f"  got {pprint.pformat(normalise(have))}"
            for want, have in zip(code_cells(nb), got, strict=True)
            if normalise(want.outputs) != normalise(have)
        ]
        assert not differences, f"{path.name} through the servers:\n" + "\n".join(differences)
