"""The agent (``python -m jutul_jkernel.agent``) as a client sees it: a real process, real Julia.

Every test talks to the agent over its stdin and stdout pipes, as an LLM agent's tool would, and
once through a pseudo-terminal with pexpect, as a person would. Responses are compared exactly:
acknowledgement line, rendered body, delimiter line. Every read is bounded; interrupts are sent
only once the request provably runs (it creates a file first), so no test depends on timing.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import select
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pexpect
import psutil
import pytest

from jutul_jkernel.agents.agent import MARKER, escape_body, unescape_body
from jutul_jkernel.supervisor.launch_settings import default_threads

from .conftest import REAP_GRACE, SHARED_KERNEL_PIDS

pytestmark = pytest.mark.integration

START_TIMEOUT = 60.0  # Julia start; ~1 s here when warm
STEP_TIMEOUT = 30.0  # one request, interrupts included (the escalation ends within ~6 s)
DELIMITER = re.compile(r"--[A-Za-z0-9]{10}")
# A 1x1 PNG: what a plotting package's show(io, MIME"image/png", fig) writes, only smaller.
PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mNk+M9QDwADhgGAWjR9awAAAABJRU5ErkJggg=="
)


class AgentProcess:
    """The agent as a child process on pipes, read with bounded waits."""

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.stderr = tempfile.TemporaryFile()  # noqa: SIM115 - closed by close()
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "jutul_jkernel.agent", *args],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.stderr,
            env=env,
        )
        assert self.proc.stdin is not None and self.proc.stdout is not None
        self.stdin = self.proc.stdin
        self.fd = self.proc.stdout.fileno()
        self.buffer = b""
        self.banner: list[str] = []
        while (line := self.read_line(START_TIMEOUT)) != MARKER:
            self.banner.append(line)
        self.delimiter = self.read_line(STEP_TIMEOUT)
        assert DELIMITER.fullmatch(self.delimiter), f"not a delimiter: {self.delimiter!r}"

    def read_line(self, timeout: float = STEP_TIMEOUT) -> str:
        """The next line of stdout, without its newline."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no line from the agent within {timeout:.0f} s; {self.seen()}")
            ready, _, _ = select.select([self.fd], [], [], left)
            if ready:
                chunk = os.read(self.fd, 65536)
                if not chunk:
                    pytest.fail(f"the agent closed stdout mid-line; {self.seen()}")
                self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode()

    def stderr_bytes(self) -> bytes:
        # pread: the agent writes through the same file offset, which a seek would move
        fd = self.stderr.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0)

    def seen(self) -> str:
        self.stderr.seek(0)
        err = self.stderr.read().decode(errors="replace")
        return f"unread stdout: {self.buffer[-2000:]!r}\nstderr:\n{err[-4000:]}"

    def send(self, text: str) -> None:
        self.stdin.write(text.encode())
        self.stdin.flush()

    def send_request(self, code: str) -> None:
        """Send ``code`` as one line, or as a multi-line request when it has several."""
        if "\n" in code:
            self.send(f"--\n{code}\n{self.delimiter}\n")
        else:
            self.send(code + "\n")

    def read_ack(self) -> None:
        line = self.read_line()
        assert line == ".", f"expected the acknowledgement '.', got {line!r}; {self.seen()}"

    def read_body(self, timeout: float = STEP_TIMEOUT) -> str:
        """Lines up to the delimiter line, joined; the delimiter itself is not part of it."""
        lines = []
        while (line := self.read_line(timeout)) != self.delimiter:
            lines.append(line)
        return "\n".join(lines)

    def request(self, code: str) -> str:
        self.send_request(code)
        self.read_ack()
        return self.read_body()

    def julia(self) -> psutil.Process:
        """The agent's Julia (its grandchild: agent -> julia server.jl)."""
        for p in psutil.Process(self.proc.pid).children(recursive=True):
            if any("server.jl" in a for a in p.cmdline()):
                return p
        pytest.fail(f"the agent has no Julia; {self.seen()}")

    def wait(self, timeout: float = STEP_TIMEOUT) -> int:
        try:
            return self.proc.wait(timeout)
        except subprocess.TimeoutExpired:
            pytest.fail(f"the agent did not exit within {timeout:.0f} s; {self.seen()}")

    def close(self) -> None:
        """End the agent (end of input), or kill it and its Julia if it does not go."""
        if self.proc.poll() is None:
            descendants = psutil.Process(self.proc.pid).children(recursive=True)
            try:
                self.stdin.close()
                self.proc.wait(REAP_GRACE)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                for p in [self.proc, *descendants]:
                    p.kill()
                self.proc.wait(REAP_GRACE)
        with contextlib.suppress(BrokenPipeError):
            self.stdin.close()
        self.proc.stdout.close()  # type: ignore[union-attr]
        self.stderr.close()


def started_file(directory: Path) -> tuple[Path, str]:
    """A file the request creates first, and the Julia that creates it (Julia string syntax)."""
    path = directory / f"started-{time.monotonic_ns()}"
    return path, f"touch({json.dumps(str(path))})"


def wait_for_file(path: Path, agent: AgentProcess) -> None:
    deadline = time.monotonic() + STEP_TIMEOUT
    while not path.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"the request never started (no {path}); {agent.seen()}")
        time.sleep(0.01)


def interrupt_once(agent: AgentProcess, directory: Path, code: str) -> str:
    """Send ``code`` (TOUCH in it creates a file), SIGINT the agent once it has; return the body."""
    started, touch = started_file(directory)
    agent.send_request(code.replace("TOUCH", touch))
    agent.read_ack()
    wait_for_file(started, agent)
    os.kill(agent.proc.pid, signal.SIGINT)
    return agent.read_body()


# The first interrupt of a fresh Julia compiles the server's interrupt path, which took 1-2.5 s
# here under load; if the supervisor escalates to a forced interrupt meanwhile, Julia 1.5 can
# crash inside LLVM (SIGSEGV, seen by hand). These tests are about the agent's protocol, so
# they compile that path first: user code throwing InterruptException takes the same path.
WARM_INTERRUPTS = "sleep(0.01); throw(InterruptException())"


@pytest.fixture(scope="module")
def agent() -> Iterator[AgentProcess]:
    """One agent for the tests that keep it alive; the leftover guard accepts its Julia."""
    a = AgentProcess()
    SHARED_KERNEL_PIDS.add(a.proc.pid)
    try:
        assert a.request(WARM_INTERRUPTS) == "InterruptException: interrupted; state kept."
        yield a
    finally:
        a.close()
        SHARED_KERNEL_PIDS.discard(a.proc.pid)


@pytest.fixture
def own_agent() -> Iterator[AgentProcess]:
    """An agent of the test's own, for tests that end it or kill its Julia."""
    a = AgentProcess()
    try:
        yield a
    finally:
        a.close()


def assert_in_sync(agent: AgentProcess, n: int = 3) -> None:
    """The next ``n`` requests each get their own answer, in order."""
    for i in range(n):
        token = 7000 + i
        assert agent.request(f"{token} + 1") == str(token + 1)


# ---- the protocol ----


def test_handshake_names_julia_before_the_delimiter(agent: AgentProcess) -> None:
    """Loading status and Julia's version come before the marker line, then the delimiter."""
    assert agent.banner[0] == "please wait, loading Julia..."
    assert any(line.startswith("Julia 1.") for line in agent.banner), agent.banner


def test_single_line_request(agent: AgentProcess) -> None:
    assert agent.request("1 + 1") == "2"


def test_multi_line_request_keeps_state(agent: AgentProcess) -> None:
    """A block between -- and the delimiter runs as one request; its definitions persist."""
    body = agent.request("function double(x)\n    return 2x\nend\n\ndouble(21)")
    assert body == "42"
    assert agent.request("double(5)") == "10"


def test_several_outputs_come_in_tags_in_order(agent: AgentProcess) -> None:
    body = agent.request('println("one"); println(stderr, "two"); println("three"); 4')
    assert body == (
        "<stdout>\none\n</stdout>\n<stderr>\ntwo\n</stderr>\n<stdout>\nthree\n</stdout>\n"
        "<execute_result>\n4\n</execute_result>"
    )


def test_nothing_gives_an_empty_body(agent: AgentProcess) -> None:
    assert agent.request("y = 1;") == ""
    assert agent.request("") == ""


def test_error_is_concise_with_user_frames(agent: AgentProcess) -> None:
    """Exception, message and the user's own frames; nothing of the server's."""
    body = agent.request('inner() = error("boom")\nouter() = inner()\nouter()')
    lines = body.splitlines()
    assert lines[0] == "ErrorException: boom", body
    assert lines[1] == "Stacktrace:", body
    assert any("inner()" in line for line in lines) and any("outer()" in line for line in lines)
    # Julia 1.5: "top-level scope at request[n]:3"; 1.6+: "top-level scope" then "@ request[n]:3".
    assert re.search(r"top-level scope(?: at |\n\s+@ )request\[\d+\]:3", body), body
    assert "server.jl" not in body and "JKernel" not in body, body


def test_display_shows_text_and_images_as_notes(agent: AgentProcess) -> None:
    """Rich displays give their text/plain; an image a note of type, size and dimensions."""
    png = ", ".join(f"0x{b:02x}" for b in PNG)
    code = (
        "struct Dot end\n"
        f'Base.show(io::IO, ::MIME"image/png", ::Dot) = write(io, UInt8[{png}])\n'
        'display(HTML("<b>bold</b>"))\n'
        "display(Dot())\n"
        "Dot()"
    )
    body = agent.request(code)
    note = f"[image/png, 1x1, {len(PNG)} bytes]"
    assert body == (
        '<display_data>\nHTML{String}("<b>bold</b>")\n</display_data>\n'
        f'<display_data mime="image/png">\n{note}\n</display_data>\n'
        f'<execute_result mime="image/png">\n{note}\n</execute_result>'
    )


def test_display_updates_replace_in_place(agent: AgentProcess) -> None:
    """The response shows what a notebook would show at the end: updates, not their history."""
    code = (
        'id = JKernel.display("step 1"; display_id=true)\n'
        'println("working")\n'
        'JKernel.update_display("step 2"; display_id=id)\n'
        "nothing"
    )
    assert agent.request(code) == (
        '<display_data>\n"step 2"\n</display_data>\n<stdout>\nworking\n</stdout>'
    )


def test_long_output_keeps_its_start_and_end(agent: AgentProcess) -> None:
    """Past 256 K characters the middle is cut, and the body says how much."""
    full = "".join(str(i) * 100_000 + "\n" for i in range(1, 7))
    body = agent.request("for i in 1:6; println(string(i)^100_000); end")
    keep = 256 * 1024
    hidden = len(full) - 2 * keep
    assert (
        body
        == (
            f"<stdout>\n{full[:keep]}\n</stdout>\n"  # the tag closes on a line of its own
            f"<notice>\n[jutul-jkernel agent: {hidden} characters of output cut here]\n</notice>\n"
            f"<stdout>\n{full[-keep:]}</stdout>"
        )
    )


def test_readline_is_refused_and_names_the_reason(agent: AgentProcess) -> None:
    """stdin carries requests: reading it from Julia would swallow the next request."""
    body = agent.request("readline()")
    assert "requests, not input" in body, body
    assert_in_sync(agent, 1)


def test_delimiter_printed_by_julia_is_escaped(agent: AgentProcess) -> None:
    """A body line that starts with the delimiter gets a backslash; the client can undo it."""
    d = agent.delimiter
    body = agent.request(f'println("{d}"); println("\\\\{d} x"); println("a {d}")')
    assert body == f"\\{d}\n\\\\{d} x\na {d}"
    assert unescape_body(body, d) == f"{d}\n\\{d} x\na {d}"
    assert_in_sync(agent, 1)


def test_stray_delimiter_line_is_a_protocol_error(agent: AgentProcess) -> None:
    agent.send(agent.delimiter + "\n")
    assert "no multi-line request is open" in agent.read_body()
    assert_in_sync(agent, 1)


# ---- interrupts ----


def test_interrupt_sleep_keeps_state_and_sync(agent: AgentProcess, tmp_path: Path) -> None:
    """SIGINT to the agent stops `sleep(1000)` with state kept; later requests stay in sync."""
    agent.request("kept = 123")
    body = interrupt_once(agent, tmp_path, 'TOUCH; println("before"); sleep(1000)')
    assert body == (
        "<stdout>\nbefore\n</stdout>\n<error>\nInterruptException: interrupted; state kept.\n"
        "</error>"
    )
    assert agent.proc.poll() is None, "SIGINT ended the agent"
    assert agent.request("kept") == "123"
    assert_in_sync(agent)


def test_interrupt_printing_loop_keeps_state_and_sync(agent: AgentProcess, tmp_path: Path) -> None:
    """A loop printing as fast as it can stops; what it printed ends the body before the note."""
    # The file appears once 1,000 lines are out: the interrupt then surely lands mid-loop.
    code = "n = 0; while true; global n += 1; println(n); n == 1000 && TOUCH; end"
    body = interrupt_once(agent, tmp_path, code)
    assert body.startswith("<stdout>\n1\n2\n3\n"), body[:200]
    assert body.endswith("<error>\nInterruptException: interrupted; state kept.\n</error>")
    n = int(agent.request("n"))
    assert n > 0
    printed = [int(x) for x in re.findall(r"^(\d+)$", body, re.MULTILINE)]
    assert printed[-1] <= n  # the last number printed is one the loop counted
    assert_in_sync(agent)


def test_sigint_between_requests_is_ignored(agent: AgentProcess) -> None:
    os.kill(agent.proc.pid, signal.SIGINT)
    # Sent at once, the next request could start before the agent sees the signal, and then
    # the interrupt is rightly its own: wait for the agent's word that it ignored it.
    deadline = time.monotonic() + STEP_TIMEOUT
    while b"SIGINT with no request running: ignored" not in agent.stderr_bytes():
        assert time.monotonic() < deadline, agent.seen()
        time.sleep(0.02)
    assert_in_sync(agent, 1)
    assert agent.proc.poll() is None


# ---- crashes and the end ----


def test_crash_is_explained_and_the_next_request_recovers(own_agent: AgentProcess) -> None:
    """Julia's exit(3) ends that response with the reason; the next runs in a fresh Julia."""
    own_agent.request("lost = 1")
    old = own_agent.julia().pid
    body = own_agent.request("exit(3)")
    assert body.startswith("JuliaDied: Julia exited with status 3."), body
    assert "The next request starts a fresh Julia." in body
    body = own_agent.request("isdefined(Main, :lost)")
    notice, result = re.fullmatch(
        r"<notice>\n(.*)\n</notice>\n<execute_result>\n(.*)\n</execute_result>", body, re.S
    ).groups()  # type: ignore[union-attr]
    assert "fresh Julia session" in notice and "gone" in notice, notice
    assert result == "false"
    assert own_agent.julia().pid != old
    assert_in_sync(own_agent)


def test_interrupt_while_julia_restarts_is_not_lost(own_agent: AgentProcess) -> None:
    """SIGINT right after the acknowledgement, while a fresh Julia starts, still interrupts.

    Julia needs a second or more to start, so the signal usually lands before the request runs
    (then it never runs); if Julia was quicker, it interrupts the running sleep. Either way the
    response comes, instead of a sleep of 1,000 s.
    """
    assert own_agent.request("exit(3)").startswith("JuliaDied: Julia exited with status 3.")
    own_agent.send_request("sleep(1000)")
    own_agent.read_ack()
    os.kill(own_agent.proc.pid, signal.SIGINT)
    body = own_agent.read_body()
    assert "fresh Julia session" in body, body  # the restart is said either way
    assert body.endswith(
        (
            "InterruptException: interrupted before it ran.\n</error>",
            "InterruptException: interrupted; state kept.\n</error>",
        )
    ), body
    assert_in_sync(own_agent)


def test_exit_request_stops_julia_and_the_agent(own_agent: AgentProcess) -> None:
    julia = own_agent.julia()
    own_agent.send("exit()\n")
    own_agent.read_ack()
    assert own_agent.read_body() == ""
    assert own_agent.wait() == 0
    julia.wait(REAP_GRACE)


def test_end_of_input_stops_julia_and_the_agent(own_agent: AgentProcess) -> None:
    """Requests already sent still run; then the final delimiter, and status 0."""
    julia = own_agent.julia()
    own_agent.send("6 * 7\n")
    own_agent.stdin.close()
    own_agent.read_ack()
    assert own_agent.read_body() == "42"
    assert own_agent.read_body() == ""
    assert own_agent.wait() == 0
    julia.wait(REAP_GRACE)


def other_thread_count() -> str:
    """A thread count the agent would not choose itself (Julia 1.5 allows at most one a core)."""
    return "1" if default_threads() > 1 else str(min(2, os.cpu_count() or 1))


def test_options_reach_julia(tmp_path: Path) -> None:
    """--threads, --env, --project and --julia-args set up Julia as the installer's options do."""
    project = tmp_path / "proj"
    project.mkdir()
    preload = tmp_path / "preload.jl"
    preload.write_text(
        'println("hello from preload"); flush(stdout); println(stderr, "warning from preload")'
    )
    threads = other_thread_count()
    a = AgentProcess(
        "--threads",
        threads,
        "--env",
        "AGENT_PROBE=yes",
        "--project",
        str(project),
        f"--julia-args=-L {preload}",
    )
    try:
        # What Julia prints while starting comes before the marker line.
        assert "hello from preload" in a.banner and "warning from preload" in a.banner, a.banner
        assert a.request("Threads.nthreads()") == threads
        assert a.request('ENV["AGENT_PROBE"]') == '"yes"'
        assert a.request("dirname(Base.active_project())") == json.dumps(str(project))
    finally:
        a.close()


def test_environment_variables_reach_julia(tmp_path: Path) -> None:
    """Without flags, the kernel's variables (JUTUL_JKERNEL_THREADS, ...) configure the agent."""
    threads = other_thread_count()
    env = {**os.environ, "JUTUL_JKERNEL_THREADS": threads, "JUTUL_JKERNEL_JULIA_ARGS": "-O1"}
    a = AgentProcess(env=env)
    try:
        assert a.request("Threads.nthreads()") == threads
        assert a.request("Base.JLOptions().opt_level") == "1"
    finally:
        a.close()


def test_thousand_requests_in_a_row(agent: AgentProcess) -> None:
    """1,000 requests sent at once come back one response each, complete and in order."""
    n = 1000
    agent.send("".join(f'println("out{i}"); {i} * 2\n' for i in range(n)))
    for i in range(n):
        agent.read_ack()
        body = agent.read_body()
        expected = f"<stdout>\nout{i}\n</stdout>\n<execute_result>\n{i * 2}\n</execute_result>"
        assert body == expected, f"request {i}"
    assert_in_sync(agent, 1)


# ---- a terminal ----


def test_in_a_terminal_no_echo_and_ctrl_c_interrupts(tmp_path: Path) -> None:
    """On a TTY the request is not echoed, lines end in bare LF, and Ctrl-C interrupts."""
    child = pexpect.spawn(
        sys.executable, ["-m", "jutul_jkernel.agent"], timeout=STEP_TIMEOUT, encoding="utf-8"
    )
    try:
        child.expect(re.escape(MARKER) + r"\n(--[A-Za-z0-9]{10})\n", timeout=START_TIMEOUT)
        d = child.match.group(1)
        child.send("x = 41\n")
        child.expect(re.escape(d) + "\n")
        assert child.before == ".\n41\n"  # no echoed "x = 41", no carriage returns
        child.send(WARM_INTERRUPTS + "\n")
        child.expect(re.escape(d) + "\n")
        started, touch = started_file(tmp_path)
        child.send(f"{touch}; sleep(1000)\n")
        child.expect(r"\.\n")
        deadline = time.monotonic() + STEP_TIMEOUT
        while not started.exists():
            assert time.monotonic() < deadline, "the request never started"
            time.sleep(0.01)
        child.sendintr()  # Ctrl-C: the terminal sends SIGINT to the agent's process group
        child.expect(re.escape(d) + "\n")
        assert child.before == "InterruptException: interrupted; state kept.\n"
        child.send("x + 1\n")
        child.expect(re.escape(d) + "\n")
        assert child.before == ".\n42\n"
        child.send("exit()\n")
        child.expect(pexpect.EOF)
        child.wait()
        assert child.exitstatus == 0
    finally:
        if child.isalive():
            child.terminate(force=True)
        child.close()


# ---- escaping, without Julia ----


@pytest.mark.parametrize(
    "body",
    ["", "--abc", "x\n--abc\ny", "\\--abc", "\\\\--abc tail", "a--abc", "--ab", "\r--abc\r"],
)
def test_escape_round_trips_and_hides_the_delimiter(body: str) -> None:
    escaped = escape_body(body, "--abc")
    assert unescape_body(escaped, "--abc") == body
    assert not any(line.startswith("--abc") for line in escaped.splitlines())
