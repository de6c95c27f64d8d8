"""Juliaup's launcher and its channels: the one place that knows how ``julia +channel`` works.

Most users install Julia with juliaup. Its ``julia`` is a launcher: a small program that picks
a Julia by channel (``release``, ``lts``, ``1.10``, ``nightly``) and runs it. The Julias it
installs live in versioned directories (``~/.julia/juliaup/julia-1.10.5+0.x64.linux.gnu/``)
that the next ``juliaup update`` replaces, so a kernelspec naming such a path stops starting
(see <https://github.com/JuliaLang/juliaup/issues/857>), while one naming the launcher and a
channel, ``julia +1.10``, keeps working.

IJulia 1.32.0 wrote such a command, but derived the launcher's path from the running Julia's
``Sys.BINDIR`` (``<juliaup home>/bin/julia``), a path juliaup no longer uses, and kernels failed
to start (<https://github.com/JuliaLang/IJulia.jl/pull/1201>,
<https://github.com/JuliaLang/IJulia.jl/issues/1213>); 1.32.1 turned it off
(<https://github.com/JuliaLang/IJulia.jl/pull/1214>). So nothing here derives a launcher from
a Julia, nor a Julia from a launcher: the user names the launcher (``--julia``) or PATH has it,
it is kept as given (never resolved to the binary it runs), and the installer proves the
channel by running it.

The invariant: a ``+channel`` argument is the first argument after the launcher, because the
launcher looks only there (JuliaLang/juliaup master src/bin/julialauncher.rs, ``run_app``:
``args[1]`` with a ``+`` prefix). Julia itself takes no argument that starts with ``+``.
"""

from __future__ import annotations

import os
import re
import shutil
from collections.abc import Sequence

CHANNEL_PREFIX = "+"

# What a juliaup channel name looks like: release, lts, 1.10, 1.10.5, nightly, 1.12-nightly,
# pr12345, 1.10.5+0.x64.linux.gnu, 1.11~x86 (an architecture after "~"), or an alias.
_CHANNEL_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._~+-]*")

# The launcher's own name where it is installed under it (juliaup's installer and Homebrew's
# formula install `julialauncher` and make `julia` a link to it).
_LAUNCHER_NAME = "julialauncher"
# A Julia juliaup installed: <juliaup home>/julia-<version or channel>/bin/julia, where the
# home is ~/.julia/juliaup or $JULIAUP_DEPOT_PATH/juliaup (JuliaLang/juliaup master
# src/global_paths.rs, get_juliaup_home_path).
_MANAGED_JULIA = re.compile(
    r"(?:^|[\\/])juliaup[\\/](julia-[^\\/]+)[\\/]bin[\\/]julia(?:-debug)?(?:\.exe)?$"
)


def is_channel_name(text: str) -> bool:
    """Whether ``text`` can name a juliaup channel (without its ``+``)."""
    return _CHANNEL_NAME.fullmatch(text) is not None


def channel_argument(channel: str) -> str:
    """The launcher's argument that selects ``channel``: ``+channel``."""
    return CHANNEL_PREFIX + channel


def split_channel(julia_args: Sequence[str]) -> tuple[str | None, list[str]]:
    """Take the ``+channel`` arguments out of ``julia_args``.

    Return the last one (a later setting wins, as Julia's own flags do) and the others.
    """
    channel: str | None = None
    rest: list[str] = []
    for arg in julia_args:
        if arg.startswith(CHANNEL_PREFIX):
            channel = arg
        else:
            rest.append(arg)
    return channel, rest


def julia_argv(julia: str, julia_args: Sequence[str], *after: str) -> list[str]:
    """Julia's command line: ``julia``, the ``+channel`` if any, the other ``julia_args``,
    then ``after`` (the program and its arguments)."""
    channel, rest = split_channel(julia_args)
    return [julia, *([channel] if channel else []), *rest, *after]


def is_launcher(path: str) -> bool:
    """Whether ``path`` looks like juliaup's launcher.

    It does when it is (or links to) ``julialauncher``, or when the file it resolves to has a
    ``juliaup`` executable beside it: the launcher finds juliaup there itself (julialauncher.rs,
    ``get_juliaup_path``: its canonical path's folder). The resolved path is only looked at.
    """
    real = os.path.realpath(path)
    stem = os.path.basename(real).removesuffix(".exe")
    if stem == _LAUNCHER_NAME:
        return True
    return stem == "julia" and shutil.which("juliaup", path=os.path.dirname(real)) is not None


def managed_julia(path: str) -> str | None:
    """If ``path`` (or what it links to) is a Julia inside juliaup's own directory, return that
    directory's name (``julia-1.10.5+0.x64.linux.gnu``), which ``juliaup update`` replaces."""
    for candidate in (os.path.abspath(path), os.path.realpath(path)):
        found = _MANAGED_JULIA.search(candidate)
        if found is not None:
            return found.group(1)
    return None
