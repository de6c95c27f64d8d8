"""The supervisor: owns one Julia process and its connection, and knows nothing of Jupyter.

:class:`JuliaSupervisor` is the public face, usable from plain Python (README "From Python");
the Jupyter front (:mod:`jutul_jkernel.jupyter`), the agent fronts (:mod:`jutul_jkernel.agents`)
and the doctor (:mod:`jutul_jkernel.tools`) all drive Julia through it. Its modules import only
each other, :mod:`jutul_jkernel.protocol` and the leaf :mod:`jutul_jkernel.settings`.

The names below are imported on first use, not with the package: the kernel imports
:mod:`jutul_jkernel.supervisor.early_launch` to spawn Julia before anything heavy (asyncio, the
supervisor's own modules) is imported, and importing a submodule runs this file first.
"""

from __future__ import annotations

import importlib

# typing.TYPE_CHECKING, without importing typing (mypy takes any TYPE_CHECKING as true)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from jutul_jkernel.supervisor.julia_supervisor import (
        ErrorInfo,
        ExecutionResult,
        JuliaDiedError,
        JuliaStartupError,
        JuliaSupervisor,
        OutputSink,
        describe_exit,
    )

__all__ = [
    "ErrorInfo",
    "ExecutionResult",
    "JuliaDiedError",
    "JuliaStartupError",
    "JuliaSupervisor",
    "OutputSink",
    "describe_exit",
]


def __getattr__(name: str) -> object:
    if name in __all__:
        return getattr(importlib.import_module("jutul_jkernel.supervisor.julia_supervisor"), name)
    msg = f"module {__name__!r} has no attribute {name!r}"
    raise AttributeError(msg)
