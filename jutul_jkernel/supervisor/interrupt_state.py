"""All the interrupt state of one execution, in one :class:`Interrupt` record.

How far its interrupts went (the :class:`InterruptStep` reached; only the ladder in
supervisor/interrupts.py moves it up), whether Julia took the latest one, the ACKs heard, the
requests raced for on the claims directory, and the output dropped while an interrupt was on
its way; and what the user is told of all that once the execution ended.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

from jutul_jkernel.supervisor.results import ExecutionResult, InterruptStep

# From an interrupt until Julia acknowledges it, output still arriving is dropped beyond this
# much: a flood's megabytes in flight would hold IOPub, and the cell's error, behind them.
_KEPT_IN_FLIGHT = 8 * 1024


@dataclass
class Interrupt:
    """All the interrupt state of one execution; only the ladder changes ``step``."""

    execution: int  # the execution's id: its INT frames and ACKs carry it
    result: asyncio.Future[ExecutionResult]  # the execution's fate
    step: InterruptStep | None = None  # how far the latest escalation went; None: never
    furthest: InterruptStep | None = None  # how far any escalation of this execution went
    task: asyncio.Task[None] | None = None  # the escalation under way
    taken: bool = False  # Julia took the current interrupt; the cell may still go on
    again: bool = False  # another interrupt was asked for while one was under way
    acks: int = 0  # ACK frames of this execution so far (the listener's and run_cell's)
    requests: list[int] = field(default_factory=list)  # its interrupt requests (claims)
    # From an interrupt request until Julia ACKs it, output beyond _KEPT_IN_FLIGHT is dropped
    # rather than delivered: it was printed before the interrupt, and a cell printing flat out
    # can have megabytes in flight, which IOPub would send before the cell's error.
    discarding: bool = False
    kept_in_flight: int = 0  # bytes passed on while an interrupt was on its way
    dropped_bytes: int = 0

    def reach(self, step: InterruptStep) -> None:
        self.step = step
        self.furthest = step if self.furthest is None else max(self.furthest, step)

    @property
    def signalled(self) -> bool:
        """A SIGINT was sent (one may still be on its way)."""
        return self.furthest is not None and self.furthest >= InterruptStep.SIGINT

    @property
    def forced(self) -> bool:
        return self.furthest is not None and self.furthest >= InterruptStep.FORCED

    @property
    def restarted(self) -> bool:
        """Julia was killed for this execution's interrupt."""
        return self.furthest is InterruptStep.RESTART

    def heard(self, *, ack: bool) -> None:
        """Julia answered this execution (an ACK, or another reply under its id): what it
        writes from now on was written after the interrupt."""
        self.discarding = False
        self.acks += ack

    def notices(self, *, interrupted: bool) -> list[str]:
        """What the user must be told of this execution's interrupts, once it ended."""
        notices = []
        if interrupted and self.forced:
            notices.append(
                "The interrupt had to be forced (the code was not at a safepoint); "
                "Julia's state may be inconsistent. Restart if anything misbehaves."
            )
        if self.dropped_bytes:
            notices.append(
                f"Output cut short: {self.dropped_bytes} bytes printed before the interrupt "
                "reached Julia were dropped, so that the interrupt did not wait for them."
            )
        return notices

    def pass_on(self, data: bytes) -> bytes:
        """What of output just read is passed on: all of it, or while an interrupt is on its
        way the first few KiB (the last lines the cell printed before it was stopped); the rest
        of a flood in flight is dropped, and the result says so."""
        if not self.discarding:
            return data
        kept = data[: max(0, _KEPT_IN_FLIGHT - self.kept_in_flight)]
        self.kept_in_flight += len(kept)
        self.dropped_bytes += len(data) - len(kept)
        return kept
