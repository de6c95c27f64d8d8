"""The MCP server (``python -m jutul_jkernel.mcp``) as an MCP client sees it: real Julia, and the
official SDK's own stdio client (``mcp.client.stdio``), the way Claude Code starts and drives it.

The client runs in a thread of its own with its own event loop, so the tests are plain
functions whose every wait is bounded (``Future.result(timeout)``). One server serves the tests
that leave it running; a test that needs Julia to crash or run alone takes a session of its
own in it, and the shutdown tests start their own server. Interrupt and cancel tests act only
once the call provably runs (it creates a file first), so no test depends on timing.
"""

from __future__ import annotations

import asyncio
import base64
import concurrent.futures
import json
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest

from .conftest import REAP_GRACE, SHARED_KERNEL_PIDS

ROOT = Path(__file__).resolve().parent.parent
START_TIMEOUT = 90.0  # the server and a Julia; ~2 s here when warm
STEP_TIMEOUT = 60.0  # one call, interrupts included (the escalation ends within ~6 s)
# How long a timed-out call may take past its timeout: the escalation of an INT frame or one
# SIGINT takes milliseconds; a forced interrupt a few seconds.
ESCALATION = 10.0
# A 1x1 PNG: what a plotting package's show(io, MIME"image/png", fig) writes, only smaller.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)
# The first interrupt of a fresh Julia compiles the server's interrupt path (1-2.5 s here under
# load); a forced interrupt meanwhile can crash Julia 1.5 inside LLVM. Tests about the MCP
# server compile that path first (tests/test_agent.py does the same).
WARM_INTERRUPTS = "sleep(0.01); throw(InterruptException())"


class McpClient:
    """A jutul-jkernel-mcp server driven by the SDK's stdio client, on a loop in a thread."""

    def __init__(self, *args: str, command: list[str] | None = None) -> None:
        from mcp import ClientSession, StdioServerParameters
        from mcp.client.stdio import stdio_client

        self.errlog = tempfile.TemporaryFile("w+")  # noqa: SIM115 - closed by close()
        argv = command or [sys.executable, "-m", "jutul_jkernel.mcp", *args]
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        params = StdioServerParameters(command=argv[0], args=argv[1:], env=env)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.session: Any = None
        self._stop = asyncio.Event()
        ready: concurrent.futures.Future[None] = concurrent.futures.Future()

        async def run() -> None:
            try:
                async with (
                    stdio_client(params, errlog=self.errlog) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    self.session = session
                    ready.set_result(None)
                    await self._stop.wait()
            except BaseException as exc:
                if not ready.done():
                    ready.set_exception(exc)
                raise

        self.main = asyncio.run_coroutine_threadsafe(run(), self.loop)
        ready.result(START_TIMEOUT)

    def submit(
        self,
        tool: str,
        arguments: dict[str, Any] | None = None,
        progress: Callable[[float, float | None, str | None], Any] | None = None,
    ) -> concurrent.futures.Future[Any]:
        """Send a tools/call request; its answer is the future's result."""
        return asyncio.run_coroutine_threadsafe(
            self.session.call_tool(tool, arguments or {}, progress_callback=progress), self.loop
        )

    def call(self, tool: str, arguments: dict[str, Any] | None = None, **kw: Any) -> Any:
        timeout = kw.pop("timeout", STEP_TIMEOUT)
        future = self.submit(tool, arguments, **kw)
        try:
            return future.result(timeout)
        except concurrent.futures.TimeoutError:
            future.cancel()
            pytest.fail(f"no answer to {tool} {arguments} within {timeout:.0f} s; {self.seen()}")

    def eval(self, code: str, **arguments: Any) -> str:
        """The text of a julia_eval call's answer (its text blocks joined)."""
        return text_of(self.call("julia_eval", {"code": code, **arguments}))

    def sessions(self) -> dict[str, dict[str, Any]]:
        listed = json.loads(text_of(self.call("julia_sessions")))
        return {s["name"]: s for s in listed}

    def julia(self, session: str = "default") -> psutil.Process:
        pid = self.sessions()[session]["pid"]
        assert pid is not None, self.sessions()
        return psutil.Process(pid)

    def seen(self) -> str:
        self.errlog.seek(0)
        return f"server stderr:\n{self.errlog.read()[-4000:]}"

    def close(self) -> None:
        """End the client: the SDK closes the server's stdin (end of input) and waits."""
        self.loop.call_soon_threadsafe(self._stop.set)
        try:
            self.main.result(START_TIMEOUT)
        finally:
            self.loop.call_soon_threadsafe(self.loop.stop)
            self.thread.join(REAP_GRACE)
            self.loop.close()
            self.errlog.close()


def text_of(result: Any) -> str:
    return "\n".join(c.text for c in result.content if c.type == "text")


def started_file(directory: Path) -> tuple[Path, str]:
    """A file the call creates first, and the Julia that creates it (Julia string syntax)."""
    path = directory / f"started-{time.monotonic_ns()}"
    return path, f"touch({json.dumps(str(path))})"


def wait_for_file(path: Path, client: McpClient) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT
    while not path.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"the call never started (no {path}); {client.seen()}")
        time.sleep(0.01)


def _server_of(julia: psutil.Process) -> psutil.Process:
    """The server process: the parent of its Julias."""
    server = julia.parent()
    assert server is not None
    return server


@pytest.fixture(scope="module")
def client() -> Iterator[McpClient]:
    """One server for the tests that keep it alive; the leftover guard accepts its Julias."""
    c = McpClient("--timeout", "120")
    server = psutil.Process()  # replaced once the server's Julia tells who the server is
    try:
        assert c.eval(WARM_INTERRUPTS) == "InterruptException: interrupted; state kept."
        server = _server_of(c.julia())
        SHARED_KERNEL_PIDS.add(server.pid)
        yield c
    finally:
        c.close()
        SHARED_KERNEL_PIDS.discard(server.pid)


def test_a_plain_kernel_import_does_not_load_the_sdk() -> None:
    """The MCP SDK is an optional extra: the kernel, the agent and the supervisor run without it."""
    code = (
        "import sys, jutul_jkernel.jupyter.kernel, jutul_jkernel.agents.agent\n"
        "import jutul_jkernel.supervisor\n"
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('mcp', 'mcp_types')))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=STEP_TIMEOUT,
        env={**os.environ, "PYTHONPATH": str(ROOT)}, check=True,
    )  # fmt: skip
    assert done.stdout.strip() == "[]"


@pytest.mark.parametrize("value", ["0", "-3", "nan", "soon"])
def test_a_bad_timeout_is_refused_with_what_was_wrong(value: str) -> None:
    """--timeout takes a positive number of seconds; anything else is named, and nothing runs."""
    done = subprocess.run(
        [sys.executable, "-m", "jutul_jkernel.mcp", "--timeout", value],
        capture_output=True, text=True, timeout=STEP_TIMEOUT, stdin=subprocess.DEVNULL,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
    )  # fmt: skip
    assert done.returncode == 2, done
    assert f"--timeout: expected a positive number of seconds, got {value!r}" in done.stderr


# ---- evaluation ----


@pytest.mark.integration
def test_tools_are_listed(client: McpClient) -> None:
    tools = asyncio.run_coroutine_threadsafe(client.session.list_tools(), client.loop).result(
        STEP_TIMEOUT
    )
    names = {t.name for t in tools.tools}
    assert names == {"julia_eval", "julia_interrupt", "julia_restart", "julia_sessions"}


@pytest.mark.integration
def test_state_persists_across_calls(client: McpClient) -> None:
    assert client.eval("kept = 21") == "21"
    assert client.eval("double(x) = 2x; double(kept)") == "42"


@pytest.mark.integration
def test_outputs_in_order_without_ansi(client: McpClient) -> None:
    """stdout and stderr as they came, escapes stripped, then the value."""
    code = 'println("out"); print(stderr, "\\e[31mred\\e[0m\\n"); flush(stderr); 1 + 2'
    assert client.eval(code) == (
        "<stdout>\nout\n</stdout>\n<stderr>\nred\n</stderr>\n<execute_result>\n3\n</execute_result>"
    )


@pytest.mark.integration
def test_error_shows_the_users_frames(client: McpClient) -> None:
    body = client.eval('inner() = error("deep"); outer() = inner(); outer()')
    lines = body.splitlines()
    assert lines[0] == "ErrorException: deep", body
    assert any("inner()" in line for line in lines) and any("outer()" in line for line in lines)
    assert not any("JKernel" in line or "server.jl" in line for line in lines), body


@pytest.mark.integration
def test_png_display_and_value_are_image_content(client: McpClient) -> None:
    """A PNG display and a PNG value each come back as an image block, in order with text."""
    png = ", ".join(f"0x{b:02x}" for b in PNG)
    code = (
        "struct Dot end\n"
        f'Base.show(io::IO, ::MIME"image/png", ::Dot) = write(io, UInt8[{png}])\n'
        'println("before")\n'
        "display(Dot())\n"
        "Dot()"
    )
    result = client.call("julia_eval", {"code": code})
    kinds = [c.type for c in result.content]
    assert kinds == ["text", "image", "image"], result.content
    assert result.content[0].text == "before\n"
    for image in result.content[1:]:
        assert image.mime_type == "image/png"
        assert base64.b64decode(image.data) == PNG


@pytest.mark.integration
def test_svg_is_an_image_or_its_source(client: McpClient) -> None:
    """An SVG is rasterised where cairosvg or rsvg-convert is installed, else sent as text."""
    svg = (
        '<svg xmlns="http://www.w3.org/2000/svg" width="4" height="4">'
        '<rect width="4" height="4"/></svg>'
    )
    code = (
        "struct Box end\n"
        f'Base.show(io::IO, ::MIME"image/svg+xml", ::Box) = print(io, {json.dumps(svg)})\n'
        "display(Box()); nothing"
    )
    result = client.call("julia_eval", {"code": code})
    [block] = result.content
    if block.type == "image":
        assert block.mime_type == "image/png"
        assert base64.b64decode(block.data).startswith(b"\x89PNG\r\n\x1a\n")
    else:
        assert block.text == svg


@pytest.mark.integration
def test_a_megabyte_of_output_keeps_head_and_tail(client: McpClient) -> None:
    """Past 40,000 characters the middle is cut, and the answer says how much."""
    full = "".join(f"{i:07d}" + "x" * 92 + "\n" for i in range(10_000))  # 1,000,000 characters
    body = client.eval('for i in 0:9999; println(lpad(i, 7, "0") * "x"^92); end')
    keep = 20_000
    hidden = len(full) - 2 * keep
    assert (
        body
        == (
            f"<stdout>\n{full[:keep]}</stdout>\n"  # 200 whole lines: it ends with its newline
            f"<notice>\n[jutul-jkernel: {hidden} characters of output cut here]\n</notice>\n"
            f"<stdout>\n{full[-keep:]}</stdout>"
        )
    )


# ---- timeouts, cancellation, interrupts ----


@pytest.mark.integration
def test_timeout_on_sleep_interrupts_and_keeps_state(client: McpClient) -> None:
    client.eval("before_sleep = 7")
    t0 = time.monotonic()
    body = client.eval('println("sleeping"); sleep(1000)', timeout=2)
    took = time.monotonic() - t0
    assert body == (
        "<stdout>\nsleeping\n</stdout>\n"
        "<error>\nInterruptException: timeout: interrupted after 2 s; state kept.\n</error>"
    )
    assert 2 <= took < 2 + ESCALATION, took
    assert client.eval("before_sleep") == "7"


@pytest.mark.integration
def test_timeout_on_a_printing_loop_keeps_output_and_state(client: McpClient) -> None:
    client.eval("printed = 0")
    t0 = time.monotonic()
    body = client.eval("while true; global printed += 1; println(printed); end", timeout=2)
    took = time.monotonic() - t0
    assert 2 <= took < 2 + ESCALATION, took
    assert body.startswith("<stdout>\n1\n2\n3\n"), body[:200]
    assert body.endswith(
        "InterruptException: timeout: interrupted after 2 s; state kept.\n</error>"
    ), body[-300:]
    assert int(client.eval("printed")) > 3
    assert client.eval("1 + 1") == "2"


@pytest.mark.integration
def test_progress_notifications_carry_the_latest_lines(client: McpClient) -> None:
    seen: list[str | None] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append(message)

    code = 'for i in 1:30; println("line ", i); sleep(0.1); end'
    result = client.call("julia_eval", {"code": code}, progress=progress)
    assert text_of(result).endswith("line 30\n")
    assert seen, "no progress notification arrived"
    lines = [m.splitlines() for m in seen if m]
    assert lines and all(1 <= len(chunk) <= 5 for chunk in lines), seen
    assert all(line.startswith("line ") for chunk in lines for line in chunk), seen


@pytest.mark.integration
def test_julia_interrupt_keeps_state(client: McpClient, tmp_path: Path) -> None:
    client.eval("before_interrupt = 5")
    started, touch = started_file(tmp_path)
    future = client.submit("julia_eval", {"code": f"{touch}; sleep(1000)"})
    wait_for_file(started, client)
    said = text_of(client.call("julia_interrupt", {"session": "default"}))
    assert "interrupting" in said, said
    assert text_of(future.result(STEP_TIMEOUT)) == "InterruptException: interrupted; state kept."
    assert client.eval("before_interrupt") == "5"


@pytest.mark.integration
def test_cancelled_call_is_interrupted_and_the_next_call_says_so(
    client: McpClient, tmp_path: Path
) -> None:
    """An MCP cancellation interrupts the call (the state is kept); a cancelled request gets no
    answer, so the session's next call starts with how it ended."""
    client.eval("before_cancel = 3")
    started, touch = started_file(tmp_path)
    future = client.submit("julia_eval", {"code": f'{touch}; println("working"); sleep(1000)'})
    wait_for_file(started, client)
    future.cancel()
    body = client.eval("before_cancel")
    assert body.startswith("<notice>\nThe previous call, cancelled by the client after "), body
    assert " s, ended:\nInterruptException: interrupted; state kept.\n</notice>" in body, body
    assert body.endswith("<execute_result>\n3\n</execute_result>"), body


# A loop that blocks SIGINT where Julia 1.5.3 takes it (signal 12) and never yields: nothing
# but a restart ends it (tests/test_supervisor_julia.py, STUBBORN).
STUBBORN = (
    "function stubborn(); mask = zeros(UInt64, 16); mask[1] = UInt64(1) << (12 - 1); "
    "ccall(:pthread_sigmask, Cint, (Cint, Ptr{UInt64}, Ptr{Cvoid}), 0, mask, C_NULL); "
    "TOUCH; x = 0.0; while true; x += 1.0; end; end; stubborn()"
)


@pytest.mark.integration
def test_timeout_that_nothing_stops_says_the_state_was_lost(client: McpClient) -> None:
    """The escalation ends in a restart: the answer says plainly that the state is gone."""
    client.eval("doomed = 1", session="stubborn")
    client.eval(WARM_INTERRUPTS, session="stubborn")
    body = client.eval(STUBBORN.replace("TOUCH", "nothing"), session="stubborn", timeout=1)
    assert "restarted" in body, body
    assert body.endswith(
        "InterruptException: timeout: interrupted after 1 s; Julia did not respond and was "
        "restarted: state lost.\n</error>"
    ), body
    assert client.eval("isdefined(Main, :doomed)", session="stubborn") == "false"


@pytest.mark.integration
def test_cancelled_call_that_nothing_stops_tells_the_next_call_the_state_was_lost(
    client: McpClient, tmp_path: Path
) -> None:
    """Cancelled, the call is escalated to a restart; the next call, in the fresh Julia, says
    that the state was lost (the cancelled request itself gets no answer)."""
    client.eval("doomed = 1", session="stubborn-cancel")
    client.eval(WARM_INTERRUPTS, session="stubborn-cancel")
    started, touch = started_file(tmp_path)
    future = client.submit(
        "julia_eval", {"code": STUBBORN.replace("TOUCH", touch), "session": "stubborn-cancel"}
    )
    wait_for_file(started, client)
    future.cancel()
    body = client.eval("isdefined(Main, :doomed)", session="stubborn-cancel")
    assert body.startswith("<notice>\nThe previous call, cancelled by the client"), body
    assert "restarted: state lost." in body, body
    assert body.endswith("<execute_result>\nfalse\n</execute_result>"), body


@pytest.mark.integration
def test_crash_is_explained_and_the_next_call_is_fresh(client: McpClient) -> None:
    client.eval("lost = 1", session="crash")
    old = client.julia("crash").pid
    body = client.eval("ccall(:abort, Cvoid, ())", session="crash")
    # Julia's own report of the signal comes first, on its stderr.
    assert "<error>\nJuliaDied: Julia " in body, body
    assert "SIGABRT" in body and "The next call starts a fresh Julia." in body, body
    body = client.eval("isdefined(Main, :lost)", session="crash")
    assert "fresh Julia session" in body and "gone" in body, body
    assert body.endswith("<execute_result>\nfalse\n</execute_result>"), body
    assert client.julia("crash").pid != old


@pytest.mark.integration
def test_restart_loses_state(client: McpClient) -> None:
    client.eval("doomed = 1", session="restart")
    old = client.julia("restart").pid
    said = text_of(client.call("julia_restart", {"session": "restart"}))
    assert "restarted" in said and "state lost" in said, said
    assert client.eval("isdefined(Main, :doomed)", session="restart") == "false"
    assert client.julia("restart").pid != old


# ---- sessions ----


@pytest.mark.integration
def test_two_sessions_run_at_once_with_their_own_state(client: McpClient) -> None:
    for name in ("left", "right"):
        assert client.eval(f'side = "{name}"', session=name) == f'"{name}"'
    t0 = time.monotonic()
    futures = [
        client.submit("julia_eval", {"code": "sleep(3); side", "session": name})
        for name in ("left", "right")
    ]
    answers = [text_of(f.result(STEP_TIMEOUT)) for f in futures]
    took = time.monotonic() - t0
    assert answers == ['"left"', '"right"']
    assert took < 5.5, f"two 3 s calls in two sessions took {took:.1f} s: not in parallel"


@pytest.mark.integration
def test_calls_to_one_session_run_in_order(client: McpClient, tmp_path: Path) -> None:
    client.eval("order = Int[]", session="queue")
    started, touch = started_file(tmp_path)
    first = client.submit(
        "julia_eval", {"code": f"{touch}; sleep(1); push!(order, 1); 1", "session": "queue"}
    )
    wait_for_file(started, client)
    later = []
    for i in (2, 3, 4):
        code = f"push!(order, {i}); {i}"
        later.append(client.submit("julia_eval", {"code": code, "session": "queue"}))
        time.sleep(0.1)  # sent one after another: the order the server received them
    assert [text_of(f.result(STEP_TIMEOUT)) for f in (first, *later)] == ["1", "2", "3", "4"]
    assert client.eval("order == [1, 2, 3, 4]", session="queue") == "true"


@pytest.mark.integration
def test_sessions_are_listed(client: McpClient, tmp_path: Path) -> None:
    (tmp_path / "Project.toml").write_text('name = "Listed"\n')
    assert client.eval("Base.active_project()", session="listed", project=str(tmp_path)) == (
        json.dumps(str(tmp_path / "Project.toml"))
    )
    listed = client.sessions()
    entry = listed["listed"]
    assert entry["project"] == str(tmp_path)
    assert entry["julia_version"].startswith("1.")
    assert entry["state"] == "idle"
    assert entry["memory_mib"] > 10
    assert psutil.Process(entry["pid"]).is_running()
    assert listed["default"]["project"] == "@."
    refused = client.call("julia_eval", {"code": "1", "session": "listed", "project": "/"})
    assert refused.is_error and "already runs with project" in text_of(refused)


# ---- shutdown ----


@pytest.mark.integration
def test_end_of_input_ends_the_server_and_every_julia(tmp_path: Path) -> None:
    """The SDK closes stdin and waits 2 s before it kills: the server must end by itself."""
    status = tmp_path / "status"
    # Through sh, so that the server's own exit status is written down: the SDK would kill
    # the group (sh included) had the server outlived its grace.
    c = McpClient(
        command=["sh", "-c", f'"$0" -m jutul_jkernel.mcp; echo $? > "{status}"', sys.executable]
    )
    try:
        julias = [psutil.Process(int(c.eval("getpid()", session=n))) for n in ("a", "b")]
    finally:
        c.close()
    psutil.wait_procs(julias, REAP_GRACE)
    assert not [j for j in julias if j.is_running()]
    assert status.read_text().strip() == "0"


@pytest.mark.integration
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGHUP, signal.SIGKILL])
def test_a_signalled_server_leaves_no_julia(signum: int, tmp_path: Path) -> None:
    """SIGTERM and SIGHUP end every Julia; after a SIGKILL, Julia's parent-death signal does,
    even while it computes."""
    c = McpClient()
    try:
        julias = [psutil.Process(int(c.eval("getpid()", session="a")))]
        started, touch = started_file(tmp_path)
        c.submit("julia_eval", {"code": f"{touch}; while true; end", "session": "a"})
        wait_for_file(started, c)
        server = _server_of(julias[0])
        os.kill(server.pid, signum)
        server.wait(REAP_GRACE)
        _, alive = psutil.wait_procs(julias, REAP_GRACE)
        assert not alive, f"Julia outlived its server: {alive}"
    finally:
        c.close()
