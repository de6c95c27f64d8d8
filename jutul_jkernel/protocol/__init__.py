"""The frame protocol between the supervisor and Julia: no sockets, no processes.

:mod:`~jutul_jkernel.protocol.wire` frames the bytes (Julia's side is julia/JKernel/src/wire.jl)
and :mod:`~jutul_jkernel.supervisor.frame_payloads` checks the JSON payloads. The lowest layer: it
imports nothing of the package.
"""
