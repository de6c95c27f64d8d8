"""A real ``jupyter console`` on the installed kernel, driven through a pseudo-terminal.

This is the path a terminal user takes: prompt_toolkit's full interface (not the console's
``--simple-prompt`` test mode, which cannot enter multi-line code), the kernel's is_complete
answers deciding whether Enter runs the code or opens a continuation line, results as
``Out[n]:``, errors as their traceback text, and a clean exit that takes Julia along.

The terminal output is full of escape sequences (colours, cursor moves, redraws); ``Console``
matches patterns against the text with those removed. Every wait is bounded.
"""

from __future__ import annotations

import re
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pexpect
import psutil
import pytest

from .conftest import E2E_KERNEL_NAME

pytestmark = pytest.mark.e2e

JUPYTER = Path(sys.executable).with_name("jupyter")  # the venv's own jupyter
FIRST_PROMPT_TIMEOUT = 60.0  # kernel start + Julia start; ~3 s here when warm
STEP_TIMEOUT = 30.0
# After the console is gone: the kernel stops Julia, or Julia follows its dead parent.
REAP_TIMEOUT = 10.0
# jupyter_console waits 1 s for an is_complete_reply, and on the first miss stops asking the
# kernel for the rest of the session (Enter then needs a blank line to run anything). The
# kernel compiles is_complete first when idle, but this test types at once, before that, and
# on a loaded machine the first answer can take longer than 1 s: the test allows more.
IS_COMPLETE_TIMEOUT = 10.0

# CSI (colours, cursor moves, modes), OSC (titles), charset and keypad selections.
_ESCAPE = re.compile(
    r"\x1b(?:\[[0-?]*[ -/]*[@-~]|\][^\x07\x1b]*(?:\x07|\x1b\\)|[()][0-9A-Za-z]|[=>78DEHM])"
)


class Console:
    """A ``jupyter console`` process in a pseudo-terminal, read as plain text."""

    def __init__(self, env: dict[str, str]) -> None:
        self.child = pexpect.spawn(
            str(JUPYTER),
            [
                "console",
                "--kernel",
                E2E_KERNEL_NAME,
                f"--ZMQTerminalInteractiveShell.kernel_is_complete_timeout={IS_COMPLETE_TIMEOUT}",
            ],
            env=env,
            encoding="utf-8",
            codec_errors="replace",
            dimensions=(40, 200),  # wide: no soft wraps inside the lines we look for
            timeout=STEP_TIMEOUT,
        )
        self.processes: dict[int, psutil.Process] = {}
        self._raw = ""
        self._pos = 0  # matches start after the previous one

    def text(self) -> str:
        """Everything shown so far, without escape sequences and carriage returns."""
        raw = self._raw
        cut = raw.rfind("\x1b")
        if cut >= 0 and _ESCAPE.match(raw, cut) is None and len(raw) - cut < 64:
            raw = raw[:cut]  # an escape sequence still arriving
        return _ESCAPE.sub("", raw).replace("\r", "")

    def expect(self, pattern: str, timeout: float = STEP_TIMEOUT) -> re.Match[str]:
        """Wait until ``pattern`` shows up after the previous match; fail with the screen."""
        regex = re.compile(pattern)
        deadline = time.monotonic() + timeout
        while True:
            found = regex.search(self.text(), self._pos)
            if found is not None:
                self._pos = found.end()
                return found
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"no {pattern!r} within {timeout:.0f} s; console:\n{self.tail()}")
            try:
                self._raw += self.child.read_nonblocking(65536, timeout=min(left, 0.5))
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                found = regex.search(self.text(), self._pos)
                if found is None:
                    pytest.fail(f"console ended before {pattern!r}; it showed:\n{self.tail()}")
                self._pos = found.end()
                return found

    def wait_for_exit(self, timeout: float = STEP_TIMEOUT) -> int | None:
        """Read until the console closes the terminal, then return its exit status."""
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                pytest.fail(f"console still running after {timeout:.0f} s:\n{self.tail()}")
            try:
                self._raw += self.child.read_nonblocking(65536, timeout=min(left, 0.5))
            except pexpect.TIMEOUT:
                continue
            except pexpect.EOF:
                break
        self.child.wait()
        status: int | None = self.child.exitstatus
        return status

    def send_line(self, line: str) -> None:
        """Type ``line`` and press Enter (a carriage return, as a terminal sends it)."""
        self.child.send(line + "\r")

    def note_processes(self) -> None:
        """Remember the console's descendants (kernel, Julia) to check they end with it."""
        for p in psutil.Process(self.child.pid).children(recursive=True):
            self.processes[p.pid] = p

    def tail(self, chars: int = 3000) -> str:
        return self.text()[-chars:]


def survivors(processes: dict[int, psutil.Process], timeout: float) -> list[str]:
    """Processes still running (not zombies) after ``timeout`` seconds."""
    deadline = time.monotonic() + timeout
    while True:
        alive = []
        for p in processes.values():
            try:
                if p.is_running() and p.status() != psutil.STATUS_ZOMBIE:
                    alive.append(f"{p.pid} {' '.join(p.cmdline()[:3])}")
            except psutil.NoSuchProcess:
                continue
        if not alive or time.monotonic() > deadline:
            return alive
        time.sleep(0.1)


@pytest.fixture
def console(e2e_jupyter_env: dict[str, str]) -> Iterator[Console]:
    """A started ``jupyter console``; afterwards it, its kernel and its Julia must be gone.

    Once the console has exited, its kernel is no descendant of this test process any more,
    so the autouse guard in conftest.py cannot see it: the processes noted while the console
    ran are checked here instead.
    """
    # No cursor-position requests: nothing in a pexpect terminal would answer them. The kernel
    # answers is_complete "unknown" after its own wait; match it to the console's patience.
    env = {
        **e2e_jupyter_env,
        "TERM": "xterm",
        "PROMPT_TOOLKIT_NO_CPR": "1",
        "JUTUL_JKERNEL_IS_COMPLETE_WAIT": str(IS_COMPLETE_TIMEOUT - 1),
    }
    con = Console(env)
    try:
        yield con
    finally:
        if con.child.isalive():
            con.note_processes()
            con.child.close(force=True)
        left = survivors(con.processes, REAP_TIMEOUT)
        for pid in con.processes:
            try:
                psutil.Process(pid).kill()
            except psutil.NoSuchProcess:
                continue
        assert not left, f"still running after the console ended: {left}"


def test_console_session(console: Console) -> None:
    """Multi-line input, a result, an error, then a confirmed exit that ends everything."""
    console.expect(r"In \[1\]: ", FIRST_PROMPT_TIMEOUT)
    console.note_processes()
    assert any("julia" in p.name() for p in console.processes.values()), console.processes

    # Enter after an open block: the kernel says "incomplete" with a 4-space indent, so the
    # console opens a continuation line already indented (nothing here types those spaces).
    console.send_line("function add_one(x)")
    console.expect(r"\.\.\.: ")
    console.send_line("x + 1")
    console.expect(r"x \+ 1")
    console.send_line("end")
    console.expect(r"In \[1\]: function add_one\(x\)\n +\.\.\.:     x \+ 1\n +\.\.\.:     end\n")
    console.expect(r"Out\[1\]: add_one \(generic function with 1 method\)\n")

    console.expect(r"In \[2\]: ")
    console.send_line("add_one(41)")
    console.expect(r"Out\[2\]: 42\n")

    console.expect(r"In \[3\]: ")
    console.send_line('error("this error is expected")')
    shown = console.expect(r"\nthis error is expected\n(?P<rest>(?s:.*?))In \[4\]: ")
    assert "Out[3]" not in shown["rest"], shown["rest"]

    console.send_line("add_one(1)")  # the session survives the error
    console.expect(r"Out\[4\]: 2\n")

    console.expect(r"In \[5\]: ")
    console.child.sendcontrol("d")
    console.expect(r"Do you really want to exit \(\[y\]/n\)\? ")
    console.send_line("y")
    assert console.wait_for_exit() == 0
    assert not survivors(console.processes, REAP_TIMEOUT)
    assert "did not respond to an is_complete_request" not in console.text()


def test_exit_command_ends_the_console(console: Console) -> None:
    console.expect(r"In \[1\]: ", FIRST_PROMPT_TIMEOUT)
    console.note_processes()
    console.send_line("exit")
    ended = console.expect(r"Out\[1\]: .*\n|Shutting down kernel")
    assert not ended[0].startswith("Out[1]"), f"`exit` was evaluated: {ended[0]!r}"
    assert console.wait_for_exit() == 0


def test_tab_completion_and_ctrl_c(console: Console) -> None:
    """Tab completes from Julia; Ctrl-C interrupts a running cell and keeps the state."""
    console.expect(r"In \[1\]: ", FIRST_PROMPT_TIMEOUT)
    console.note_processes()
    console.send_line("keep_me = 5")
    console.expect(r"Out\[1\]: 5\n")

    console.expect(r"In \[2\]: ")
    console.child.send("keep_m")
    console.child.send("\t")  # one match: the console completes it in place
    console.expect(r"keep_me")
    console.send_line(" + 1")
    console.expect(r"Out\[2\]: 6\n")

    console.expect(r"In \[3\]: ")
    console.send_line("sleep(1000)")
    time.sleep(1.5)
    console.child.sendcontrol("c")
    console.expect(r"InterruptException")
    console.expect(r"In \[\d\]: ")
    console.send_line("keep_me")
    console.expect(r"Out\[\d\]: 5\n")

    console.send_line("exit")
    assert console.wait_for_exit() == 0
