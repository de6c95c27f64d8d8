"""Locate the files the package ships beside its Python code: the Julia side, the kernelspec.

This is the one place that knows where they live. A wheel carries them inside the package
(``jutul_jkernel/julia/``: ``server.jl`` and the JKernel package it loads;
``jutul_jkernel/kernelspec/``), force-included by pyproject.toml; an editable install imports
from the checkout, where they sit at the repository root (``julia/``, ``kernelspec/``). Each
lookup tries the packaged location first, then the checkout, and raises
:class:`FileNotFoundError` naming both paths when neither exists.
"""

from __future__ import annotations

from pathlib import Path

# <repo>/jutul_jkernel/_resources.py -> <repo>: where an editable install keeps the data files.
_CHECKOUT_ROOT = Path(__file__).resolve().parent.parent


def _packaged(*parts: str) -> Path | None:
    """Return the packaged location of ``parts``, or None if the package is not on a filesystem.

    The package's folder is where this file is: what ``importlib.resources.files`` gives for a
    package on a filesystem, without importing importlib.resources (inspect, zipfile, ...)
    before the kernel spawns Julia (supervisor/early_launch.py). In a zip this path names no
    file, and the checkout is tried next, as when ``files`` gave a zipfile.Path.
    """
    return Path(__file__).parent.joinpath(*parts)


def _locate(parts: tuple[str, ...], *, is_dir: bool) -> Path:
    """Return the first existing of the packaged and the checkout location of ``parts``."""
    packaged = _packaged(*parts)
    checkout = _CHECKOUT_ROOT.joinpath(*parts)
    for candidate in (packaged, checkout):
        if candidate is not None and (candidate.is_dir() if is_dir else candidate.is_file()):
            return candidate
    what = "directory" if is_dir else "file"
    tried = str(packaged) if packaged is not None else "the package (not on a filesystem)"
    msg = (
        f"jutul_jkernel's {what} {'/'.join(parts)} is missing: tried {tried} (installed package)"
        f" and {checkout} (source checkout). Reinstall jutul-jkernel, or run from a complete"
        " checkout."
    )
    raise FileNotFoundError(msg)


def server_script() -> Path:
    """Return the path of ``server.jl``, which loads the JKernel package and serves a kernel."""
    return _locate(("julia", "server.jl"), is_dir=False)


def julia_package_dir() -> Path:
    """Return the JKernel package directory (Project.toml, src/) that ``server.jl`` loads."""
    return _locate(("julia", "JKernel"), is_dir=True)


def kernelspec_dir() -> Path:
    """Return the directory holding the kernel.json template and the logos."""
    return _locate(("kernelspec",), is_dir=True)
