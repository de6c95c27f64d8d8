"""Julia for agents and scripts: clikernel's stdin/stdout protocol on a :class:`JuliaSupervisor`.

``python -m jutul_jkernel.agent`` (or ``jutul-jkernel-agent``) keeps one Julia session alive
and answers plain-text requests on stdin with plain-text responses on stdout, the protocol of
clikernel (a Python worker for LLM agents) as its versions 0.1.0 to 0.1.6 speak it (0.1.7
renamed the start-up line's "first delimiter" to "session delimiter"):

- Start-up prints its loading status and whatever Julia printed while starting, then
  ``loading complete. first delimiter:`` and, on a line of its own, a random delimiter that
  stays fixed for the session.
- A line is a request. ``--`` on its own line opens a multi-line request, which the delimiter
  line closes. Every complete request is acknowledged with ``.`` on its own line before it runs.
  ``exit``, ``exit()``, ``quit`` or ``quit()`` as a request, or end of input, is acknowledged
  (at end of input, nothing is), answered with the delimiter, and ends the agent with status 0.
- The response is the request's rendered output, then the delimiter line. One non-empty output
  is printed as it is; several are wrapped in tags (``<stdout>``, ``<stderr>``,
  ``<display_data mime="...">``, ``<execute_result>``, ``<error>``, ``<notice>``), in the order
  they happened. A rich value shows its text/plain; an image shows a note of its MIME type,
  size and (PNG) dimensions, never its bytes. A misplaced delimiter line, or input that ends
  inside a multi-line request, gets a ``<protocol-error>`` response; nothing runs.

Invariants: exactly one response per request, always ended by the delimiter line; no line of a
response body equals the delimiter (a body line that starts with the delimiter, after any
backslashes, gets one more backslash in front, which a client can strip to recover it); SIGINT
interrupts the running request and never the agent; Julia runs in its own process group, so a
Ctrl-C on the terminal reaches only the agent, which passes it on through the supervisor.
POSIX only: it needs termios and asyncio's signal handlers.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import re
import secrets
import signal
import string
import sys
import termios
import threading
import tty
from collections.abc import Callable
from typing import IO, Any

from jutul_jkernel import __version__, settings
from jutul_jkernel.agents.transcript import Output, Transcript, render, result_outputs
from jutul_jkernel.supervisor.coalesce import StreamCoalescer
from jutul_jkernel.supervisor.errors import JuliaDiedError, JuliaStartupError
from jutul_jkernel.supervisor.julia_options import add_julia_options, julia_flags
from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor
from jutul_jkernel.supervisor.output_sink import Display, OutputSink

MARKER = "loading complete. first delimiter:"
MULTILINE = "--"
EXIT_REQUESTS = frozenset({"exit", "exit()", "quit", "quit()"})

# 10 letters and digits: ~60 bits, so the delimiter turns up in code or logs only on purpose.
_DELIMITER_CHARS = string.ascii_letters + string.digits
_DELIMITER_LENGTH = 10
# A response keeps this much of a request's output from its start and this much from its end;
# what lies between is replaced by a line saying how much was cut. A runaway printing loop then
# costs bounded memory here and a bounded read for the client.
_OUTPUT_HEAD_CHARS = 256 * 1024
_OUTPUT_TAIL_CHARS = 256 * 1024
# The end of the line breaks Python's str.splitlines() knows: a client may split on any of them,
# so a delimiter after any of them counts as the start of a line.
_LINE_START = "(?:^|(?<=[\n\r\x0b\x0c\x1c\x1d\x1e\x85\u2028\u2029]))"
# Ctrl-D on a terminal whose canonical mode is off arrives as this byte, not as end of input.
_TTY_EOF = "\x04"
_NO_INPUT = (
    "the agent's stdin carries requests, not input for Julia; put the data in the code instead "
    '(e.g. a string literal or `IOBuffer("...")`)'
)


def new_delimiter() -> str:
    """A fresh session delimiter: ``--`` and random letters and digits."""
    return "--" + "".join(secrets.choice(_DELIMITER_CHARS) for _ in range(_DELIMITER_LENGTH))


def escape_body(body: str, delimiter: str) -> str:
    r"""Put one more backslash before every line that starts with ``\*<delimiter>``.

    After this no line of ``body`` starts with the delimiter, and :func:`unescape_body` undoes it.
    """
    pattern = re.compile(_LINE_START + r"(?=\\*" + re.escape(delimiter) + ")", re.MULTILINE)
    return pattern.sub("\\\\", body)


def unescape_body(body: str, delimiter: str) -> str:
    """Undo :func:`escape_body`: what a client does to see the output exactly as printed."""
    pattern = re.compile(_LINE_START + r"\\(?=\\*" + re.escape(delimiter) + ")", re.MULTILINE)
    return pattern.sub("", body)


# ---- the agent ----


class Agent:
    """Serve the protocol on ``stdin``/``stdout`` (binary streams) with one supervised Julia."""

    def __init__(
        self,
        supervisor: JuliaSupervisor,
        stdin: IO[bytes],
        stdout: IO[bytes],
        *,
        delimiter: str | None = None,
    ) -> None:
        self.supervisor = supervisor
        self.delimiter = delimiter or new_delimiter()
        self._stdin = stdin
        self._stdout = stdout
        self._tty = stdin.isatty()
        self._lines: asyncio.Queue[str | None] = asyncio.Queue()
        self._requests = 0
        self._running: int | None = None  # number of the request in flight
        self._interrupted: int | None = None  # request that got a SIGINT
        self._stray: list[tuple[str, bytes]] = []  # printed between requests
        self._tasks: set[asyncio.Task[Any]] = set()
        supervisor.route_stray_output(
            OutputSink(stream=lambda stream, data: self._stray.append((stream, data)))
        )

    # ---- lifecycle ----

    async def run(self) -> int:
        """Start Julia, then answer requests until exit or end of input; return the status."""
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGINT, self.on_sigint)
        threading.Thread(target=self._read_lines, args=(loop,), daemon=True).start()
        self._write("please wait, loading Julia...\n")
        try:
            await self.supervisor.start()
        except JuliaStartupError as exc:
            self._write(f"error: Julia did not start, so the agent stops.\n{exc}\n")
            return 1
        self._write(await self._banner())
        self._write(f"{MARKER}\n{self.delimiter}\n")
        try:
            await self._serve()
        except BrokenPipeError:
            return 1  # the client stopped reading: nobody to answer
        finally:
            await self.supervisor.shutdown()
        return 0

    def on_sigint(self) -> None:
        """Interrupt the running request; between requests there is nothing to interrupt."""
        if self._running is None:
            # Said on stderr, which the protocol leaves free: stdout carries only responses.
            print(
                "jutul-jkernel-agent: SIGINT with no request running: ignored",
                file=sys.stderr,
                flush=True,
            )
            return
        self._interrupted = self._running
        task = asyncio.ensure_future(self.supervisor.interrupt())
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _banner(self) -> str:
        """What Julia printed while starting, and a line saying which Julia this is."""
        sup = self.supervisor
        early = ""
        if sup.log_path is not None:  # written before the server took fds 1 and 2 over
            with contextlib.suppress(OSError):
                early = sup.log_path.read_text(errors="replace")
        # Written after that, it may still be in the server's pipes: an execution's result comes
        # only after all output before it, so one empty execution brings all of it here.
        chunks = self._take_stray()
        try:
            await sup.execute("nothing", lambda stream, data: chunks.append((stream, data)))
        except JuliaDiedError as exc:
            early += f"{exc}\n"
        early += b"".join(data for _, data in chunks).decode("utf-8", "replace")
        early = early if not early or early.endswith("\n") else early + "\n"
        return (
            f"{early}Julia {sup.julia_version} (pid {sup.pid}), supervised by "
            f"jutul-jkernel {__version__}. A line is a request; for several lines send --, the "
            "lines, then the delimiter. SIGINT interrupts a request and keeps Julia's state; "
            "exit() ends the session.\n"
        )

    # ---- requests ----

    async def _serve(self) -> None:
        while True:
            line = await self._lines.get()
            if line is None or (self._tty and line.startswith(_TTY_EOF)):
                self._respond("")
                return
            line = line.rstrip("\r\n")
            if line == self.delimiter:
                self._respond(
                    "<protocol-error>\nno multi-line request is open: start one with a line "
                    f"holding only {MULTILINE}\n</protocol-error>"
                )
                continue
            if line == MULTILINE:
                code = await self._read_block()
                if code is None:
                    self._respond(
                        "<protocol-error>\ninput ended inside a multi-line request; its "
                        f"closing line {self.delimiter} never came, so nothing ran\n"
                        "</protocol-error>"
                    )
                    return
            elif line.strip() in EXIT_REQUESTS:
                self._write(".\n")
                self._respond("")
                return
            else:
                code = line
            self._write(".\n")
            self._respond(await self.execute(code))

    async def _read_block(self) -> str | None:
        lines: list[str] = []
        while True:
            line = await self._lines.get()
            if line is None or (self._tty and line.startswith(_TTY_EOF)):
                return None
            if line.rstrip("\r\n") == self.delimiter:
                return "".join(lines)
            lines.append(line)

    async def execute(self, code: str) -> str:
        """Run one request in Julia and return its rendered body (not yet escaped)."""
        self._requests += 1
        number = self._requests
        response = Transcript(_OUTPUT_HEAD_CHARS, _OUTPUT_TAIL_CHARS, "jutul-jkernel agent")
        out = StreamCoalescer(response.stream)
        for stream, data in self._take_stray():  # printed by background tasks since the last
            out.write(stream, data)

        def on_display(shown: Display) -> None:
            out.flush()
            response.display(shown)

        self._running = number
        extra: list[Output]
        try:
            # Started here, not inside execute: a SIGINT while Julia is (re)starting then
            # cancels the request before it runs instead of being lost.
            await self.supervisor.start()
            if self._interrupted == number:
                # Run nothing, only to hear what the supervisor has to say (a lost state).
                notice = (await self.supervisor.execute("nothing")).notice
                extra = [Output("notice", notice)] if notice else []
                extra.append(Output("error", "InterruptException: interrupted before it ran."))
            else:
                sink = OutputSink(stream=out.write, display=on_display, input=_refuse_input)
                result = await self.supervisor.execute(code, sink, name=f"request[{number}]")
                extra = result_outputs(result)
        except JuliaDiedError as exc:
            message = f"{exc.ename}: {exc}\nThe next request starts a fresh Julia."
            extra = [Output("error", message)]
        except JuliaStartupError as exc:
            extra = [Output("error", f"{exc.ename}: {exc}")]
        finally:
            self._running = None
            out.flush(final=True)
        return render(response.finish(extra))

    def _take_stray(self) -> list[tuple[str, bytes]]:
        chunks, self._stray = self._stray, []
        return chunks

    # ---- I/O ----

    def _respond(self, body: str) -> None:
        body = escape_body(body, self.delimiter)
        if body and not body.endswith("\n"):
            body += "\n"
        self._write(f"{body}{self.delimiter}\n")

    def _write(self, text: str) -> None:
        self._stdout.write(text.encode("utf-8", "replace"))
        self._stdout.flush()

    def _read_lines(self, loop: asyncio.AbstractEventLoop) -> None:
        """Feed stdin's lines to the event loop; None at end of input (runs in a thread).

        Reads the file descriptor itself: a daemon thread blocked inside sys.stdin's buffered
        reader holds its lock, and the interpreter aborts at exit when it cannot take that lock.
        """
        put: Callable[[str | None], None] = self._lines.put_nowait
        fd = self._stdin.fileno()
        pending = b""
        try:
            while chunk := os.read(fd, 65536):
                *lines, pending = (pending + chunk).split(b"\n")
                for line in lines:
                    loop.call_soon_threadsafe(put, line.decode("utf-8", "replace") + "\n")
            if pending:  # a last line without its newline is still a request
                loop.call_soon_threadsafe(put, pending.decode("utf-8", "replace"))
        except (OSError, RuntimeError):
            pass  # stdin closed under us (the same as end of input), or the loop is gone
        finally:
            with contextlib.suppress(RuntimeError):  # the loop already closed: nobody waits
                loop.call_soon_threadsafe(put, None)


async def _refuse_input(prompt: str, password: bool) -> str:
    raise RuntimeError(_NO_INPUT)


# ---- terminal ----


def _quiet_terminal(stdin: IO[bytes], stdout: IO[bytes]) -> Callable[[], None]:
    """On a TTY: no echo, no line-length limit, bare LF out; return what restores it.

    Echo would repeat every request back to a client that already knows it. Canonical mode
    would cut lines longer than the terminal's MAX_CANON (4096 bytes on Linux). ISIG stays on,
    so Ctrl-C still sends SIGINT.
    """
    saved: list[tuple[int, list[Any]]] = []
    for stream, index, mask in (
        (stdin, tty.LFLAG, termios.ECHO | termios.ICANON),
        (stdout, tty.OFLAG, termios.ONLCR),
    ):
        if not stream.isatty():
            continue
        fd = stream.fileno()
        attrs = termios.tcgetattr(fd)
        new = [*attrs[:6], list(attrs[6])]
        new[index] &= ~mask
        new[6][termios.VMIN], new[6][termios.VTIME] = 1, 0
        termios.tcsetattr(fd, termios.TCSADRAIN, new)
        saved.append((fd, attrs))

    def restore() -> None:
        for fd, attrs in saved:
            with contextlib.suppress(termios.error, OSError):
                termios.tcsetattr(fd, termios.TCSADRAIN, attrs)

    return restore


# ---- command line ----


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jutul-jkernel-agent",
        description=(
            "A persistent Julia session for agents and scripts: one request per line (or --, "
            "lines, delimiter) on stdin, each acknowledged with '.', answered on stdout and "
            "ended with the session delimiter printed at start-up. SIGINT interrupts the "
            "running request and keeps Julia's state."
        ),
        epilog=(
            "Settings not given here come from the same environment variables as the kernel's:\n"
            f"{settings.JULIA}, {settings.JULIA_ARGS}, {settings.THREADS},\n"
            f"{settings.STARTUP_TIMEOUT}.\n\n"
            "Example:\n"
            "  printf 'x = 21\\n2x\\n' | jutul-jkernel-agent --project ."
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_julia_options(parser, "the agent")
    return parser


def supervisor_from_args(args: argparse.Namespace) -> JuliaSupervisor:
    """A supervisor configured as the command line (then the environment) says."""
    return JuliaSupervisor(
        args.julia, julia_flags(args), threads=args.threads, env=dict(args.env) or None
    )


def main(argv: list[str] | None = None) -> int:
    """Run the agent on this process's stdin and stdout; return the exit status."""
    # Until the event loop takes SIGINT over, an interrupt must not kill the agent either.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    args = _parser().parse_args(argv)
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    restore = _quiet_terminal(stdin, stdout)
    supervisor = supervisor_from_args(args)

    def stop(signum: int, frame: object) -> None:
        # Asked to end (SIGTERM, or SIGHUP when the terminal goes away): take Julia along now.
        supervisor.kill_now()
        restore()
        os._exit(128 + signum)

    for signum in (signal.SIGTERM, signal.SIGHUP):
        signal.signal(signum, stop)
    try:
        return asyncio.run(Agent(supervisor, stdin, stdout).run())
    finally:
        supervisor.kill_now()
        restore()


if __name__ == "__main__":
    raise SystemExit(main())
