"""Install the "Julia (supervised)" kernelspec: ``python -m jutul_jkernel.install``.

This module takes the packaged template (``kernelspec/kernel.json`` and the logos, found by
:mod:`jutul_jkernel._resources`) and turns it into an installed kernelspec. Every spec it installs
starts the interpreter that ran the installer (``argv[0]`` is the absolute ``sys.executable``),
and every Julia setting goes into the spec's ``env`` (``JUTUL_JKERNEL_JULIA``,
``JUTUL_JKERNEL_THREADS``, ``JUTUL_JKERNEL_JULIA_ARGS``, and ``JUTUL_JKERNEL_XVFB`` for a private X
display; :mod:`jutul_jkernel.settings` lists them), where the kernel reads it at start-up.
As IJulia's kernelspec does, Julia gets ``--color=yes`` and ``--project=@.`` (the notebook's
project) unless ``--no-color`` or ``--project DIR`` say otherwise, and runs the user's startup
file unless ``--no-startup-file`` is given. ``--channel 1.10`` makes the command juliaup's
launcher with ``+1.10`` (see :mod:`jutul_jkernel.supervisor.juliaup`), so the kernel survives
``juliaup update``; the installer never turns the launcher into the versioned Julia it runs.
Before writing anything it checks that Julia runs with those settings, and after, compiles
the Julia side (both in :mod:`jutul_jkernel.tools.julia_setup`); then it runs the doctor
(:mod:`jutul_jkernel.tools.doctor`) once with those settings and prints its one-line summary.
This module never works out Jupyter's data directories itself: ``KernelSpecManager`` picks the
directory from ``--user``, ``--sys-prefix`` or ``--prefix``, as bash_kernel's installer does.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from jupyter_client.kernelspec import KernelSpecManager

from jutul_jkernel import settings
from jutul_jkernel._resources import kernelspec_dir
from jutul_jkernel.supervisor import juliaup
from jutul_jkernel.supervisor.julia_options import add_julia_options, julia_flags
from jutul_jkernel.tools.julia_setup import (
    JuliaCheckError,
    check_channel,
    check_julia,
    precompile_server,
)

_DEFAULT_NAME = "julia-supervised"
_DEFAULT_DISPLAY_NAME = "Julia (supervised)"
_LOGOS = ("logo-32x32.png", "logo-64x64.png")

_XVFB_DEFAULT = "Xvfb"

# What jupyter_client accepts as a kernel name (kernelspec._kernel_name_pat, case-insensitive).
_KERNEL_NAME = re.compile(r"[a-z0-9._-]+", re.IGNORECASE)

_EXIT_NOT_INSTALLED = 1
_EXIT_JULIA_CHECK_FAILED = 2
_EXIT_XVFB_MISSING = 3

_HOW_TO_ADD_A_CHANNEL = (
    "Add the channel with `juliaup add {channel}` (`juliaup list` shows every channel there\n"
    "is, `juliaup status` the ones installed), or give --channel an installed one (release,\n"
    "lts, 1.10, ...). Use --no-check to install the kernelspec without checking."
)
_NOT_A_LAUNCHER = (
    "--channel needs juliaup's launcher as the julia, and {julia} does not look like one\n"
    "(it is not julialauncher, nor a link to it, and has no juliaup beside it). Install Julia\n"
    "with juliaup (https://julialang.org/install/) or pass --julia naming its launcher\n"
    "(usually ~/.juliaup/bin/julia)."
)

_HOW_TO_GET_JULIA = (
    "Install Julia (https://julialang.org/install/, e.g. with juliaup) or pass --julia PATH\n"
    "naming a working julia executable; in a checkout of this project, `make setup` installs\n"
    "one. Use --no-check to install the kernelspec without checking Julia."
)


@dataclass(frozen=True)
class _JuliaChoice:
    """The julia to check, where it came from, and whether the spec pins it (``--julia``, or
    the launcher for ``--channel``)."""

    command: str
    source: str
    pinned: bool


# ---- command line ----


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="jutul-jkernel-install",
        description="Install (or remove) the 'Julia (supervised)' Jupyter kernelspec.",
        epilog=(
            "Examples:\n"
            "  python -m jutul_jkernel.install --sys-prefix --threads auto\n"
            "  python -m jutul_jkernel.install --julia ~/.juliaup/bin/julia --project .\n"
            "  python -m jutul_jkernel.install --channel 1.10 --name julia-1.10 "
            "--display-name 'Julia 1.10'\n"
            "  python -m jutul_jkernel.install --julia-args='-O3 --check-bounds=no'\n"
            "  python -m jutul_jkernel.install --uninstall"
        ),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = parser.add_mutually_exclusive_group()
    where.add_argument(
        "--user",
        action="store_true",
        help="install for the current user (the default)",
    )
    where.add_argument(
        "--sys-prefix",
        action="store_true",
        help="install into this Python environment (sys.prefix), e.g. a venv or conda env",
    )
    where.add_argument(
        "--prefix",
        metavar="DIR",
        help="install into DIR/share/jupyter/kernels (Jupyter finds it with JUPYTER_PATH)",
    )
    parser.add_argument(
        "--name",
        default=_DEFAULT_NAME,
        help=f"kernelspec name, as in `jupyter console --kernel NAME` (default: {_DEFAULT_NAME})",
    )
    parser.add_argument(
        "--display-name",
        default=_DEFAULT_DISPLAY_NAME,
        help=f"name shown in the notebook UI (default: {_DEFAULT_DISPLAY_NAME!r})",
    )
    add_julia_options(parser, "the kernel")
    parser.add_argument(
        "--xvfb",
        metavar="PATH",
        nargs="?",
        const=_XVFB_DEFAULT,
        help="headless graphics (GLMakie on a server): start a private Xvfb X server with each "
        f"kernel and give Julia its DISPLAY; PATH is the Xvfb executable (default: "
        f"{_XVFB_DEFAULT} on PATH; Debian package xvfb)",
    )
    parser.add_argument(
        "--no-color",
        action="store_true",
        help="plain output: no ANSI colour from printstyled, logging or stack traces "
        "(passes --color=no instead of --color=yes)",
    )
    parser.add_argument(
        "--uninstall",
        action="store_true",
        help="remove the kernelspec called --name instead of installing it",
    )
    parser.add_argument(
        "--no-check",
        action="store_true",
        help="do not check that julia runs (nor that --xvfb's Xvfb exists) before installing, "
        "nor run the doctor after",
    )
    parser.add_argument(
        "--no-precompile",
        action="store_true",
        help="do not compile the Julia side now (the first kernel start compiles it instead); "
        "implied by --no-check",
    )
    parser.add_argument(
        "--no-doctor",
        action="store_true",
        help="do not run the doctor (python -m jutul_jkernel.doctor: every path a notebook "
        "takes, checked on this Julia) after compiling; implied by --no-check and "
        "--no-precompile",
    )
    return parser


# ---- Julia ----


def _choose_julia(julia: str | None, channel: str | None = None) -> _JuliaChoice:
    """Return the julia to check; ``--julia`` becomes an absolute path the spec pins.

    With ``--channel`` and no ``--julia``, the launcher found now is pinned: it stays where it
    is through juliaup updates, and a Jupyter started from a desktop menu may not have it on
    PATH (IJulia's channel kernels assumed it had, IJulia PR #1214).
    """
    if julia is None:
        # Not pinned: the kernel looks julia up when it starts, so check what it would find now.
        pinned = channel is not None
        from_env = os.environ.get(settings.JULIA)
        if from_env:
            return _JuliaChoice(from_env, f"${settings.JULIA}", pinned=pinned)
        return _JuliaChoice(shutil.which("julia") or "julia", "PATH", pinned=pinned)
    if os.sep in julia or (os.altsep is not None and os.altsep in julia):
        # abspath, never realpath: juliaup's `julia` is a launcher, often a link to
        # `julialauncher`, and must not become the versioned Julia it runs.
        return _JuliaChoice(os.path.abspath(os.path.expanduser(julia)), "--julia", pinned=True)
    found = shutil.which(julia)
    # A bare name not on PATH stays bare: the check then fails naming it.
    command = os.path.abspath(found) if found is not None else julia
    return _JuliaChoice(command, "--julia, looked up on PATH", pinned=True)


def _run_doctor(args: argparse.Namespace, julia: str, julia_args: list[str]) -> None:
    """Run the doctor once on the Julia and settings the kernelspec names; print one line, or
    the failing rows and where to report them. Skipped without a compiled Julia side: the
    doctor's kernel would compile it in the background, which --no-precompile defers."""
    how = "run `python -m jutul_jkernel.doctor` with the same Julia options to check it"
    if args.no_doctor or args.no_precompile:
        flag = "--no-doctor" if args.no_doctor else "--no-precompile"
        print(f"doctor: not run ({flag}); {how}")
        return
    # Imported here: only an install that checked Julia runs the doctor, which imports the
    # supervisor.
    from jutul_jkernel.tools import doctor

    print("doctor: checking every path a notebook takes on this Julia...", flush=True)
    report = doctor.run(julia, julia_args, threads=args.threads, env=dict(args.env) or None)
    lines = doctor.summary(report)
    if report.ok:
        print(*lines, sep="\n")
    else:
        print(*lines, f"  For the full report, {how}.", sep="\n", file=sys.stderr)


# ---- kernelspec ----


def _kernel_env(args: argparse.Namespace, julia: _JuliaChoice) -> dict[str, str]:
    """Collect the ``env`` entries the kernel reads its Julia settings from."""
    env: dict[str, str] = {}
    if julia.pinned:
        env[settings.JULIA] = julia.command
    if args.threads is not None:
        env[settings.THREADS] = args.threads
    julia_args = julia_flags(args)
    if julia_args:
        env[settings.JULIA_ARGS] = shlex.join(julia_args)
    if args.xvfb is not None:
        env[settings.XVFB] = _xvfb_command(args.xvfb)
    env.update(args.env)  # _env_conflict already refused keys the options above own
    return env


def _xvfb_command(xvfb: str) -> str:
    """The Xvfb the spec names: absolute when found now, else as given (see _check_xvfb)."""
    found = shutil.which(os.path.expanduser(xvfb))
    return os.path.abspath(found) if found is not None else xvfb


def _check_xvfb(xvfb: str) -> str | None:
    """Return an error message if ``xvfb`` is not an executable file, else None."""
    if shutil.which(os.path.expanduser(xvfb)) is not None:
        return None
    where = "on PATH" if os.sep not in xvfb else "there"
    return (
        f"error: --xvfb: the X server {xvfb!r} was not found {where}; nothing installed.\n"
        "Headless graphics need Xvfb: install Debian's xvfb package (`apt-get install xvfb`; "
        "`make setup` does it in a checkout), or pass --xvfb PATH naming the Xvfb executable. "
        "Use --no-check to install the kernelspec anyway."
    )


def _env_conflict(args: argparse.Namespace) -> str | None:
    """Return an error if an ``--env`` key is also set by its own option, else None."""
    owned = {
        settings.JULIA: "--julia"
        if args.julia is not None
        else "--channel (which pins juliaup's launcher)"
        if args.channel is not None
        else None,
        settings.THREADS: "--threads" if args.threads is not None else None,
        # Always written: --project has a default (and the kernel's --color too).
        settings.JULIA_ARGS: "the Julia arguments the installer writes "
        "(--project, --no-color, --no-startup-file, --julia-args)",
        settings.XVFB: "--xvfb" if args.xvfb is not None else None,
    }
    for key, _ in args.env:
        if owned.get(key):
            return f"--env {key}=... conflicts with {owned[key]}; give one of them"
    return None


def _write_spec(target: Path, display_name: str, env: dict[str, str]) -> None:
    """Write kernel.json and the logos into ``target``, starting from the packaged template."""
    template = kernelspec_dir()
    spec = json.loads((template / "kernel.json").read_text(encoding="utf-8"))
    spec["argv"][0] = os.path.abspath(sys.executable)
    spec["display_name"] = display_name
    spec["env"] = {**spec.get("env", {}), **env}
    (target / "kernel.json").write_text(json.dumps(spec, indent=2) + "\n", encoding="utf-8")
    for logo in _LOGOS:
        shutil.copyfile(template / logo, target / logo)


def _location(args: argparse.Namespace) -> tuple[bool, str | None, str]:
    """Return ``(user, prefix, description)`` for KernelSpecManager; --user when none given."""
    if args.prefix is not None:
        return False, args.prefix, f"--prefix {args.prefix}"
    if args.sys_prefix:
        return False, sys.prefix, f"--sys-prefix ({sys.prefix})"
    return True, None, "--user"


def _check_channel_or_say_why(julia: _JuliaChoice, channel: str) -> str | None:
    """Check that ``julia +channel`` resolves; return its version line, or None after printing
    what failed and what to do."""
    try:
        return check_channel(julia.command, channel)
    except JuliaCheckError as exc:
        advice = _HOW_TO_ADD_A_CHANNEL.format(channel=channel)
        if not juliaup.is_launcher(julia.command):
            advice = _NOT_A_LAUNCHER.format(julia=julia.command) + "\n" + advice
        print(
            f"error: the juliaup channel {channel!r} did not resolve; nothing installed.\n"
            f"  tried: {julia.command} {juliaup.channel_argument(channel)} --version "
            f"(the launcher from {julia.source})\n"
            f"  what happened: {exc}\n\n{advice}",
            file=sys.stderr,
        )
        return None


def _warn_if_juliaup_will_move_it(julia: _JuliaChoice, version: str | None) -> None:
    """Warn when the pinned julia lives in a directory that ``juliaup update`` replaces."""
    managed = juliaup.managed_julia(julia.command) if julia.pinned else None
    if managed is None:
        return
    major_minor = ".".join(version.split(".")[:2]) if version else "1.10"
    print(
        f"warning: {julia.command} is a Julia that juliaup installed ({managed}); the next "
        "`juliaup update` removes it and this kernel stops starting. Install with "
        f"--channel {major_minor} instead (juliaup's launcher then picks the newest "
        f"{major_minor}), or pass --julia naming the launcher (usually ~/.juliaup/bin/julia).",
        file=sys.stderr,
    )


def _install(args: argparse.Namespace) -> int:
    julia = _choose_julia(args.julia, args.channel)
    julia_args = julia_flags(args)
    # What the spec starts, as a shell would show it: the launcher and its +channel, if any.
    channel_args = [] if args.channel is None else [juliaup.channel_argument(args.channel)]
    shown = shlex.join([julia.command, *channel_args])
    failed, version = _check_before_installing(args, julia, julia_args, shown)
    if failed is not None:
        return failed
    destination = _install_spec(args, julia)
    if destination is None:
        return 1
    where = _location(args)[2]
    print(f"Installed kernelspec {args.name!r} ({args.display_name}) in {destination} [{where}]")
    if version is not None:
        print(f"Julia {version} found at {shown}")
        if not args.no_precompile:
            _precompile_and_say(julia.command, julia_args, args)
        _run_doctor(args, julia.command, julia_args)
    else:
        print(f"Julia not checked (--no-check); the kernel will run {shown}")
    _say_how_to_use_it(args, julia, destination)
    return 0


def _check_before_installing(
    args: argparse.Namespace, julia: _JuliaChoice, julia_args: list[str], shown: str
) -> tuple[int | None, str | None]:
    """Check the Julia (and its channel, and Xvfb) before anything is written: an exit status
    if a check failed, else None; and the Julia version found (None with --no-check)."""
    version: str | None = None
    if not args.no_check and args.channel is not None:
        channel_version = _check_channel_or_say_why(julia, args.channel)
        if channel_version is None:
            return _EXIT_JULIA_CHECK_FAILED, None
        print(f"juliaup channel {args.channel!r}: {channel_version} ({julia.command})")
    if not args.no_check:
        try:
            version = check_julia(julia.command, julia_args)
        except JuliaCheckError as exc:
            blame_args = (
                f"\nIf that julia works on its own, the arguments the kernelspec gives it "
                f"({shlex.join(julia_args)}; from --channel, --project, --no-color, "
                "--no-startup-file and --julia-args) are at fault."
            )
            print(
                f"error: checking Julia failed; nothing installed.\n"
                f"  tried: {shown} (from {julia.source})\n"
                f"  what happened: {exc}\n\n{_HOW_TO_GET_JULIA}{blame_args}",
                file=sys.stderr,
            )
            return _EXIT_JULIA_CHECK_FAILED, None
        _warn_if_juliaup_will_move_it(julia, version)
    elif julia.pinned and not os.path.isabs(julia.command):
        print(f"warning: {julia.command!r} is not on PATH now; the kernelspec keeps the bare name.")
    if args.xvfb is not None and not args.no_check:
        problem = _check_xvfb(args.xvfb)
        if problem is not None:
            print(problem, file=sys.stderr)
            return _EXIT_XVFB_MISSING, None
    if not args.project.startswith("@") and not os.path.isdir(os.path.expanduser(args.project)):
        print(
            f"note: project directory {args.project} does not exist yet; Julia will start "
            "with an empty environment there."
        )
    return None, version


def _install_spec(args: argparse.Namespace, julia: _JuliaChoice) -> str | None:
    """Write the kernelspec; its directory, or None (having said why) if it cannot be."""
    user, prefix, where = _location(args)
    with tempfile.TemporaryDirectory(prefix="jutul-jkernel-spec-") as tmp:
        _write_spec(Path(tmp), args.display_name, _kernel_env(args, julia))
        # No replace=: jupyter_client 8 always replaces and warns (DeprecationWarning) if given.
        try:
            destination: str = KernelSpecManager().install_kernel_spec(
                tmp, kernel_name=args.name, user=user, prefix=prefix
            )
        except PermissionError as exc:
            print(
                f"error: cannot write the kernelspec ({where}): {exc}\n"
                "Install for yourself with --user, or into this environment with --sys-prefix.",
                file=sys.stderr,
            )
            return None
    return destination


def _precompile_and_say(julia: str, julia_args: list[str], args: argparse.Namespace) -> None:
    problem = precompile_server(julia, julia_args, dict(args.env))
    if problem is None:
        print("Compiled the kernel's Julia side: kernels start from its cache")
    else:
        print(
            f"warning: compiling the kernel's Julia side failed; kernels load it from "
            f"source (slower start) and retry in the background.\n  {problem}",
            file=sys.stderr,
        )


def _say_how_to_use_it(args: argparse.Namespace, julia: _JuliaChoice, destination: str) -> None:
    if not julia.pinned:
        print(
            f"No --julia given: the kernel runs the julia it finds (${settings.JULIA}, else PATH) "
            "when it starts."
        )
    if os.path.dirname(destination) not in KernelSpecManager().kernel_dirs:
        print(
            f"note: Jupyter does not search {os.path.dirname(destination)}; add "
            f"{os.path.dirname(os.path.dirname(destination))} to JUPYTER_PATH to use it."
        )
    if args.xvfb is not None:
        xvfb = _xvfb_command(args.xvfb)
        print(f"Headless graphics: each kernel starts its own Xvfb ({xvfb}) as Julia's DISPLAY")
    print(f"Start it with: jupyter console --kernel {args.name}")


def _uninstall(args: argparse.Namespace) -> int:
    manager = KernelSpecManager()
    name = args.name
    spec_dir = manager.find_kernel_specs().get(name)
    if spec_dir is None:
        print(
            f"error: no kernelspec named {name!r} is installed; Jupyter searched:\n  "
            + "\n  ".join(manager.kernel_dirs),
            file=sys.stderr,
        )
        return _EXIT_NOT_INSTALLED
    user, prefix, where = _location(args)
    explicit = args.user or args.sys_prefix or args.prefix is not None
    root = manager.user_kernel_dir if user else os.path.abspath(prefix or sys.prefix)
    if explicit and not Path(spec_dir).resolve().is_relative_to(Path(root).resolve()):
        print(
            f"error: the kernelspec {name!r} Jupyter finds is {spec_dir}, which is not under "
            f"{where}; nothing removed.",
            file=sys.stderr,
        )
        return _EXIT_NOT_INSTALLED
    removed = manager.remove_kernel_spec(name)
    print(f"Removed kernelspec {name!r} from {removed}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """Install or remove the kernelspec as the command line asks; return the exit status."""
    parser = _parser()
    args = parser.parse_args(argv)
    if not _KERNEL_NAME.fullmatch(args.name):
        parser.error(f"--name {args.name!r}: use only letters, digits, '.', '_' and '-'")
    args.name = args.name.lower()  # as jupyter_client stores and finds it
    if args.uninstall:
        return _uninstall(args)
    conflict = _env_conflict(args)
    if conflict is not None:
        parser.error(conflict)
    return _install(args)


if __name__ == "__main__":
    raise SystemExit(main())
