"""Executions beside the main one: a subshell's requests, which Julia runs at once, whatever
the main execution does.

The main path (one execution at a time, EXN and COM, the interrupt ladder) is left as it is.
A beside execution is sent as EXS or COS, and Julia runs it at once in a worker task of its
own (julia/JKernel/src/beside.jl). At most ``limit`` run in Julia at once; the rest wait here,
so a burst of subshells is bounded in Julia's tasks and every request still answers. Each
belongs to a route, its subshell's number (1, 2, ...). What it prints arrives in the stdout
pipe routed by its id (supervisor/pipes.py) and goes to its sink, as its frames do; what it,
or a task it started, prints or displays after it ended goes to the route's stray sink (the
subshell's last request), else to the main one's.

No interrupt of the main execution reaches a beside one (as in ipykernel, whose interrupt
reaches the main shell only). :meth:`BesideExecutions.abandon` ends a route's executions at
once (its subshell was deleted) and asks Julia to stop them; when Julia ends, every execution
sent to it fails with the reason, and each route's next execution says that the state was
lost. A slot is given back only once Julia answered or ended, so an abandoned execution that
Julia still runs keeps its slot.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import OrderedDict
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from jutul_jkernel.protocol.wire import Frame, FrameKind, encode
from jutul_jkernel.supervisor.errors import JuliaDiedError
from jutul_jkernel.supervisor.execution import Execution
from jutul_jkernel.supervisor.frame_payloads import display_of
from jutul_jkernel.supervisor.interrupt_state import Interrupt
from jutul_jkernel.supervisor.julia_process import JuliaProcess
from jutul_jkernel.supervisor.output_sink import OutputSink
from jutul_jkernel.supervisor.results import ErrorInfo, ExecutionResult

log = logging.getLogger(__name__)

# How many beside executions Julia runs at once (one worker task each): those beyond wait
# here. Each is a task on Julia's thread 1, so more would not answer sooner.
LIMIT = 8
# Execution ids whose route is remembered after they ended: output a task of theirs prints
# later still reaches their subshell.
_ROUTES_KEPT = 4096


@dataclass(eq=False)
class _Pending:
    """One beside execution, from the request until Julia answered it (or ended)."""

    route: int
    future: asyncio.Future[ExecutionResult]
    execution: Execution | None = None  # once sent
    julia: JuliaProcess | None = None  # the Julia it was sent to
    holds_slot: bool = False


class BesideExecutions:
    """One supervisor's beside executions (all on its event loop)."""

    def __init__(
        self,
        *,
        start: Callable[[], Awaitable[None]],
        julia: Callable[[], JuliaProcess | None],
        new_id: Callable[[], int],
        stray: Callable[[], OutputSink],
        limit: int = LIMIT,
    ) -> None:
        self._start = start  # starts Julia unless it runs (JuliaSupervisor.start)
        self._julia = julia  # the connected Julia, if any
        self._new_id = new_id  # the supervisor's ids: one sequence for every frame
        self._main_stray = stray  # the main route's stray sink
        self._slots = asyncio.Semaphore(limit)
        self._pending: set[_Pending] = set()
        self._running: dict[int, _Pending] = {}  # sent, not yet answered, by execution id
        self._route_of: OrderedDict[int, int] = OrderedDict()  # execution id -> route
        self._strays: dict[int, OutputSink] = {}  # route -> its stray sink
        self._lost: str | None = None  # what each route's next execution says after a death
        self._told: set[int] = set()  # the routes that said it

    # ---- what the supervisor offers ----

    async def run(
        self, frame_of: Callable[[int], bytes], sink: OutputSink, route: int
    ) -> ExecutionResult:
        """Send the frame ``frame_of(id)`` makes once a slot is free; wait for the result."""
        if route < 1:
            msg = f"a beside execution's route is a subshell's number (1, 2, ...), not {route}"
            raise ValueError(msg)
        p = _Pending(route, asyncio.get_running_loop().create_future())
        self._pending.add(p)
        try:
            if await self._slot_for(p):
                await self._send(p, frame_of, sink)
            result = await asyncio.shield(p.future)
        except asyncio.CancelledError:
            # The caller gave up: Julia stops it (if it runs), and the slot is given back
            # once Julia answered.
            if not p.future.done():
                p.future.cancel()
            self._stop_in_julia(p)
            raise
        finally:
            if p.execution is None:  # never sent: nothing in Julia holds the slot
                self._forget(p)
        notice = self._notice_for(route)
        if notice:
            result.notice = notice if not result.notice else f"{notice}\n{result.notice}"
        return result

    def abandon(self, route: int, reason: str) -> None:
        """End every execution of ``route`` now with a ``SubshellDeleted`` error saying
        ``reason``; Julia is asked to stop those it runs. Their later output goes to the main
        route's stray sink."""
        self._strays.pop(route, None)
        for p in [p for p in self._pending if p.route == route]:
            if not p.future.done():
                p.future.set_result(
                    ExecutionResult(
                        status="error", error=ErrorInfo("SubshellDeleted", reason, [reason])
                    )
                )
            self._stop_in_julia(p)

    def route_stray(self, route: int, sink: OutputSink | None) -> None:
        """Where what ``route``'s executions print after they ended goes (None: the main
        route's stray sink)."""
        if sink is None:
            self._strays.pop(route, None)
        else:
            self._strays[route] = sink

    @property
    def running(self) -> int:
        """Beside executions sent to Julia and not yet answered."""
        return len(self._running)

    # ---- what the router and the supervisor's deaths call ----

    def take(self, j: JuliaProcess, frame: Frame) -> bool:
        """Handle a frame about a beside execution (its id is the frame's first argument);
        whether it was one."""
        eid = int(frame.args[0])
        p = self._running.get(eid)
        if p is not None and p.execution is not None:
            p.execution.take(j, frame)
            if frame.kind is FrameKind.RES:
                self._forget(p)
            return True
        route = self._route_of.get(eid)
        if route is None:
            return False
        if frame.kind in (FrameKind.DSP, FrameKind.CLR):  # a task that outlived its request
            self._stray_of(route).show(display_of(frame))
        return True

    def sink_of(self, eid: int) -> OutputSink | None:
        """The sink for output of beside execution ``eid``: its own while it runs, then its
        route's stray sink; None if ``eid`` is no beside execution known."""
        p = self._running.get(eid)
        if p is not None and p.execution is not None:
            return p.execution.sink
        route = self._route_of.get(eid)
        return None if route is None else self._stray_of(route)

    def output(self, eid: int, name: str, data: bytes) -> None:
        """Bytes the pipes routed to execution ``eid``."""
        (self.sink_of(eid) or self._main_stray()).write(name, data)

    def julia_ended(self, j: JuliaProcess, error: BaseException, lost: str | None) -> None:
        """Julia ``j`` ended: every execution sent to it fails with ``error``; ``lost`` is
        what each route's next execution says (None: nothing, as after a restart asked for)."""
        for p in [p for p in self._pending if p.julia is j]:
            if not p.future.done():
                p.future.set_exception(error)
            self._forget(p)
        self._lost = lost
        self._told.clear()

    # ---- inside ----

    async def _slot_for(self, p: _Pending) -> bool:
        """Wait for a slot; False if the execution ended before one was free (abandoned)."""
        acquire = asyncio.ensure_future(self._slots.acquire())
        waits: set[asyncio.Future[object]] = {acquire, p.future}  # type: ignore[arg-type]
        try:
            await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            if not acquire.done():
                acquire.cancel()
        got = acquire.done() and not acquire.cancelled() and acquire.exception() is None
        if got:
            p.holds_slot = True
        return got and not p.future.done()

    async def _send(self, p: _Pending, frame_of: Callable[[int], bytes], sink: OutputSink) -> None:
        await self._start()
        if p.future.done():  # abandoned while Julia started
            return
        j = self._julia()
        assert j is not None and j.writer is not None
        if j.pipes is not None and j.pipes.routed is None:
            j.pipes.routed = self.output
        eid = self._new_id()
        p.execution = Execution(eid, sink, p.future, Interrupt(eid, p.future))
        p.julia = j
        self._running[eid] = p
        self._route_of[eid] = p.route
        while len(self._route_of) > _ROUTES_KEPT:
            self._route_of.popitem(last=False)
        try:
            await j.send(frame_of(eid))
        except BaseException:
            self._forget(p)
            raise

    def _stop_in_julia(self, p: _Pending) -> None:
        """Ask Julia to stop a sent execution (an INT frame: no signal, no escalation); what it
        still prints goes stray."""
        ex, j = p.execution, p.julia
        if ex is None or j is None or j.dead or p not in self._pending:
            return
        ex.sink = self._stray_of(p.route)
        frame = encode(FrameKind.INT, ex.id, self._new_id())
        task = asyncio.ensure_future(j.send(frame))
        task.add_done_callback(_quietly)

    def _forget(self, p: _Pending) -> None:
        """The execution is over for Julia too: its slot is free."""
        self._pending.discard(p)
        if p.execution is not None:
            self._running.pop(p.execution.id, None)
            p.execution.stop_asking()
        if p.holds_slot:
            p.holds_slot = False
            self._slots.release()

    def _stray_of(self, route: int) -> OutputSink:
        return self._strays.get(route) or self._main_stray()

    def _notice_for(self, route: int) -> str | None:
        if self._lost is None or route in self._told:
            return None
        self._told.add(route)
        return self._lost


def _quietly(task: asyncio.Future[None]) -> None:
    """A send to a Julia that meanwhile died: its death is reported elsewhere."""
    with contextlib.suppress(asyncio.CancelledError, ConnectionError, JuliaDiedError):
        exc = task.exception()
        if exc is not None:
            log.debug("could not ask Julia to stop a beside execution: %s", exc)
