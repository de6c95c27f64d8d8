"""Run a Julia once, before any kernel does: check it, check its juliaup channel, compile JKernel.

:func:`check_julia` runs ``print(VERSION)`` with the Julia options a kernel would get, so that
a julia that is missing, broken or given a mistyped flag fails at install time rather than at
every kernel start; :func:`check_channel` asks juliaup's launcher whether a ``+channel``
resolves; :func:`precompile_server` compiles the JKernel package (``server.jl --precompile``)
so kernels start from its cache. The installer (:mod:`jutul_jkernel.tools.install`) calls them and
says what to do when they fail; nothing here knows about kernelspecs.

Invariant: every run is bounded by a timeout, gets no stdin, and a failure becomes a message
naming the command and quoting the end of its output, never a hang or a bare traceback.
"""

from __future__ import annotations

import os
import shlex
import subprocess
from collections.abc import Sequence

from jutul_jkernel import _resources
from jutul_jkernel.supervisor import juliaup
from jutul_jkernel.supervisor.errors import describe_exit, indented

# Julia 1.5 starts in well under a second here, but a first run on a cold disk or a
# large custom sysimage can take much longer; a minute only catches a julia that hangs.
_CHECK_TIMEOUT = 60.0
_STDERR_TAIL_LINES = 15
# Compiling the JKernel package: ~4 s here with Julia 1.5; Julia 1.9+ also writes native code.
_PRECOMPILE_TIMEOUT = 600.0


class JuliaCheckError(Exception):
    """The julia the kernel would start did not run ``print(VERSION)``."""


def _tail(text: str) -> str:
    return indented(text, last_lines=_STDERR_TAIL_LINES, empty="(no output on stderr)")


def check_julia(julia: str, julia_args: Sequence[str] = ()) -> str:
    """Run ``print(VERSION)`` with ``julia`` and return the version it prints.

    ``julia_args`` go on the command line too, so a mistyped flag fails here rather than at
    every kernel start.
    """
    command = juliaup.julia_argv(julia, ["--startup-file=no", *julia_args], "-e", "print(VERSION)")
    try:
        done = _run_julia(command, _CHECK_TIMEOUT)
    except OSError as exc:
        msg = f"could not run {julia}: {exc.strerror or exc}."
        raise JuliaCheckError(msg) from None
    except subprocess.TimeoutExpired as exc:
        # On POSIX the partial output arrives as bytes even with text=True.
        stderr = exc.stderr or ""
        if isinstance(stderr, bytes):
            stderr = stderr.decode(errors="replace")
        msg = (
            f"{shlex.join(command)} did not finish within {_CHECK_TIMEOUT:.0f} s; "
            f"its stderr ended with:\n{_tail(stderr)}"
        )
        raise JuliaCheckError(msg) from None
    return _version_printed(command, done)


def check_channel(launcher: str, channel: str) -> str:
    """Run ``launcher +channel --version`` and return what it prints (``julia version 1.10.5``).

    The launcher resolves the channel before Julia starts, so this fails fast, with juliaup's
    own message, for a channel that is not installed or does not exist.
    """
    command = [launcher, juliaup.channel_argument(channel), "--version"]
    try:
        done = _run_julia(command, _CHECK_TIMEOUT)
    except OSError as exc:
        msg = f"could not run {launcher}: {exc.strerror or exc}."
        raise JuliaCheckError(msg) from None
    except subprocess.TimeoutExpired:
        msg = f"{shlex.join(command)} did not finish within {_CHECK_TIMEOUT:.0f} s"
        raise JuliaCheckError(msg) from None
    return _version_printed(command, done)


def _version_printed(command: list[str], done: subprocess.CompletedProcess[str]) -> str:
    """What ``command`` printed as its version; JuliaCheckError if it failed or printed none."""
    version = done.stdout.strip()
    if done.returncode != 0 or not version:
        msg = (
            f"{shlex.join(command)} {describe_exit(done.returncode)}"
            f"{'' if done.returncode else ' without printing a version'}; "
            f"its stderr ended with:\n{_tail(done.stderr)}"
        )
        raise JuliaCheckError(msg)
    return version


def _run_julia(
    command: list[str], timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """Run a julia command with no stdin, its output captured as text, within ``timeout``."""
    return subprocess.run(
        command,
        stdin=subprocess.DEVNULL,
        capture_output=True,
        text=True,
        errors="replace",
        timeout=timeout,
        env={**os.environ, **(env or {})},
        check=False,
    )


def precompile_server(
    julia: str, julia_args: Sequence[str] = (), env: dict[str, str] | None = None
) -> str | None:
    """Compile the JKernel package for ``julia`` (``server.jl --precompile``); return why not.

    The cache goes to JKernel's own depot (see server.jl); with ``julia_args`` the flags the
    kernel runs with, so that the cache matches them. Returns None when the cache is ready.
    """
    command = juliaup.julia_argv(
        julia,
        ["--startup-file=no", *julia_args],
        str(_resources.server_script()),
        "--precompile",
    )
    try:
        done = _run_julia(command, _PRECOMPILE_TIMEOUT, env)
    except OSError as exc:
        return f"could not run {julia}: {exc.strerror or exc}"
    except subprocess.TimeoutExpired:
        return f"{shlex.join(command)} did not finish within {_PRECOMPILE_TIMEOUT:.0f} s"
    if done.returncode != 0:
        return (
            f"{shlex.join(command)} {describe_exit(done.returncode)}; "
            f"its output ended with:\n{_tail(done.stdout + done.stderr)}"
        )
    return None
