"""The supervisor: owns one Julia process and its connection, and knows nothing of Jupyter.

:class:`JuliaSupervisor` is the public face, usable from plain Python (README "From Python");
the Jupyter front (:mod:`jutul_jkernel.jupyter`), the agent fronts (:mod:`jutul_jkernel.agents`)
and the doctor (:mod:`jutul_jkernel.tools`) all drive Julia through it. Its modules import only
each other, :mod:`jutul_jkernel.protocol` and the leaf :mod:`jutul_jkernel.settings`.
"""

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
