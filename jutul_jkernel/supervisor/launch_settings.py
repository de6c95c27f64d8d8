"""What a Julia is started with: its command line and its environment, built from the
supervisor's settings and nothing else.

:class:`LaunchSettings` is a value: two equal ones give the same command line and environment,
which is how an early launch is known to match the start that adopts it. The rules that read
the user's own flags (``--startup-file``, ``--threads``, ``JULIA_NUM_THREADS``) are here, and
the doctor reuses the startup-file rule so that the bare Julia it compares with matches.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterable
from dataclasses import dataclass

from jutul_jkernel import _resources, settings
from jutul_jkernel.supervisor.juliaup import julia_argv


@dataclass(frozen=True)
class LaunchSettings:
    """What decides Julia's command line and environment (an early launch must match)."""

    julia: str
    julia_args: tuple[str, ...]
    threads: int | str | None
    cwd: str | os.PathLike[str] | None
    env: tuple[tuple[str, str], ...]

    @classmethod
    def from_env(cls) -> LaunchSettings:
        """What a supervisor made without arguments starts Julia with: the ``JUTUL_JKERNEL_*``
        settings alone. ValueError for unbalanced quotes in ``$JUTUL_JKERNEL_JULIA_ARGS``."""
        return cls(
            settings.julia_command(), tuple(settings.julia_args()), settings.threads(), None, ()
        )

    def argv(self, address: str) -> list[str]:
        # which() finds the PATH entry and keeps it as it is: juliaup's `julia` is a launcher
        # (often a link to `julialauncher`), which must never become the versioned binary.
        julia = shutil.which(self.julia) or self.julia
        # Julia itself never runs the startup file: an error in it would end server.jl before
        # the handshake. The server runs it in the first cell instead (see environment).
        julia_args, _ = split_startup_file_flag(list(self.julia_args))
        # julia_argv puts a `+channel` first, the one place juliaup's launcher looks for it.
        return julia_argv(
            julia,
            ["--startup-file=no", *julia_args],
            str(_resources.server_script()),
            address,
        )

    def environment(self, token: str) -> dict[str, str]:
        own = dict(self.env)
        env = {**os.environ, **own}
        for key in settings.SUPERVISOR_ONLY:
            env.pop(key, None)
        threads = self.threads
        if threads in (None, "", "auto"):
            # The user's own request wins over our default: a --threads/-t flag among Julia's
            # arguments, or JULIA_NUM_THREADS wherever it was set (the environment Jupyter
            # started in, the kernelspec's env, env=), as IJulia's kernels read it.
            asked = asks_for_threads(self.julia_args) or env.get("JULIA_NUM_THREADS", "") != ""
            threads = None if asked else default_threads()
        if threads not in (None, ""):
            # "N,1" gives the evaluation loop an interactive thread on Julia >= 1.9; Julia 1.5-1.8
            # read the variable with strtol and take N. Being an environment variable, it needs
            # no version probe before the start, and an explicit --threads flag still wins.
            env["JULIA_NUM_THREADS"] = f"{threads},1" if str(threads) != "auto" else "auto"
        env[settings.TOKEN] = token
        _, startup_file = split_startup_file_flag(list(self.julia_args))
        env[settings.STARTUP_FILE] = "yes" if startup_file else "no"
        return env


def split_startup_file_flag(julia_args: list[str]) -> tuple[list[str], bool]:
    """Take ``--startup-file=yes|no`` (or ``--startup-file yes|no``) out of Julia's arguments.

    Return the other arguments and whether the startup file should run: yes unless the last
    such flag says no, as with Julia itself. Other values stay in, for Julia to reject.
    """
    rest: list[str] = []
    wanted = True
    i = 0
    while i < len(julia_args):
        arg = julia_args[i]
        value = None
        if arg.startswith("--startup-file="):
            value, step = arg.partition("=")[2], 1
        elif arg == "--startup-file" and i + 1 < len(julia_args):
            value, step = julia_args[i + 1], 2
        if value in ("yes", "no"):
            wanted = value == "yes"
            i += step
            continue
        rest.append(arg)
        i += 1
    return rest, wanted


def asks_for_threads(julia_args: Iterable[str]) -> bool:
    """Whether Julia's arguments set its thread count: ``-t N``, ``-tN``, ``--threads[=]N``."""
    return any(
        a in ("-t", "--threads") or a.startswith("--threads=") or (a.startswith("-t") and a[2:3])
        for a in julia_args
    )


def default_threads() -> int:
    """Physical cores minus one, at least one: the user's compute threads."""
    cores = _linux_cores() or _psutil_cores() or os.cpu_count() or 1
    return max(1, cores - 1)


def _linux_cores() -> int | None:
    """Physical cores as psutil counts them on Linux (psutil/_pslinux.py cpu_count_cores, its
    first way: the distinct sibling lists of the CPUs' topologies), without importing psutil
    before Julia is spawned (supervisor/early_launch.py); None where sysfs does not say."""
    base = "/sys/devices/system/cpu"
    try:
        cpus = [name for name in os.listdir(base) if name.startswith("cpu") and name[3:].isdigit()]
    except OSError:
        return None
    for leaf in ("core_cpus_list", "thread_siblings_list"):  # the newer name first
        lists = set()
        for cpu in cpus:
            try:
                with open(f"{base}/{cpu}/topology/{leaf}", "rb") as f:
                    lists.add(f.read().strip())
            except OSError:
                continue
        if lists:
            return len(lists)
    return None


def _psutil_cores() -> int | None:
    import psutil  # here: only where sysfs did not say (other systems)

    cores: int | None = psutil.cpu_count(logical=False)
    return cores
