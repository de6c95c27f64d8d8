"""What one execution ends in: :class:`ExecutionResult`, its :class:`ErrorInfo`, and how far
its interrupt went (:class:`InterruptStep`). A leaf module: the supervisor fills these in, the
kernel and the agent read them."""

from __future__ import annotations

import enum
from dataclasses import dataclass, field
from typing import Any, Literal

InterruptPath = Literal["unsent", "frame", "sigint", "forced", "restart"]


class InterruptStep(enum.IntEnum):
    """The steps of an interrupt, in the order the escalation takes them (supervisor/interrupts.py).

    Ordered, so that "a SIGINT was sent" is ``step >= SIGINT``. ``UNSENT`` is the interrupt of
    an execution that was never sent (Julia was still starting): it never escalates.
    """

    UNSENT = 0
    FRAME = 1  # the INT frame, read by Julia's listener: no signal
    SIGINT = 2  # one SIGINT to Julia's process group
    FORCED = 3  # a burst of SIGINTs, which makes Julia force the throw
    RESTART = 4  # Julia was killed and restarted: state lost

    @property
    def path(self) -> InterruptPath:
        """The name :attr:`ExecutionResult.interrupt_path` reports."""
        name: InterruptPath = self.name.lower()  # type: ignore[assignment]
        return name


@dataclass
class ErrorInfo:
    """A Julia exception as Jupyter wants it: type name, message, traceback lines."""

    ename: str
    evalue: str
    traceback: list[str]


@dataclass
class ExecutionResult:
    """The outcome of one :meth:`JuliaSupervisor.execute`."""

    status: Literal["ok", "error", "interrupted"]
    text: str = ""  # REPL text of the value ("" for nothing or a trailing `;`), or the error text
    data: dict[str, Any] | None = None  # MIME bundle when the value shows more than text/plain
    error: ErrorInfo | None = None
    state_kept: bool = True  # False when Julia had to be restarted during this execution
    notice: str | None = None  # something the user should be told (a restart, a forced interrupt)
    # How far the last interrupt escalated before Julia took it (InterruptStep.path): "unsent"
    # (interrupted while Julia was starting: never ran), "frame" (the INT frame, no signal),
    # "sigint", "forced" (a burst of SIGINTs), "restart"; None if never interrupted.
    interrupt_path: InterruptPath | None = None
    # Jupyter execute_reply payloads the cell asked for (IJulia.load: set_next_input).
    payload: list[dict[str, Any]] = field(default_factory=list)

    def error_info(self) -> ErrorInfo:
        """The error to report for a result that is not "ok": Julia's own, or (interrupted
        before Julia could report one, or a result Julia could not send) one from the text."""
        if self.error is not None:
            return self.error
        ename = "InterruptException" if self.status == "interrupted" else "Error"
        return ErrorInfo(ename, self.text, self.text.splitlines())
