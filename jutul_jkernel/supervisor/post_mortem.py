"""How a Julia that went away is explained: what it left in its pipes, kept in its log; the
:class:`JuliaDiedError` that says how it ended and quotes the end of its stderr; and what the
execution running then, and the next one, are told.

Julia's last words are often the explanation (a segfault's backtrace, a fatal error), and
they may still sit in the pipes when its connection closes: they are read out here, written
to the log, and quoted, so that nothing it wrote while dying is lost.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterable
from pathlib import Path

from jutul_jkernel.supervisor.errors import JuliaDiedError, describe_exit, read_tail
from jutul_jkernel.supervisor.pipes import OutputPipes
from jutul_jkernel.supervisor.results import ExecutionResult, InterruptStep

# How much of Julia's stderr, or of its log, a death report quotes.
_STDERR_TAIL_BYTES = 2048
_LOG_TAIL_BYTES = 2048
# How much of its stderr is searched for the first line of a crash report, and how many of the
# report's lines are quoted from there.
_STDERR_SEARCH_BYTES = 64 * 1024
_REPORT_LINES = 24

# The first line of the report Julia writes when a signal kills it (jl_critical_error in
# src/signal-handling.c, or the handler in src/signals-unix.c): "signal (11): Segmentation
# fault" on 1.5, "[pid] signal (11.1): ..." on 1.10 (with the si_code), "[pid] signal 11 (1):
# ..." on 1.12.
# Its backtrace follows, innermost frame first, so the frames worth quoting are right below
# it; the end of stderr holds the outermost ones (the task's start), and a long checkout path
# in every frame can push the first line out of a fixed-size tail.
_CRASH_REPORT_START = re.compile(r"^(?:\[\d+\] )?signal \(?\d+", re.MULTILINE)


def keep_leftovers(pipes: OutputPipes | None, log_path: Path, *, quote_log: bool) -> str:
    """Collect what Julia wrote to fd 1 and 2 that was not passed on; append it to the log.

    Close the pipes. Return the end of its stderr, or (with ``quote_log``) the end of the log
    if none.
    """
    left: dict[str, bytes] = {}
    if pipes is not None:
        left = pipes.drain()
        pipes.close()
    text = left.get("stderr", b"")
    with contextlib.suppress(OSError), open(log_path, "ab") as f:
        for data in (left.get("stdout", b""), text):
            f.write(data)
    tail = stderr_quote(text[-_STDERR_SEARCH_BYTES:].decode("utf-8", "replace"))
    if not tail and quote_log:
        tail = read_tail(log_path, _LOG_TAIL_BYTES)
    return tail


def death_error(
    returncode: int | None,
    reason: str,
    leftovers: str,
    stderr_read: Iterable[bytes],
    log_path: Path,
) -> JuliaDiedError:
    """Say how Julia ended (``reason``: what the connection saw) and what it wrote to stderr
    while dying: ``leftovers``, else the end of the stderr already read (``stderr_read``)."""
    how = describe_exit(returncode)
    tail = leftovers
    if not tail:
        read = b"".join(stderr_read)[-_STDERR_SEARCH_BYTES:]
        tail = stderr_quote(read.decode("utf-8", "replace"))
    message = f"Julia {how}"
    if returncode == 0 or reason != "closed its connection":
        message += f"; it {reason}"
    message += "."
    if tail:
        message += f"\nThe end of its stderr:\n{tail}"
    message += f"\nJulia's log: {log_path}"
    return JuliaDiedError(message, exit_description=how, stderr_tail=tail, log_path=log_path)


def stderr_quote(text: str) -> str:
    """What a death report quotes of Julia's last stderr ``text``: its crash report from the
    first line on (the signal and the innermost frames), at most ``_REPORT_LINES`` lines of it
    and a count of the rest, kept in the log; without a crash report, the end of ``text``."""
    starts = list(_CRASH_REPORT_START.finditer(text))
    if not starts:
        return text[-_STDERR_TAIL_BYTES:].strip()
    lines = text[starts[-1].start() :].strip().splitlines()
    if len(lines) <= _REPORT_LINES:
        return "\n".join(lines)
    left = len(lines) - _REPORT_LINES + 1
    return "\n".join([*lines[: _REPORT_LINES - 1], f"[{left} more lines in Julia's log]"])


def restarted_result() -> ExecutionResult:
    """The result of an execution whose interrupt ended in a restart: Julia was killed for
    ignoring every interrupt, so the execution ends interrupted, without its state."""
    return ExecutionResult(
        status="interrupted",
        text="InterruptException",
        state_kept=False,
        interrupt_path=InterruptStep.RESTART.path,
        notice="Julia did not respond to interrupts and was restarted: variables, "
        "functions and packages loaded before are gone.",
    )


def lost_state_notice(how: str) -> str:
    """What the execution after a death is told (``how``: describe_exit's words)."""
    return (
        f"Julia {how} during an earlier execution; this one ran in a fresh Julia "
        "session: variables, functions and packages loaded before are gone."
    )
