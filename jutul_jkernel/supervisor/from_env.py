"""The kernel's supervisor, as the kernelspec's environment configures it.

A plain :class:`~jutul_jkernel.supervisor.JuliaSupervisor`, unless ``JUTUL_JKERNEL_XVFB`` asks for a
private X display (``python -m jutul_jkernel.install --xvfb``). Only then is
:mod:`jutul_jkernel.supervisor.xvfb` imported: ``python -m jutul_jkernel`` builds the supervisor
before Julia boots, and a plain kernel start pays for nothing it does not use.
"""

from __future__ import annotations

from typing import Any

from jutul_jkernel import settings
from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor


def supervisor_from_env(**kwargs: Any) -> JuliaSupervisor:
    """A supervisor with a private Xvfb when ``$JUTUL_JKERNEL_XVFB`` is set, else a plain one."""
    command = settings.xvfb_command()
    if command is None:
        return JuliaSupervisor(**kwargs)
    from jutul_jkernel.supervisor.xvfb import (  # imported only here: see the docstring
        HeadlessJuliaSupervisor,
        Xvfb,
    )

    return HeadlessJuliaSupervisor(xvfb=Xvfb(command), **kwargs)
