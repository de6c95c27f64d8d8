"""The MCP server's sessions and the calls made to them, without the MCP SDK: named Julia
sessions, each a JuliaSupervisor started on first use, and one call's life in its session.

A call waits for the session's earlier calls (one at a time, in order; sessions run in
parallel), runs its code with a timeout that starts once Julia has started, reports progress
(the latest lines) while it runs, and answers with its outputs (agents/transcript.py: long
output as head and tail). A call past its timeout is interrupted through the supervisor's whole
escalation, never ended by killing Julia, and says whether the state was kept. A call the
client cancels is interrupted the same way, in the background; since it gets no answer, the
session's next call says how it ended.
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import os
import re
from dataclasses import dataclass, field
from typing import Protocol

from jutul_jkernel.agents.transcript import Output, Transcript, result_outputs
from jutul_jkernel.supervisor.coalesce import StreamCoalescer
from jutul_jkernel.supervisor.errors import JuliaDiedError, JuliaStartupError
from jutul_jkernel.supervisor.interrupts import settle_wait
from jutul_jkernel.supervisor.julia_options import julia_flags
from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor
from jutul_jkernel.supervisor.output_sink import Display, OutputSink
from jutul_jkernel.supervisor.results import ExecutionResult

# A call's answer keeps this much stream output from its start and this much from its end: a
# model's context is the scarce thing, and 40,000 characters is about 10,000 tokens.
_OUTPUT_HEAD_CHARS = 20_000
_OUTPUT_TAIL_CHARS = 20_000
# Progress notifications: at most one this often, carrying this many of the latest lines.
_PROGRESS_EVERY = 1.0
_PROGRESS_LINES = 5
# The escalation ends in a restart, after which Julia reports back within its start-up time;
# past settle_wait() and this margin the supervisor itself is stuck, which we say.
_SETTLE_MARGIN = 30.0
# CSI sequences (colours, cursor moves) and OSC ones (hyperlinks, titles): noise to a model.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_NO_INPUT = (
    "an MCP call cannot answer readline(): put the data in the code instead "
    '(e.g. a string literal or `IOBuffer("...")`)'
)


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences."""
    return _ANSI.sub("", text)


class Progress(Protocol):
    """Where a running call reports its progress: the MCP request's context."""

    async def report_progress(
        self, progress: float, total: float | None = None, message: str | None = None
    ) -> None: ...


# ---- sessions ----


@dataclass
class Session:
    """One named Julia session: its supervisor and the queue its calls wait in."""

    name: str
    project: str
    supervisor: JuliaSupervisor
    queue: asyncio.Lock = field(default_factory=asyncio.Lock)  # FIFO: calls run in order
    calls: int = 0
    running: asyncio.Task[list[Output]] | None = None
    # A call the client cancelled, still being interrupted: the next call waits for it and
    # says how it ended, since nobody received its answer.
    abandoned: asyncio.Task[str] | None = None

    @property
    def busy(self) -> bool:
        return self.queue.locked() or (self.abandoned is not None and not self.abandoned.done())


class Sessions:
    """The server's sessions by name, started on first use, all ended by :meth:`close`."""

    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.timeout: float = args.timeout
        self.sessions: dict[str, Session] = {}
        self._closed = False

    def get(self, name: str, project: str | None = None) -> Session:
        """The session ``name``, made now (not yet started) if it is new.

        ``project`` is only taken by a new session; asking an existing one for another project
        raises ValueError, since a running Julia cannot switch its project in place.
        """
        if self._closed:
            msg = "the server is shutting down"
            raise RuntimeError(msg)
        wanted = _project_path(project) if project is not None else None
        s = self.sessions.get(name)
        if s is not None:
            if wanted is not None and wanted != s.project:
                msg = (
                    f"session {name!r} already runs with project {s.project}, not {wanted}: "
                    "use another session name for that project"
                )
                raise ValueError(msg)
            return s
        args = copy.copy(self.args)
        args.project = project if project is not None else self.args.project
        flags = julia_flags(args)
        shown = next((f.removeprefix("--project=") for f in flags if f.startswith("--project=")),
                     "")  # fmt: skip
        supervisor = JuliaSupervisor(
            args.julia, flags, threads=args.threads, env=dict(args.env) or None
        )
        s = self.sessions[name] = Session(name, shown, supervisor)
        return s

    def known(self, name: str) -> Session:
        s = self.sessions.get(name)
        if s is None:
            names = ", ".join(sorted(self.sessions)) or "none yet"
            msg = f"no session named {name!r} (sessions: {names}); julia_eval starts one"
            raise ValueError(msg)
        return s

    async def close(self) -> None:
        """End every session's Julia (ask, wait, SIGTERM, SIGKILL)."""
        self._closed = True
        await asyncio.gather(
            *(s.supervisor.shutdown() for s in self.sessions.values()), return_exceptions=True
        )

    def kill_now(self) -> None:
        """SIGKILL every Julia at once (signal handlers, and the last thing main does)."""
        for s in self.sessions.values():
            s.supervisor.kill_now()


def _project_path(project: str) -> str:
    return project if project.startswith("@") else os.path.abspath(os.path.expanduser(project))


# ---- one call ----


async def evaluate(
    sessions: Sessions,
    code: str,
    name: str,
    timeout: float | None,
    project: str | None,
    ctx: Progress | None = None,
) -> list[Output]:
    """Run ``code`` in session ``name`` (queued behind its earlier calls); return its outputs."""
    s = sessions.get(name, project)
    limit = sessions.timeout if timeout is None else timeout
    async with s.queue:
        before: list[Output] = []
        if s.abandoned is not None:
            said = await asyncio.shield(s.abandoned)  # a cancelled wait must not cancel it
            s.abandoned = None
            before.append(Output("notice", said))
        try:
            # Before the clock starts: the timeout is for the code, not for Julia's start-up.
            await s.supervisor.start()
        except JuliaStartupError as exc:
            return [*before, Output("error", f"{exc.ename}: {exc}")]
        s.calls += 1
        transcript = Transcript(_OUTPUT_HEAD_CHARS, _OUTPUT_TAIL_CHARS)
        out = StreamCoalescer(transcript.stream)

        def on_display(shown: Display) -> None:
            out.flush()
            transcript.display(shown)

        sink = OutputSink(stream=out.write, display=on_display, input=_refuse_input)
        task = asyncio.create_task(_run(s, code, sink, f"call[{s.calls}]"))
        s.running = task
        loop = asyncio.get_running_loop()
        started = loop.time()
        try:
            finished = await _wait(task, limit, transcript, out, started, ctx)
            if not finished:
                await s.supervisor.interrupt()
                extra = await _ended(task)
                extra = _after_timeout(extra, limit)
            else:
                extra = task.result()
        except asyncio.CancelledError:
            # The client cancelled the request (or the server is ending): the call is
            # interrupted as a timeout would, in the background, and told to the next call.
            s.abandoned = asyncio.create_task(_abandon(s, task, started))
            raise
        finally:
            if s.abandoned is None:
                s.running = None
            out.flush(final=True)
    return before + transcript.finish(extra)


async def _run(s: Session, code: str, sink: OutputSink, label: str) -> list[Output]:
    """One execution's closing outputs: its result, or why it has none."""
    try:
        await s.supervisor.start()
        result: ExecutionResult = await s.supervisor.execute(code, sink, name=label)
    except JuliaDiedError as exc:
        return [Output("error", f"{exc.ename}: {exc}\nThe next call starts a fresh Julia.")]
    except JuliaStartupError as exc:
        return [Output("error", f"{exc.ename}: {exc}")]
    outputs = result_outputs(result)
    if result.status == "interrupted":
        outputs[-1].text = (
            "InterruptException: interrupted; state kept."
            if result.state_kept
            else "InterruptException: interrupted; Julia did not respond and was restarted: "
            "state lost."
        )
    return outputs


async def _wait(
    task: asyncio.Task[list[Output]],
    limit: float,
    transcript: Transcript,
    out: StreamCoalescer,
    started: float,
    ctx: Progress | None,
) -> bool:
    """Wait for ``task`` up to ``limit`` seconds, reporting progress; whether it finished."""
    loop = asyncio.get_running_loop()
    deadline = started + limit
    seen = -1
    while True:
        left = deadline - loop.time()
        if left <= 0:
            return False
        done, _ = await asyncio.wait({task}, timeout=min(left, _PROGRESS_EVERY))
        if done:
            return True
        out.flush()
        printed = transcript.kept_chars + transcript.cut_chars
        if ctx is not None and printed != seen:
            seen = printed
            lines = [strip_ansi(line) for line in transcript.recent_lines(_PROGRESS_LINES)]
            await ctx.report_progress(round(loop.time() - started, 1), None, "\n".join(lines))


async def _ended(task: asyncio.Task[list[Output]]) -> list[Output]:
    """The outputs of an interrupted call: the escalation ends it, in a restart at worst."""
    try:
        return await asyncio.wait_for(asyncio.shield(task), settle_wait() + _SETTLE_MARGIN)
    except (TimeoutError, asyncio.TimeoutError):
        wait = settle_wait() + _SETTLE_MARGIN
        msg = f"the call did not end within {wait:.0f} s of its interrupt; see julia_restart"
        return [Output("error", msg)]


def _after_timeout(extra: list[Output], limit: float) -> list[Output]:
    """Say that the timeout interrupted the call (it may also have just finished)."""
    if not extra or not extra[-1].text.startswith("InterruptException: interrupted;"):
        return extra
    kept = extra[-1].text.removeprefix("InterruptException: interrupted;").strip()
    extra[-1].text = f"InterruptException: timeout: interrupted after {limit:g} s; {kept}"
    return extra


async def _abandon(s: Session, task: asyncio.Task[list[Output]], started: float) -> str:
    """Interrupt a cancelled call and say how it ended, for the session's next call."""
    try:
        await s.supervisor.interrupt()
        extra = await _ended(task)
    finally:
        s.running = None
    took = asyncio.get_running_loop().time() - started
    ending = "\n".join(o.text.rstrip("\n") for o in extra if o.text) or "it ended."
    return f"The previous call, cancelled by the client after {took:.0f} s, ended:\n{ending}"


async def _refuse_input(prompt: str, password: bool) -> str:
    raise RuntimeError(_NO_INPUT)
