"""Julia for agents over the Model Context Protocol: named sessions, each a JuliaSupervisor.

``jutul-jkernel-mcp`` (or ``python -m jutul_jkernel.mcp``) is an MCP server on stdio, built on
the official Python SDK (the ``mcp`` extra; no other module of the package imports it). Tools:

- ``julia_eval(code, session, timeout, project)``: the outputs in the order they happened:
  stdout and stderr with ANSI escapes stripped, long output kept as head and tail with a note of
  what was cut, the value's text/plain, an error with the user's own frames; every PNG, JPEG,
  GIF or SVG display and value as image content (an SVG rasterised when cairosvg or
  rsvg-convert is there, else its source as text).
- ``julia_interrupt(session)``, ``julia_restart(session)``, ``julia_sessions()``.

Invariants: a call that runs past its timeout is interrupted through the supervisor's whole
escalation, never ended by killing Julia: it answers with what was printed so far and says
whether the state was kept (or, when Julia ignored every interrupt and had to be restarted,
that it was lost). A call the client cancels is interrupted the same way, and since a
cancelled request gets no answer, the session's next call says how it ended. Calls to one
session run one at a time in the order they came; sessions run in parallel. Ending the server
(end of input, SIGTERM, SIGHUP) ends every Julia; after a SIGKILL of the server, each Julia's
parent-death signal (JKernel's watch_parent!) ends it.
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import copy
import inspect
import json
import os
import re
import shutil
import signal
import sys
from dataclasses import dataclass, field
from typing import Any

import psutil
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ContentBlock, ImageContent, TextContent

from jutul_jkernel import __version__, settings
from jutul_jkernel.agents.transcript import IMAGE_MIMES, Output, Transcript, render, result_outputs
from jutul_jkernel.supervisor.coalesce import StreamCoalescer
from jutul_jkernel.supervisor.errors import JuliaDiedError, JuliaStartupError
from jutul_jkernel.supervisor.interrupts import settle_wait
from jutul_jkernel.supervisor.julia_options import add_julia_options, julia_flags
from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor
from jutul_jkernel.supervisor.output_sink import Display, OutputSink
from jutul_jkernel.supervisor.results import ExecutionResult

# A call's answer keeps this much stream output from its start and this much from its end: a
# model's context is the scarce thing, and 40,000 characters is about 10,000 tokens.
_OUTPUT_HEAD_CHARS = 20_000
_OUTPUT_TAIL_CHARS = 20_000
# A call that runs longer is interrupted (state kept); a client may ask for more per call.
_DEFAULT_TIMEOUT = 300.0
# Progress notifications: at most one this often, carrying this many of the latest lines.
_PROGRESS_EVERY = 1.0
_PROGRESS_LINES = 5
# The escalation ends in a restart, after which Julia reports back within its start-up time;
# past settle_wait() and this margin the supervisor itself is stuck, which we say.
_SETTLE_MARGIN = 30.0
_SVG_TIMEOUT = 30.0
# CSI sequences (colours, cursor moves) and OSC ones (hyperlinks, titles): noise to a model.
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)|\x1b[@-Z\\-_]")
_NO_INPUT = (
    "an MCP call cannot answer readline(): put the data in the code instead "
    '(e.g. a string literal or `IOBuffer("...")`)'
)


def strip_ansi(text: str) -> str:
    """``text`` without terminal escape sequences."""
    return _ANSI.sub("", text)


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
    ctx: Context | None = None,
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
    ctx: Context | None,
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


# ---- MCP content ----


async def contents(outputs: list[Output]) -> list[ContentBlock]:
    """The outputs as MCP content, in order: runs of text as one text block each, images as
    image blocks."""
    blocks: list[ContentBlock] = []
    texts: list[Output] = []

    def flush() -> None:
        body = render(texts)
        if body:
            blocks.append(TextContent(type="text", text=body))
        texts.clear()

    for o in outputs:
        image = await _image(o.data) if o.data else None
        if image is None:
            text, mime = o.text, o.mime
            if mime == "image/svg+xml" and o.data:  # nothing rasterises it: its source stands
                text = str(o.data[mime])
            texts.append(Output(o.kind, strip_ansi(text), mime))
            continue
        flush()
        blocks.append(image)
    flush()
    return blocks


async def _image(data: dict[str, Any]) -> ImageContent | None:
    """The bundle's preferred image as image content: PNG, JPEG and GIF as they are, SVG
    rasterised to PNG (None when nothing can rasterise it: its text then stands instead)."""
    mime = next((m for m in IMAGE_MIMES if m in data), None)
    if mime is None:
        return None
    value = str(data[mime])
    if mime != "image/svg+xml":
        return ImageContent(type="image", data=value, mime_type=mime)
    png = await rasterise_svg(value.encode())
    if png is None:
        return None
    return ImageContent(type="image", data=base64.b64encode(png).decode(), mime_type="image/png")


async def rasterise_svg(svg: bytes) -> bytes | None:
    """PNG bytes of an SVG, by cairosvg or rsvg-convert, whichever is there; else None."""
    try:
        import cairosvg  # type: ignore[import-not-found]  # optional; not a dependency
    except (ImportError, OSError):  # cairosvg absent, or present without its cairo library
        cairosvg = None
    if cairosvg is not None:
        png: bytes = await asyncio.to_thread(cairosvg.svg2png, bytestring=svg)
        return png
    tool = shutil.which("rsvg-convert")
    if tool is None:
        return None
    proc = await asyncio.create_subprocess_exec(
        tool, "--format=png", stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.DEVNULL,
    )  # fmt: skip
    try:
        stdout, _ = await asyncio.wait_for(proc.communicate(svg), _SVG_TIMEOUT)
    except (TimeoutError, asyncio.TimeoutError):
        proc.kill()
        await proc.wait()
        return None
    return stdout if proc.returncode == 0 and stdout else None


# ---- the server ----


def describe(s: Session) -> dict[str, Any]:
    """What julia_sessions says of one session."""
    sup = s.supervisor
    memory = None
    if sup.alive and sup.pid is not None:
        with contextlib.suppress(psutil.Error):
            memory = round(psutil.Process(sup.pid).memory_info().rss / 2**20, 1)
    return {
        "name": s.name,
        "project": s.project,
        "julia_version": sup.julia_version,
        "pid": sup.pid if sup.alive else None,
        "state": "busy" if s.busy else "idle" if sup.alive else "not running",
        "memory_mib": memory,
        "calls": s.calls,
    }


def build_server(sessions: Sessions) -> MCPServer[Any]:
    """The MCP server and its four tools, on ``sessions``."""
    server: MCPServer[Any] = MCPServer(
        "jutul-jkernel",
        version=__version__,
        instructions=(
            "Persistent Julia sessions. julia_eval runs code and keeps variables, functions "
            "and loaded packages between calls; a call past its timeout is interrupted and "
            "the session's state kept. Plots come back as images."
        ),
    )

    async def julia_eval(
        code: str,
        session: str = "default",
        timeout: float | None = None,
        project: str | None = None,
        ctx: Context | None = None,
    ) -> CallToolResult:
        """Evaluate Julia code in a persistent session and return its outputs in order.

        Variables, functions and loaded packages stay between calls to the same session.
        Returns stdout and stderr, the value's text, errors with their stack frames, and
        plots (PNG or SVG displays and values) as images. `timeout` (seconds; default the
        server's --timeout) interrupts a call that runs longer, keeping the session's state.
        `session` names the session (started on first use); `project` (a directory with a
        Project.toml, or @name) applies when the session starts. Calls to one session run
        in order; separate sessions run in parallel.
        """
        try:
            outputs = await evaluate(sessions, code, session, timeout, project, ctx)
        except (ValueError, RuntimeError) as exc:
            return CallToolResult(content=[TextContent(type="text", text=str(exc))], is_error=True)
        return CallToolResult(content=await contents(outputs))

    async def julia_interrupt(session: str = "default") -> str:
        """Interrupt the call running in a session; its state is kept unless Julia ignores
        every interrupt (it is then restarted, and the call says so)."""
        s = sessions.known(session)
        if s.running is None:
            return f"session {session!r} is idle: nothing to interrupt"
        await s.supervisor.interrupt()
        return f"interrupting the running call of session {session!r}; it answers how it ended"

    async def julia_restart(session: str = "default") -> str:
        """Restart a session's Julia: all its variables, functions and packages are lost."""
        s = sessions.known(session)
        await s.supervisor.restart()
        sup = s.supervisor
        return (
            f"session {session!r} restarted: Julia {sup.julia_version}, pid {sup.pid}; state lost"
        )

    async def julia_sessions() -> str:
        """List the sessions: name, project, Julia version, pid, busy or idle, memory."""
        return json.dumps([describe(s) for s in sessions.sessions.values()], indent=1)

    # Descriptions without the docstrings' indentation; plain text answers, not also as JSON.
    for tool in (julia_eval, julia_interrupt, julia_restart, julia_sessions):
        server.add_tool(tool, description=inspect.getdoc(tool), structured_output=False)
    return server


async def serve(sessions: Sessions) -> None:
    """Answer MCP requests on stdin and stdout until end of input; then end every Julia."""
    try:
        await build_server(sessions).run_stdio_async()
    finally:
        await sessions.close()


# ---- command line ----


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jutul-jkernel-mcp",
        description=(
            "An MCP server (stdio) of persistent Julia sessions: julia_eval, julia_interrupt, "
            "julia_restart, julia_sessions. A call past its timeout is interrupted and the "
            "session's state kept."
        ),
        epilog=(
            "Settings not given here come from the same environment variables as the kernel's:\n"
            f"{settings.JULIA}, {settings.JULIA_ARGS}, {settings.THREADS},\n"
            f"{settings.STARTUP_TIMEOUT}.\n\n"
            "Example (Claude Code):\n"
            "  claude mcp add julia -- jutul-jkernel-mcp --project ."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_julia_options(parser, "each session")
    parser.add_argument(
        "--timeout",
        metavar="SECONDS",
        type=settings.seconds_argument,
        default=_DEFAULT_TIMEOUT,
        help="interrupt a julia_eval call after this long unless it asks otherwise "
        f"(default {_DEFAULT_TIMEOUT:g}); the session's state is kept",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    """Serve MCP on this process's stdin and stdout; return the exit status."""
    args = _parser().parse_args(argv)
    sessions = Sessions(args)

    def stop(signum: int, frame: object) -> None:
        # Asked to end (SIGTERM, or SIGHUP when the client goes away): take every Julia along.
        sessions.kill_now()
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    try:
        asyncio.run(serve(sessions))
    except KeyboardInterrupt:
        return 130
    finally:
        sessions.kill_now()
    return 0


if __name__ == "__main__":
    sys.exit(main())
