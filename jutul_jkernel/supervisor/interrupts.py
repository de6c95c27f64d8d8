"""The interrupt ladder: an INT frame, a SIGINT, a burst of SIGINTs, a restart; each step only
until Julia takes the interrupt. The :class:`InterruptLadder` alone moves an execution's
:class:`Interrupt` record (supervisor/interrupt_state.py) up the steps, and races Julia for each
request on the claims directory (supervisor/interrupt_claims.py). Its Julia side, how an
interrupt reaches the running cell, is julia/JKernel/src/interrupts.jl.
"""

from __future__ import annotations

import asyncio
import logging
import os
from collections.abc import Callable
from typing import Any

from jutul_jkernel.protocol.wire import FrameKind, encode
from jutul_jkernel.supervisor.errors import JuliaDiedError
from jutul_jkernel.supervisor.interrupt_claims import Claims
from jutul_jkernel.supervisor.interrupt_state import Interrupt
from jutul_jkernel.supervisor.julia_process import JuliaProcess, ThreadActivity
from jutul_jkernel.supervisor.results import InterruptStep
from jutul_jkernel.supervisor.spawn import REAP_WAIT

log = logging.getLogger(__name__)

# Julia ACKs an interrupt as soon as it reached the evaluation: the listener when it hands an
# INT frame over, the evaluation when it catches one that came by signal (run_cell in eval.jl:
# the cell's code has unwound). An ACK of the latter kind ends the escalation; the cell then
# ends in its own time (rendering the error can take a second when cold), and pressing stop
# again starts a new escalation.
# An INT frame stops every cell that yields (sleep, I/O, printing) and is ACKed in ~1 ms; a cell
# that computes never lets the server read it, so after this long without an ACK, and without
# any frame from Julia, we send SIGINT, which lands at the next safepoint (~2 ms for allocating
# code). While frames still arrive, the ACK is queued behind them (a cell printing flat out) and
# we keep waiting, up to _INT_ACK_MAX: a SIGINT that reaches Julia while it waits in libuv can
# unwind through a libuv callback, and the I/O that callback served then stops for good, so
# that the cell never ends.
# Whether the INT frame or the SIGINT delivers a request is decided by a race on the claims
# directory, so that one request is delivered once: supervisor/interrupt_claims.py says how.
_INT_ACK_WAIT = 0.02
_INT_ACK_MAX = 3.0
# Where /proc shows Julia's main thread (Linux), a thread asleep in the kernel outside the event
# loop (a blocking ccall: nanosleep, a read) in two samples _ACTIVITY_SAMPLE apart, with no CPU
# time between, cannot read the frame: the SIGINT goes then, about as soon as IJulia's (which
# signals at once, whatever Julia does), instead of after the silence. Asleep means state S:
# D is a disk read or a page fault (a fresh Julia on a busy machine), over by itself, which no
# signal interrupts. The danger the silence guards against, a SIGINT landing in a libuv
# callback, needs the thread in the event loop: asleep in epoll_wait (or a futex, where another
# thread may run the loop), which gets no early SIGINT, or running callbacks.
_ACTIVITY_SAMPLE = 0.001
# A running thread cannot be told from /proc to be in the event loop or out of it (a cell that
# compiles for a few milliseconds between yields looks the same as one that never yields), but
# Julia stamps each poll of its event loop on a page we read (julia/JKernel/src/event_loop.jl,
# supervisor/event_loop_page.py). A main thread on a core while the loop has neither polled
# for this long nor polls now computes outside the loop: what the silence waits to learn is
# known already, and the SIGINT goes at once. The same as the silence, so that a cell that
# yields every few milliseconds still stops by the frame.
_LOOP_QUIET = _INT_ACK_WAIT
# Where /proc shows the thread, the silence is also counted in its CPU time: on a loaded
# machine a thread that the frame woke can wait longer than _INT_ACK_WAIT for a core, and a
# SIGINT sent meanwhile lands where the frame was about to be read, in the event loop (a
# fresh session's first interrupt went by SIGINT under load 9-10 in CI). Until the thread has
# run _INT_ACK_WAIT since the frame, or this long has passed (a C call that polls, asleep
# where the event loop would be, never runs), no SIGINT.
_INT_ACK_STARVED = 0.25
# The listener's ACK says only that the INT frame was handed to the cell. Code that catches the
# interrupt can go on, or hang: Pkg's precompile (JuliaLang/julia release-1.12
# base/precompilation.jl, and Pkg release-1.10 src/precompilation.jl) catches it in
# `wait(interrupted_or_done)` and then, with stderr not a TTY, waits in `handle_interrupt` for a
# print task that waits for `first_started`, notified only after that wait returns.
# Unless the cell's code unwinds (run_cell's own ACK) or the cell ends within this long, or
# while Julia compiles (a cold run_cell's error path: see _COMPILE_WAIT), the escalation goes
# on to the SIGINT below, which also reaches the child processes in Julia's group, as Ctrl-C in
# a terminal does.
_UNWIND_WAIT = 1.0
# Allocating loops and blocking ccalls ACK a SIGINT within milliseconds (bench: "interrupt"
# rows); past this the code has no safepoint (a float spin) and we send a burst, which makes
# Julia force the throw. Short, so that every shape stops within a second; not shorter, since
# Julia also forces the throw into its compiler, which a cold cell may be in for a while.
_SIGINT_WAIT = 0.5
# Julia defers a SIGINT while it compiles, and a forced throw that lands in its compiler wedges
# or crashes it (a cold `] add` spends most of its time compiling). Compiling touches new memory
# all the time and a loop without safepoints none, so while the main thread has taken a page
# fault within the last _COMPILE_QUIET we wait for the deferred SIGINT instead of forcing, up to
# _COMPILE_WAIT. Where /proc is missing, nothing tells compiling from spinning: the burst
# follows at once.
_COMPILE_SAMPLE = 0.1
_COMPILE_QUIET = 0.5  # LLVM's own passes can go a quarter second without a new page
_COMPILE_WAIT = 30.0
_BURST_COUNT = 5
_BURST_GAP = 0.05
# After a forced throw the ACK follows within milliseconds; past this we restart.
_BURST_WAIT = 3.0
# Once a signal was taken, the cell's result follows within seconds (rendering the error is
# the slow part when cold); past this Julia is wedged and restarted. Unless the cell's code
# caught the interrupt (no ACK from run_cell, only the listener's for the claimed request) and
# goes on: it gets the interrupt again, as a new request, as the INT frame's rung does after
# _UNWIND_WAIT; a wedged Julia ends in that request's restart.
_AFTER_SIGNAL_WAIT = 15.0


def settle_wait() -> float:
    """How long the whole escalation, then a kill, can take: a cancelled execution waits this."""
    return (
        _INT_ACK_MAX
        + _UNWIND_WAIT
        + _COMPILE_WAIT
        + _SIGINT_WAIT
        + _COMPILE_WAIT
        + _BURST_COUNT * _BURST_GAP
        + _BURST_WAIT
        + _AFTER_SIGNAL_WAIT
        + 2 * REAP_WAIT
    )


class InterruptLadder:
    """Escalates the interrupt requests of executions (one supervisor's)."""

    def __init__(self, claims: Claims, new_id: Callable[[], int]) -> None:
        self.claims = claims
        self._new_id = new_id  # () -> a request id never used before by this supervisor

    def request(self, it: Interrupt, j: JuliaProcess | None) -> None:
        """The user asked to interrupt (again): escalate, unless an escalation under way
        answers it."""
        if it.task and not it.task.done():
            if not it.taken:
                # The escalation under way answers it; should the cell catch that interrupt and
                # go on, this one starts over once Julia has taken it.
                it.again = True
                return
            it.task.cancel()  # Julia took the last one and the cell went on: start over
        self._start(it, j)

    def ensure(self, it: Interrupt, j: JuliaProcess | None) -> None:
        """An escalation is under way (a cancelled execution must end)."""
        if it.task is None or it.task.done():
            it.task = asyncio.create_task(self._escalate(it, j))

    def finish(self, it: Interrupt) -> bool:
        """The execution ended: stop escalating, settle its claims. Whether a SIGINT of its may
        still be on its way (the next execution must sync first)."""
        if it.task is not None and not it.task.done():
            it.task.cancel()
        self.claims.settle(it.requests)
        return it.signalled and not it.restarted

    def _start(self, it: Interrupt, j: JuliaProcess | None) -> None:
        it.taken = it.again = False
        it.task = asyncio.create_task(self._escalate(it, j))

    def _start_over_if_asked_again(self, it: Interrupt, j: JuliaProcess) -> bool:
        """Julia took the interrupt; if another was asked for meanwhile and the cell goes on
        (its code caught the first), escalate anew for that one. Whether it did."""
        if not it.again or it.result.done():
            return False
        self._start(it, j)
        return True

    async def _escalate(self, it: Interrupt, j: JuliaProcess | None) -> None:
        """INT frame, SIGINT, a burst of SIGINTs, a restart: each step only until Julia ACKs."""
        if j is None or j.dead:
            return
        ack = j.replies.expect(it.execution)
        it.discarding = True
        if j.pipes is not None:
            j.pipes.resume()  # an interrupt never waits for output to drain: it is dropped now
        try:
            it.reach(InterruptStep.FRAME)
            acks = it.acks
            request = self._new_id()
            it.requests.append(request)
            await j.send(encode(FrameKind.INT, it.execution, request))
            handed = await _acked_before_silence(j, it, ack)
            if not handed and not self.claims.claim(request):
                # The listener claimed it as the silence ran out: the frame delivers it, and
                # its ACK is on the way.
                await _taken(it, ack, _INT_ACK_MAX)
                handed = True
            if handed:
                # Handed over; the cell's own ACK follows the listener's once its code unwound.
                # Cold, unwinding means compiling run_cell's error path: wait while it compiles.
                ack = j.replies.expect(it.execution)
                faults = j.main_thread_faults()
                if (
                    it.acks >= acks + 2
                    or await _taken(it, ack, _UNWIND_WAIT)
                    or await _taken_while_compiling(j, it, ack, faults)
                ):
                    self._start_over_if_asked_again(it, j)
                    return
                log.info(
                    "execution %s goes on after its interrupt; interrupting again", it.execution
                )
            it.reach(InterruptStep.SIGINT)
            faults = j.main_thread_faults()
            log.debug("execution %s: no ACK of the INT frame; sending SIGINT", it.execution)
            j.interrupt()
            claimed, acks = not handed, it.acks  # the SIGINT delivers this request
            taken = await _taken(it, ack, _SIGINT_WAIT)
            if not taken:
                taken = await _taken_while_compiling(j, it, ack, faults)
            if not taken:
                log.warning("execution %s ignored SIGINT; forcing the interrupt", it.execution)
                it.reach(InterruptStep.FORCED)
                for _ in range(_BURST_COUNT):
                    j.interrupt()
                    if taken := await _taken(it, ack, _BURST_GAP):
                        break
                taken = taken or await _taken(it, ack, _BURST_WAIT)
            # A signal can land anywhere, even in a libuv callback, and leave the server unable
            # to finish the cell. Taken, the cell ends in seconds; past _AFTER_SIGNAL_WAIT a
            # restart beats a session that never answers.
            # A cell whose own code caught the interrupt may go on meanwhile, and a new
            # interrupt then starts over (see request()).
            if taken:
                log.debug("execution %s: Julia took the interrupt (%s)", it.execution, it.step)
                it.taken = True
                if self._start_over_if_asked_again(it, j) or await _finished(
                    it, _AFTER_SIGNAL_WAIT
                ):
                    return
                if claimed and not it.forced and it.acks < acks + 2:
                    log.info("execution %s goes on after its interrupt; asking again", it.execution)
                    self._start(it, j)
                    return
            log.warning("execution %s survived a forced interrupt; restarting Julia", it.execution)
            it.reach(InterruptStep.RESTART)
            await j.kill()
        except (ConnectionError, JuliaDiedError):
            return
        finally:
            # A late ACK finds no waiter and is dropped; a death finds no orphaned future. (A
            # later escalation of the same execution has its own waiter under the same key.)
            j.replies.forget(it.execution, ack)
            if ack.done() and not ack.cancelled():
                ack.exception()  # the death that woke it is the execution's to report


async def _acked_before_silence(j: JuliaProcess, it: Interrupt, ack: asyncio.Future[Any]) -> bool:
    """Wait for the ACK while Julia keeps sending frames; False after _INT_ACK_WAIT of silence
    (and, where /proc shows the thread, as much of its CPU time, or _INT_ACK_STARVED), or as
    soon as a silent Julia's main thread shows that it is blocked in a C call, or computes
    while its event loop has been quiet for _LOOP_QUIET."""
    loop = asyncio.get_running_loop()
    sent = loop.time()
    last = j.main_thread_activity()
    sampled = last is not None  # /proc shows the thread
    ran_from = last.cpu_ns if last is not None else 0
    if _computes_without_polling(j, last):
        log.debug("execution %s: Julia computes and its event loop is quiet", it.execution)
        return False
    while True:
        until = min(max(sent, j.last_frame_at) + _INT_ACK_WAIT, sent + _INT_ACK_MAX)
        if (
            last is not None
            and j.last_frame_at <= sent
            and last.cpu_ns - ran_from < _INT_ACK_WAIT * 1e9
        ):
            until = max(until, min(loop.time(), sent + _INT_ACK_STARVED) + _ACTIVITY_SAMPLE)
        left = until - loop.time()
        if left <= 0:
            return ack.done() or it.result.done()
        if await _taken(it, ack, min(left, _ACTIVITY_SAMPLE) if sampled else left):
            return True
        if not sampled or j.last_frame_at > sent:
            continue  # no /proc, or Julia is sending: its ACK may be queued behind the rest
        now = j.main_thread_activity()
        if _cannot_read(last, now):
            log.debug("execution %s: Julia cannot read the INT frame (%s)", it.execution, now)
            return False
        if _computes_without_polling(j, now):
            log.debug("execution %s: Julia computes and its event loop is quiet", it.execution)
            return False
        last = now
        sampled = now is not None


def _cannot_read(last: ThreadActivity | None, now: ThreadActivity | None) -> bool:
    """Whether Julia's main thread, sampled ``last`` and ``now`` while the INT frame waits, is
    blocked in a C call and so cannot read the frame (see _ACTIVITY_SAMPLE)."""
    if now is None or last is None:
        return False
    return (
        now.state == "S"
        and last.state == "S"
        and now.cpu_ns == last.cpu_ns
        and _outside_event_loop(now.wchan)
        and _outside_event_loop(last.wchan)
    )


def _computes_without_polling(j: JuliaProcess, now: ThreadActivity | None) -> bool:
    """Whether Julia's main thread, sampled ``now``, is on a core while its event loop has
    neither polled for _LOOP_QUIET nor polls now (the stamps of julia/JKernel/src/
    event_loop.jl): it computes outside the event loop and will read the frame only at its next
    yield, which is what the silence waits for. State R is also a thread waiting for a core,
    which may have been stopped anywhere, in the event loop's other phases (its timers) too:
    only while no thread of the machine waits for a core is R on one. (/proc's CPU times move
    by scheduler ticks, 4 ms here, and cannot tell within a millisecond.)"""
    if now is None or now.state != "R":
        return False
    polls = j.event_loop_polls()
    return polls is not None and polls.quiet_for() >= _LOOP_QUIET and no_thread_waits_for_a_core()


def no_thread_waits_for_a_core() -> bool:
    """Whether every runnable thread of the machine is on a core now (Linux: /proc/stat's
    procs_running, which counts the running and the waiting, this one included, against the
    cores online); False where it cannot be read."""
    try:
        stat = _read_small_tail("/proc/stat", b"procs_running ")
        return 0 < int(stat.split()[0]) <= (os.cpu_count() or 1)
    except (OSError, IndexError, ValueError):
        return False


def _read_small_tail(path: str, key: bytes) -> str:
    """The text after ``key`` in the file at ``path`` (read whole: /proc/stat is a few kB)."""
    fd = os.open(path, os.O_RDONLY)
    try:
        data = b"".join(iter(lambda: os.read(fd, 65536), b""))
    finally:
        os.close(fd)
    return data[data.index(key) + len(key) :].decode("ascii", "replace")


def _outside_event_loop(wchan: str) -> bool:
    """Whether a sleeping thread's kernel function is known and is not where Julia waits for
    events: epoll_wait (libuv's loop on Linux: `do_epoll_wait`, `ep_poll`) or a futex (a
    thread waiting for work while another runs the loop, or for the GC)."""
    return wchan not in ("", "0") and "poll" not in wchan and "futex" not in wchan


async def _taken_while_compiling(
    j: JuliaProcess, it: Interrupt, ack: asyncio.Future[Any], faults: int | None
) -> bool:
    """Wait for the ACK while Julia's main thread keeps touching new memory (see
    _COMPILE_WAIT); False once it touched none for _COMPILE_QUIET, or at the bound. ``faults``
    was read at least _COMPILE_QUIET ago."""
    if faults is None:
        return False
    loop = asyncio.get_running_loop()
    now = loop.time()
    until = now + _COMPILE_WAIT
    last_growth = now - _SIGINT_WAIT  # faults was read when the SIGINT was sent
    logged = False
    while True:
        current = j.main_thread_faults()
        now = loop.time()
        if current is None or now >= until:
            return False
        if current != faults:
            faults, last_growth = current, now
            if not logged:
                log.info(
                    "execution %s: Julia is compiling; waiting for it to take the SIGINT",
                    it.execution,
                )
                logged = True
        elif now - last_growth >= _COMPILE_QUIET:
            return False
        if await _taken(it, ack, _COMPILE_SAMPLE):
            return True


async def _taken(it: Interrupt, ack: asyncio.Future[Any], timeout: float) -> bool:
    """Wait up to ``timeout`` s for Julia to ACK the interrupt or end the execution."""
    if not (ack.done() or it.result.done()):
        await asyncio.wait({ack, it.result}, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
    return ack.done() or it.result.done()


async def _finished(it: Interrupt, timeout: float) -> bool:
    """Wait up to ``timeout`` s for the execution's result; return whether it came."""
    if not it.result.done():
        await asyncio.wait({it.result}, timeout=timeout)
    return it.result.done()
