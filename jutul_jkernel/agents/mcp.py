"""Julia for agents over the Model Context Protocol: named sessions, each a JuliaSupervisor.

``jutul-jkernel-mcp`` (or ``python -m jutul_jkernel.mcp``) is an MCP server on stdio, built on
the official Python SDK (the ``mcp`` extra; no other module of the package imports it). Tools:

- ``julia_eval(code, session, timeout, project)``: the outputs in the order they happened:
  stdout and stderr with ANSI escapes stripped, long output kept as head and tail with a note of
  what was cut, the value's text/plain, an error with the user's own frames; every PNG, JPEG,
  GIF or SVG display and value as image content (an SVG rasterised when cairosvg or
  rsvg-convert is there, else its source as text).
- ``julia_interrupt(session)``, ``julia_restart(session)``, ``julia_sessions()``.

This module is the server's face: the tools, the outputs as MCP content, the command line.
The sessions and what a call does in one (its queue, timeout, interrupt, cancellation and
progress) are agents/mcp_sessions.py.

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
import inspect
import json
import os
import shutil
import signal
import sys
from typing import Any

import psutil
from mcp.server.mcpserver import Context, MCPServer
from mcp.types import CallToolResult, ContentBlock, ImageContent, TextContent

from jutul_jkernel import __version__, settings
from jutul_jkernel.agents.mcp_sessions import Session, Sessions, evaluate, strip_ansi
from jutul_jkernel.agents.transcript import IMAGE_MIMES, Output, render
from jutul_jkernel.supervisor.julia_options import add_julia_options

# A call that runs longer is interrupted (state kept); a client may ask for more per call.
_DEFAULT_TIMEOUT = 300.0
# At end of input an MCP client gives the server 2 s before it kills it (the Python SDK's
# stdio_client: PROCESS_TERMINATION_TIMEOUT), and a kill would leave its Julias to the
# signal handler at best: every Julia is asked to end within this, and killed after it.
_END_OF_INPUT_GRACE = 1.2
_SVG_TIMEOUT = 30.0


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
        try:
            await asyncio.wait_for(sessions.close(), _END_OF_INPUT_GRACE)
        except asyncio.TimeoutError:
            sessions.kill_now()


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
