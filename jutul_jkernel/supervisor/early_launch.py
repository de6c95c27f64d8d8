"""Julia spawned first thing in the kernel process, before the supervisor and ipykernel are
imported, for the kernel's supervisor to adopt once it exists.

A Julia start takes about a second, most of it Julia's own boot; the kernel process's imports
(asyncio, the supervisor, zmq, ipykernel) and its set-up take about half that, and Julia
boots meanwhile on the other core. Every import before the spawn delays both, so
``python -m jutul_jkernel`` calls :func:`launch_from_env` before anything else, and this module
and what it imports (``spawn``, ``launch_settings``, ``rendezvous``, ``errors``, ``juliaup``,
``settings``, ``_resources``) import only light parts of the standard library: no asyncio,
logging or psutil (``tests/test_early_launch.py`` checks which modules are loaded when Julia is
spawned). What it spawns is what a supervisor made from the same environment would spawn
(:meth:`LaunchSettings.from_env`); :meth:`JuliaSupervisor.adopt_early_launch` takes it, and
start() adopts it only if its settings still match, as after :meth:`JuliaSupervisor.launch`.
"""

from __future__ import annotations

import contextlib
import shutil
from dataclasses import dataclass
from pathlib import Path

from jutul_jkernel import settings
from jutul_jkernel.supervisor.errors import JuliaStartupError
from jutul_jkernel.supervisor.launch_settings import LaunchSettings
from jutul_jkernel.supervisor.spawn import (
    Launch,
    log_file,
    new_claims_dir,
    new_log_dir,
    new_token,
    spawn,
)


@dataclass
class EarlyLaunch:
    """A Julia spawned before its supervisor existed, with the directories made for it."""

    launch: Launch
    log_dir: Path  # a temporary directory of its own, the supervisor's once adopted
    claims: Path | None  # the interrupt claims directory Julia was given, if one could be made

    def kill_now(self) -> None:
        """SIGKILL it and remove its socket and log directory, synchronously (atexit, a signal
        handler)."""
        self.launch.kill_group()
        self.launch.listener.close()
        shutil.rmtree(self.log_dir, ignore_errors=True)

    def discard(self) -> None:
        """Kill and reap it, and remove its directories (no supervisor takes it)."""
        self.launch.discard()
        shutil.rmtree(self.log_dir, ignore_errors=True)


def launch_from_env() -> EarlyLaunch | None:
    """Spawn the Julia a kernel's supervisor would start, now; None when there is none to
    spawn early: a private Xvfb must run first (``$JUTUL_JKERNEL_XVFB``), a setting is bad
    (start() reports it), or the spawn failed (start() tries again and reports why)."""
    if settings.xvfb_command() is not None:
        return None
    try:
        settings.startup_timeout(1.0)  # only checked: start() reports a bad value
        chosen = LaunchSettings.from_env()
    except ValueError:
        return None
    try:
        log_dir = new_log_dir()
    except OSError:
        return None
    claims: Path | None = None
    with contextlib.suppress(OSError):  # the supervisor says so when it adopts it
        claims = new_claims_dir(log_dir)
    try:
        launched = spawn(chosen, new_token(), log_file(log_dir, 1), claims)
    except JuliaStartupError:
        shutil.rmtree(log_dir, ignore_errors=True)
        return None
    return EarlyLaunch(launched, log_dir, claims)
