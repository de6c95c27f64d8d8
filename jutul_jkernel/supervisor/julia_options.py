"""The Julia options the installer, the agent and the doctor share, and the flags they make.

``--julia``, ``--channel``, ``--threads``, ``--project``, ``--no-startup-file``, ``--julia-args``
and ``--env`` mean the same in ``python -m jutul_jkernel.install``, ``.agent`` and ``.doctor``:
:func:`add_julia_options` adds them to a parser and :func:`julia_flags` turns what was given into
Julia's command-line flags. The module imports nothing of Jupyter, so the agent and the doctor
take these options without importing the installer (which imports jupyter_client).
"""

from __future__ import annotations

import argparse
import os
import re
import shlex

from jutul_jkernel.supervisor import juliaup

# Julia's --project=@. activates the nearest Project.toml from the notebook's folder upwards,
# else the default environment: what IJulia's default kernelspec does (deps/build.jl).
DEFAULT_PROJECT = "@."

# A key that a POSIX shell would accept as a variable name.
_ENV_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _positive_threads(text: str) -> str:
    """Accept a positive integer or ``auto``, the values Julia's ``--threads`` takes."""
    if text == "auto":
        return text
    if re.fullmatch(r"[0-9]+", text) and int(text) > 0:
        return str(int(text))
    msg = f"expected a positive integer or 'auto', got {text!r}"
    raise argparse.ArgumentTypeError(msg)


def _env_assignment(text: str) -> tuple[str, str]:
    """Split ``KEY=VALUE``; the key must be a valid variable name."""
    key, sep, value = text.partition("=")
    if not sep or not _ENV_KEY.fullmatch(key):
        msg = f"{text!r} is not KEY=VALUE with KEY a variable name (letters, digits, _)"
        raise argparse.ArgumentTypeError(msg)
    return key, value


def _channel_name(text: str) -> str:
    """Accept a juliaup channel name, with or without its leading ``+``."""
    name = text.removeprefix(juliaup.CHANNEL_PREFIX)
    if juliaup.is_channel_name(name):
        return name
    msg = f"{text!r} is not a juliaup channel name (release, lts, 1.10, nightly, ...)"
    raise argparse.ArgumentTypeError(msg)


def _split_julia_args(text: str) -> list[str]:
    """Split ``--julia-args`` the way a POSIX shell would."""
    try:
        return shlex.split(text)
    except ValueError as exc:
        msg = f"cannot split {text!r} into arguments: {exc}"
        raise argparse.ArgumentTypeError(msg) from None


def add_julia_options(parser: argparse.ArgumentParser, who: str) -> None:
    """Add the Julia settings (--julia, --threads, --project, --julia-args, --env) to ``parser``.

    ``who`` names what starts Julia (the kernel, the agent, the doctor) in the help texts;
    :func:`julia_flags` turns the options into flags.
    """
    parser.add_argument(
        "--julia",
        metavar="PATH",
        help=f"julia executable to run (default: `julia` on PATH when {who} starts); "
        "juliaup's launcher is kept as given, never replaced by the Julia it picks",
    )
    parser.add_argument(
        "--channel",
        metavar="CHANNEL",
        type=_channel_name,
        help="juliaup channel (release, lts, 1.10, nightly, ...): run `julia +CHANNEL`, "
        "juliaup's launcher with that channel, which follows `juliaup update`",
    )
    parser.add_argument(
        "--threads",
        metavar="N",
        type=_positive_threads,
        help="Julia threads: a positive integer or 'auto'",
    )
    parser.add_argument(
        "--project",
        metavar="DIR",
        default=DEFAULT_PROJECT,
        help="Julia project (environment) to activate, passed as --project=<absolute DIR>; "
        "the default, @., is the working directory's (the notebook's folder) or the nearest "
        "parent's with a Project.toml, else Julia's default environment",
    )
    parser.add_argument(
        "--no-startup-file",
        action="store_true",
        help=f"do not run ~/.julia/config/startup.jl in {who} (passes --startup-file=no)",
    )
    parser.add_argument(
        "--julia-args",
        metavar="ARGS",
        type=_split_julia_args,
        action="append",
        default=[],
        help="extra julia command-line arguments, split like a shell would; "
        "write --julia-args='-O3' when ARGS starts with a dash",
    )
    parser.add_argument(
        "--env",
        metavar="KEY=VALUE",
        type=_env_assignment,
        action="append",
        default=[],
        help=f"extra environment variable for {who} (repeatable)",
    )


def julia_flags(args: argparse.Namespace) -> list[str]:
    """Julia's arguments from the options: ``+channel`` (juliaup's launcher takes it first),
    colour (where the parser has ``--no-color``: the installer's and the doctor's), project,
    startup file, then ``--julia-args``."""
    extra: list[str] = []
    channel = getattr(args, "channel", None)
    if channel is not None:
        extra.append(juliaup.channel_argument(channel))
    if hasattr(args, "no_color"):
        extra.append("--color=no" if args.no_color else "--color=yes")
    # "@." and other "@name" values are Julia's own environment names, not paths.
    project = args.project
    if project is not None:
        if not project.startswith("@"):
            project = os.path.abspath(os.path.expanduser(project))
        extra.append(f"--project={project}")
    if args.no_startup_file:
        extra.append("--startup-file=no")
    for chunk in args.julia_args:
        extra.extend(chunk)
    return extra
