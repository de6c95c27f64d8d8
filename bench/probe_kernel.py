"""The "Julia (supervised)" kernel with timestamps and knobs: run by the bench-julia-probe spec.

It starts exactly what ``python -m jutul_jkernel`` starts: ``IPKernelApp`` with that module's
``APP_OPTIONS`` (``JuliaKernel``, no OutStream), so what it measures is the kernel users run.
With ``$BENCH_TRACE`` set, a few methods are wrapped first so that each writes
``{"ev", "t", "id", "extra"}`` as a JSON line there; ``$BENCH_SERVER_JL`` swaps in the
instrumented server copy. Knobs for what-if runs, all patched here and never in the package:
``$BENCH_EXECUTE_SLEEP`` (ipykernel's ``Kernel._execute_sleep``), ``$BENCH_OUTSTREAM``
(ipykernel's default OutStream instead of none: what the kernel did before), ``$BENCH_FLUSH_BYTES``
(``streams.FLUSH_BYTES``), ``$BENCH_IOPUB_SYNC_BYTES`` (``kernel._IOPUB_SYNC_BYTES``).
Only bench/ uses it.
Events: py_main, imported, app_init_begin/end, kernel_start_begin/end, spawn_begin,
exec_returned, accepted, inf, spawn_end, kinfo_begin/end, exec_req_begin/end, do_exec_begin/end,
exe_sent, first_out, res_recv.
"""

from __future__ import annotations

import time

T_MAIN = time.time()

import asyncio  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

_TRACE = (
    open(os.environ["BENCH_TRACE"], "a", buffering=1)  # noqa: SIM115 - lives as long as we do
    if os.environ.get("BENCH_TRACE")
    else None
)


def mark(ev: str, ident: int = 0, extra: str = "", t: float | None = None) -> None:
    if _TRACE is None:
        return
    rec = {"ev": ev, "t": time.time() if t is None else t, "id": ident, "extra": extra}
    _TRACE.write(json.dumps(rec) + "\n")


mark("py_main", t=T_MAIN)

from ipykernel.kernelapp import IPKernelApp  # noqa: E402
from ipykernel.kernelbase import Kernel  # noqa: E402

from jutul_jkernel import _resources, streams, supervisor  # noqa: E402
from jutul_jkernel import kernel as kernel_module  # noqa: E402
from jutul_jkernel.__main__ import APP_OPTIONS  # noqa: E402
from jutul_jkernel.kernel import JuliaKernel  # noqa: E402
from jutul_jkernel.protocol import FrameKind  # noqa: E402

mark("imported")

if os.environ.get("BENCH_SERVER_JL"):
    _server = Path(os.environ["BENCH_SERVER_JL"])
    _resources.server_script = lambda: _server  # type: ignore[assignment]


def _install_tracing() -> None:
    """Wrap the methods whose timestamps the breakdowns need."""
    global _accept, _create, _send, _dispatch, _do_execute  # the originals the wrappers call

    def _around_async(fn: Any, begin: str, end: str | None) -> Any:
        @functools.wraps(fn)
        async def wrapper(*args: Any, **kwargs: Any) -> Any:
            mark(begin)
            try:
                return await fn(*args, **kwargs)
            finally:
                if end:
                    mark(end)

        return wrapper

    def _around(fn: Any, begin: str, end: str) -> Any:
        @functools.wraps(fn)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            mark(begin)
            try:
                return fn(*args, **kwargs)
            finally:
                mark(end)

        return wrapper

    _sup = supervisor.JuliaSupervisor
    _sup._spawn = _around_async(_sup._spawn, "spawn_begin", "spawn_end")  # type: ignore[method-assign]
    _accept = _sup._accept

    async def _accept_marked(self: Any, *args: Any) -> Any:
        got = await _accept(self, *args)
        mark("accepted")
        return got

    _sup._accept = _accept_marked  # type: ignore[method-assign]
    _create = asyncio.create_subprocess_exec

    async def _create_marked(*args: Any, **kwargs: Any) -> Any:
        proc = await _create(*args, **kwargs)
        mark("exec_returned", proc.pid)
        return proc

    asyncio.create_subprocess_exec = _create_marked  # type: ignore[assignment]
    _send = _sup._send

    async def _send_marked(self: Any, j: Any, data: bytes) -> None:
        if data.startswith((b"EXE ", b"EXN ")):
            mark("exe_sent", int(data.split(b" ", 2)[1]))
        await _send(self, j, data)

    _sup._send = _send_marked  # type: ignore[method-assign]
    _dispatch = _sup._dispatch
    _out = {"frames": 0, "bytes": 0}

    def _dispatch_marked(self: Any, j: Any, frame: Any) -> None:
        if frame.kind is FrameKind.OUT:
            if _out["frames"] == 0:
                mark("first_out")
            _out["frames"] += 1
            _out["bytes"] += len(frame.payload)
        elif frame.kind is FrameKind.INF:
            mark("inf")
        elif frame.kind is FrameKind.RES:
            mark("res_recv", int(frame.args[0]))
        _dispatch(self, j, frame)

    _sup._dispatch = _dispatch_marked  # type: ignore[method-assign]

    JuliaKernel.kernel_info_request = _around_async(  # type: ignore[method-assign]
        JuliaKernel.kernel_info_request, "kinfo_begin", "kinfo_end"
    )
    JuliaKernel.execute_request = _around_async(  # type: ignore[method-assign]
        Kernel.execute_request, "exec_req_begin", "exec_req_end"
    )
    _do_execute = JuliaKernel.do_execute

    async def _do_execute_marked(self: Any, *args: Any, **kwargs: Any) -> Any:
        _out["frames"] = _out["bytes"] = 0
        mark("do_exec_begin")
        try:
            return await _do_execute(self, *args, **kwargs)
        finally:
            mark("do_exec_end", extra=f"out_frames={_out['frames']} out_bytes={_out['bytes']}")

    JuliaKernel.do_execute = _do_execute_marked  # type: ignore[method-assign]
    JuliaKernel.start = _around(JuliaKernel.start, "kernel_start_begin", "kernel_start_end")  # type: ignore[method-assign]


if __name__ == "__main__":
    if _TRACE is not None:
        _install_tracing()
    if os.environ.get("BENCH_FLUSH_BYTES"):
        streams.FLUSH_BYTES = int(os.environ["BENCH_FLUSH_BYTES"])
    if os.environ.get("BENCH_IOPUB_SYNC_BYTES"):
        kernel_module._IOPUB_SYNC_BYTES = int(os.environ["BENCH_IOPUB_SYNC_BYTES"])
    options: dict[str, Any] = dict(APP_OPTIONS)  # what `python -m jutul_jkernel` starts
    if os.environ.get("BENCH_OUTSTREAM"):
        del options["outstream_class"]  # ipykernel's default OutStream
    app = IPKernelApp.instance(**options)
    mark("app_init_begin")
    app.initialize()
    mark("app_init_end")
    if os.environ.get("BENCH_EXECUTE_SLEEP"):
        app.kernel._execute_sleep = float(os.environ["BENCH_EXECUTE_SLEEP"])
    app.start()
