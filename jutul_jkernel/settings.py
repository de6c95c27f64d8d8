"""Every ``JUTUL_JKERNEL_*`` environment variable, and the parsing of those Python reads.

This is the list: a name is spelled here and nowhere else in the package (error messages and
help texts format these constants in). The user's settings come from the kernelspec's ``env``
(``python -m jutul_jkernel.install`` writes them) or the caller's environment; the rest pass
from the supervisor to Julia for one start. A leaf module: it imports only the standard
library, so the kernel's entry point, the installer and the agent can all use it for nothing.
docs/configuration.md describes the user's settings for users.
"""

from __future__ import annotations

import os
import shlex

# ---- the user's settings, read by the Python side ----
# The julia executable the supervisor starts; default: `julia` on PATH.
JULIA = "JUTUL_JKERNEL_JULIA"
# Extra Julia flags, shell-quoted (a `+channel` first for juliaup's launcher); default: none.
JULIA_ARGS = "JUTUL_JKERNEL_JULIA_ARGS"
# Julia's threads, a number or `auto`; default: physical cores minus one, at least one.
THREADS = "JUTUL_JKERNEL_THREADS"
# Seconds Julia has to connect after it was started; default: 60.
STARTUP_TIMEOUT = "JUTUL_JKERNEL_STARTUP_TIMEOUT"
# The Xvfb executable; set, the kernel starts a private X display for Julia; default: unset.
XVFB = "JUTUL_JKERNEL_XVFB"
# Seconds an is_complete_request waits for Julia before the answer is "unknown"; default: 0.8.
IS_COMPLETE_WAIT = "JUTUL_JKERNEL_IS_COMPLETE_WAIT"

# ---- the user's settings, read by Julia only (the supervisor passes them through) ----
# The compile cache of the Julia side (julia/server.jl); default:
# ${XDG_CACHE_HOME:-~/.cache}/jutul-jkernel/julia-<checksum of the package's path>.
DEPOT = "JUTUL_JKERNEL_DEPOT"
# `no`: load the Julia side from source, never from its cache (julia/server.jl); default: yes.
PRECOMPILED = "JUTUL_JKERNEL_PRECOMPILED"
# `no` (or 0, false, off): cells get a script's scope rules, not REPL.softscope; default: yes.
SOFTSCOPE = "JUTUL_JKERNEL_SOFTSCOPE"

# ---- from the supervisor to Julia, set for each start; Julia deletes each once read ----
# The handshake token Julia's first frame must carry (a fresh random one per start).
TOKEN = "JUTUL_JKERNEL_TOKEN"
# `yes` or `no`: whether the server runs the user's startup files in the first cell (Julia
# itself is always started with --startup-file=no); from --startup-file among the flags.
STARTUP_FILE = "JUTUL_JKERNEL_STARTUP_FILE"
# The directory where the INT frame and the SIGINT race for each interrupt request (mkdir).
CLAIMS = "JUTUL_JKERNEL_CLAIMS"
# The inherited pipe's fd that Julia moves its fd 1 onto (POSIX only; unset on Windows).
STDOUT_FD = "JUTUL_JKERNEL_STDOUT_FD"
# The random output marker Julia writes into its fd 1 and fd 2 (see supervisor/pipes.py).
MARK = "JUTUL_JKERNEL_MARK"

# What a user may set (docs/configuration.md describes each).
USER_SETTINGS = (
    JULIA,
    JULIA_ARGS,
    THREADS,
    STARTUP_TIMEOUT,
    XVFB,
    IS_COMPLETE_WAIT,
    DEPOT,
    PRECOMPILED,
    SOFTSCOPE,
)
# The supervisor's own settings: taken out of Julia's environment, where they are not the
# user's business.
SUPERVISOR_ONLY = (JULIA, JULIA_ARGS, THREADS, STARTUP_TIMEOUT)

# The julia the supervisor starts when neither its argument nor $JUTUL_JKERNEL_JULIA names one.
_DEFAULT_JULIA = "julia"


def positive_seconds(text: str) -> float | None:
    """Return ``text`` as a number of seconds above zero, or None when it is not one."""
    try:
        seconds = float(text)
    except ValueError:
        return None
    if not seconds > 0:  # NaN too: it compares false with everything
        return None
    return seconds


def seconds_argument(text: str) -> float:
    """An argparse ``type`` for seconds (``--timeout``): :func:`positive_seconds`, with
    argparse's kind of error."""
    import argparse  # here: the kernel imports this module before it spawns Julia

    seconds = positive_seconds(text)
    if seconds is None:
        msg = f"expected a positive number of seconds, got {text!r}"
        raise argparse.ArgumentTypeError(msg)
    return seconds


def env_seconds(name: str, default: float) -> float:
    """Seconds from the environment variable ``name``; ``default`` when it is unset or empty.

    A value that is not a positive number raises ValueError naming the variable and the value:
    the caller decides whether that is fatal, a cell's error or a logged warning.
    """
    value = os.environ.get(name, "")
    if not value:
        return default
    seconds = positive_seconds(value)
    if seconds is None:
        msg = f"{name}={value!r} is not a positive number of seconds"
        raise ValueError(msg)
    return seconds


def julia_command() -> str:
    """The julia to start when the caller names none: ``$JUTUL_JKERNEL_JULIA``, else ``julia``."""
    return os.environ.get(JULIA) or _DEFAULT_JULIA


def julia_args() -> list[str]:
    """The flags in ``$JUTUL_JKERNEL_JULIA_ARGS``, split as a POSIX shell would.

    Unbalanced quotes raise ValueError (shlex's).
    """
    return shlex.split(os.environ.get(JULIA_ARGS, ""))


def threads() -> str | None:
    """``$JUTUL_JKERNEL_THREADS`` as given (a number or ``auto``), or None when unset."""
    return os.environ.get(THREADS)


def xvfb_command() -> str | None:
    """The Xvfb named by ``$JUTUL_JKERNEL_XVFB``, or None when it is unset or empty."""
    return os.environ.get(XVFB) or None


def startup_timeout(default: float) -> float:
    """``$JUTUL_JKERNEL_STARTUP_TIMEOUT`` in seconds, or ``default``; see :func:`env_seconds`."""
    return env_seconds(STARTUP_TIMEOUT, default)
