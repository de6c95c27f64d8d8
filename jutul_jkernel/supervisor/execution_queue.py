"""One supervisor's executions, one at a time: the queue they wait in, the running one, a
cancelled one that is still being interrupted, and what the next one must be told.

An execution waits for the one before it (and for a cancelled one to be settled by its
interrupt), for Julia to start, and for a SYN round trip when a SIGINT of an earlier interrupt
may still be on its way; then it is sent, and its result awaited. Whoever ends an execution
ends it in :meth:`ExecutionQueue._end`: it stops being current, its escalation and input
requests stop. A death or a restart that lost the state is said once, by the next execution.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable

from jutul_jkernel.supervisor import children, queries
from jutul_jkernel.supervisor.errors import JuliaDiedError
from jutul_jkernel.supervisor.execution import Execution
from jutul_jkernel.supervisor.interrupt_state import Interrupt
from jutul_jkernel.supervisor.interrupts import InterruptLadder, settle_wait
from jutul_jkernel.supervisor.julia_process import JuliaProcess
from jutul_jkernel.supervisor.output_sink import OutputSink
from jutul_jkernel.supervisor.post_mortem import restarted_result
from jutul_jkernel.supervisor.results import ExecutionResult, InterruptStep
from jutul_jkernel.supervisor.spawn import IS_WINDOWS


class ExecutionQueue:
    """Runs one supervisor's executions one at a time, on the Julia ``julia()`` holds."""

    def __init__(
        self,
        start: Callable[[], Awaitable[None]],
        julia: Callable[[], JuliaProcess | None],
        new_id: Callable[[], int],
        ladder: InterruptLadder,
    ) -> None:
        self._start = start  # starts Julia unless it runs (the supervisor's start())
        self._julia = julia
        self._new_id = new_id
        self._ladder = ladder
        self._lock = asyncio.Lock()  # serialises executions
        # The running execution. run() sets it; whoever finishes the execution (run, or
        # _settle when run was cancelled) clears it, in _end.
        self.current: Execution | None = None
        self.lost_state: str | None = None  # notice for the next execution after a death
        self.needs_sync = False  # a SIGINT may be in flight: SYN before the next execution
        self._interrupt_pending = False  # interrupt() came while an execution was starting
        self._settling: asyncio.Task[None] | None = None  # see _settle

    async def run(self, frame_of: Callable[[int], bytes], sink: OutputSink) -> ExecutionResult:
        """Send the request ``frame_of(id)`` makes for a new execution id; wait for its result."""
        async with self._lock:
            if self._settling is not None:
                await self._settling  # a cancelled execution is still being interrupted
            await self._start()
            notice, self.lost_state = self.lost_state, None
            if self.needs_sync:
                await self._sync()
            j = self._julia()
            assert j is not None and j.writer is not None
            eid = self._new_id()
            future: asyncio.Future[ExecutionResult] = asyncio.get_running_loop().create_future()
            ex = Execution(eid, sink, future, Interrupt(eid, future))
            self.current = ex
            j.stderr_tail.clear()  # a death report quotes this execution's stderr only
            if not IS_WINDOWS:
                ex.children_before = children.descendants(j.proc.pid)
            try:
                frame = frame_of(ex.id)
                if self._interrupt_pending:
                    # Interrupted before it was sent: it never runs, and nothing needs a signal
                    # (a cold Julia compiling its first cell is where a forced SIGINT hurts).
                    self._interrupt_pending = False
                    ex.interrupt.reach(InterruptStep.UNSENT)
                    ex.resolve("int", "InterruptException")
                else:
                    await j.send(frame)
                # Shielded: cancelling this task must not cancel the future, which stays
                # the cell's fate while _settle interrupts it.
                result = await asyncio.shield(ex.future)
                if result.status == "interrupted":
                    await ex.stop_children(j)
            except asyncio.CancelledError:
                if self._alive() and not ex.future.done():
                    # The caller gave up on the cell (a timeout, a cancelled task), but Julia
                    # still runs it, perhaps blocked in C: it is interrupted as interrupt()
                    # would, and the next execution waits until it has ended, instead of
                    # queueing behind it.
                    self._settling = asyncio.create_task(self._settle(ex))
                raise
            finally:
                if self._settling is None:
                    self._end(ex)
            if notice:
                result.notice = notice if not result.notice else f"{notice}\n{result.notice}"
            return result

    def interrupt(self) -> None:
        """Interrupt the running execution, escalating as needed (see JuliaSupervisor)."""
        ex = self.current
        if ex is None and self._lock.locked() and not self._alive():
            # An execution waits for Julia to start (seconds): it is the one the user means, so
            # it is resolved as interrupted instead of sent. A request that arrives within the
            # milliseconds between two executions is not taken for the next one.
            self._interrupt_pending = True
            return
        if ex is None or ex.future.done():
            return
        self._ladder.request(ex.interrupt, self._julia())

    def julia_died(self, death: JuliaDiedError) -> bool:
        """Julia died: the running execution ends with ``death``, or, if its own interrupt
        killed Julia for ignoring every interrupt, as interrupted without its state. Whether
        that was so (a restart follows)."""
        ex = self.current
        restarted = ex is not None and ex.interrupt.restarted
        if ex is not None and not ex.future.done():
            if restarted:
                ex.future.set_result(restarted_result())
            else:
                ex.future.set_exception(death)
        return restarted

    def julia_stopped(self, death: JuliaDiedError) -> None:
        """Julia was stopped (restart, shutdown): the running execution ends with ``death``."""
        ex = self.current
        if ex is not None and not ex.future.done():
            ex.future.set_exception(death)

    def _alive(self) -> bool:
        j = self._julia()
        return j is not None and j.running

    async def _settle(self, ex: Execution) -> None:
        """Interrupt a cancelled execution and wait (bounded by the escalation, which ends in
        a restart) until it has ended."""
        try:
            self._ladder.ensure(ex.interrupt, self._julia())
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(ex.future), settle_wait())
            if (
                ex.future.done()
                and ex.future.exception() is None
                and not ex.future.result().state_kept
            ):
                # The escalation ended in a restart. Nobody reads a cancelled execution's result,
                # so the next execution says that the state was lost.
                self.lost_state = ex.future.result().notice
            j = self._julia()
            if (
                j is not None
                and ex.future.done()
                and ex.future.exception() is None
                and ex.future.result().status == "interrupted"
            ):
                await ex.stop_children(j)
        finally:
            self._end(ex)
            self._settling = None

    async def _sync(self) -> None:
        """Round-trip a SYN so that any SIGINT still in flight lands before the next cell."""
        j = self._julia()
        assert j is not None
        await queries.sync(j, self._new_id())
        self.needs_sync = False

    def _end(self, ex: Execution) -> None:
        """The one place an execution ends: it stops being current, its escalation and input
        requests stop, and a SIGINT it may have left in flight is synced before the next."""
        if self.current is ex:
            self.current = None
        ex.stop_asking()
        if self._ladder.finish(ex.interrupt):
            self.needs_sync = True
