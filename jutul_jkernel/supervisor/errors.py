"""What can go wrong with Julia, as exceptions; how a process ended, and what it wrote last.

A leaf module: the supervisor raises these, the kernel and the agent report them (each carries
the ``ename`` a Jupyter error shows), and tools/install.py describes its checks' exits the same way.
"""

from __future__ import annotations

import os
import signal
from pathlib import Path

_SIGNAL_NOTES = {
    "SIGKILL": "usually the system out-of-memory killer, or someone ran kill -9",
    "SIGSEGV": "a crash inside Julia or a library it called",
    "SIGABRT": "Julia or a library it called aborted",
    "SIGBUS": "a crash inside Julia or a library it called",
    "SIGTERM": "someone asked it to terminate",
    "SIGINT": "an interrupt arrived where Julia could not handle it",
}


class JuliaStartupError(RuntimeError):
    """Julia could not be started or did not complete the handshake."""

    ename = "JuliaStartupError"  # what a cell's error says


class JuliaDiedError(RuntimeError):
    """The Julia process ended while something was waiting on it."""

    ename = "JuliaDied"  # what a cell's error says (a name users have seen since the start)

    def __init__(
        self,
        message: str,
        *,
        exit_description: str = "",
        stderr_tail: str = "",
        log_path: Path | None = None,
    ) -> None:
        super().__init__(message)
        self.exit_description = exit_description
        self.stderr_tail = stderr_tail
        self.log_path = log_path


def describe_exit(returncode: int | None) -> str:
    """Say in words how a process ended, from its return code."""
    if returncode is None:
        return "is still running"
    if returncode >= 0:
        return f"exited with status {returncode}"
    try:
        name = signal.Signals(-returncode).name
    except ValueError:
        return f"was killed by signal {-returncode}"
    note = _SIGNAL_NOTES.get(name)
    return f"was killed by {name}" + (f" ({note})" if note else "")


def read_tail(path: Path, nbytes: int) -> str:
    """The last ``nbytes`` of a log file, stripped, or why it could not be read."""
    try:
        with open(path, "rb") as f:
            f.seek(0, os.SEEK_END)
            f.seek(max(0, f.tell() - nbytes))
            return f.read().decode("utf-8", "replace").strip()
    except OSError as exc:
        return f"(could not read {path}: {exc})"


def indented(text: str, *, last_lines: int | None = None, empty: str = "(nothing)") -> str:
    """``text`` (its last ``last_lines`` lines) indented for quoting under an error message."""
    lines = text.strip().splitlines()
    if last_lines is not None:
        lines = lines[-last_lines:]
    return "\n".join(f"    {line}" for line in lines) if lines else f"    {empty}"
