"""``python -m bench.agent``: the agent's and the MCP server's cost per request, and the agent's
interrupts beside clikernel's.

    python -m bench.agent                                   # round trip only
    python -m bench.agent --clikernel /tmp/venv/bin/clikernel --runs 400 --interrupts 10

Round trip: ``1+1`` through the agent's pipes, through the MCP server (``julia_eval`` by the
SDK's stdio client, as an MCP client calls it; needs the ``mcp`` extra), through the kernel
(jupyter_client, as ``python -m bench`` measures it) and through a JuliaSupervisor on an event
loop in a thread of this process, interleaved in blocks so that the machine's noise falls on
all of them; medians are printed. Interrupts: a worker that runs a ``sleep`` gets SIGINT once
the request provably runs (it creates a file); then three requests follow. Printed per worker:
how long until the response ended, whether it ended with the delimiter, and what the three
requests answered. clikernel (any worker with its protocol) is never a dependency of this
project: pass the path of one installed elsewhere.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import select
import signal
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor

from .cases import settle
from .harness import JULIA, JupyterEnv, Kernel
from .report import stat

_START_WAIT = 60.0
_INTERRUPT_WAIT = 10.0  # the supervisor's escalation ends within ~6 s; clikernel may never answer
_ANSWER_WAIT = 5.0


class LineWorker:
    """A stdin/stdout worker of clikernel's protocol, read line by line with deadlines."""

    def __init__(self, argv: list[str], marker: str) -> None:
        self.proc = subprocess.Popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL
        )
        self.buffer = b""
        while (line := self.line(_START_WAIT)) != marker:
            if line is None:
                raise RuntimeError(f"{argv[0]} never printed {marker!r}")
        self.delimiter = self.line(_START_WAIT)

    def line(self, wait: float) -> str | None:
        """The next line, or None if none came within ``wait`` seconds (or at EOF)."""
        deadline = time.monotonic() + wait
        assert self.proc.stdout is not None
        while b"\n" not in self.buffer:
            left = deadline - time.monotonic()
            if left <= 0 or not select.select([self.proc.stdout], [], [], left)[0]:
                return None
            chunk = os.read(self.proc.stdout.fileno(), 65536)
            if not chunk:
                return None
            self.buffer += chunk
        line, _, self.buffer = self.buffer.partition(b"\n")
        return line.decode(errors="replace")

    def send(self, code: str) -> None:
        assert self.proc.stdin is not None
        self.proc.stdin.write(code.encode() + b"\n")
        self.proc.stdin.flush()

    def response(self, wait: float) -> list[str] | None:
        """Lines up to the delimiter (ack included), or None if it never came."""
        lines = []
        while (line := self.line(wait)) != self.delimiter:
            if line is None:
                return None
            lines.append(line)
        return lines

    def close(self) -> None:
        self.proc.kill()
        self.proc.wait(10)


def agent_worker() -> LineWorker:
    return LineWorker(
        [sys.executable, "-m", "jutul_jkernel.agent"], "loading complete. first delimiter:"
    )


class ThreadedSupervisor:
    """A JuliaSupervisor on an event loop in a thread, so its samples interleave with the rest."""

    def __init__(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.sup = JuliaSupervisor()
        self.call(self.sup.start())

    def call(self, coro: Any) -> Any:
        return asyncio.run_coroutine_threadsafe(coro, self.loop).result(_START_WAIT)

    def close(self) -> None:
        self.call(self.sup.shutdown())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


class ThreadedMcpClient:
    """``jutul-jkernel-mcp`` driven by the SDK's stdio client on an event loop in a thread."""

    def __init__(self) -> None:
        from mcp import ClientSession, StdioServerParameters  # the mcp extra, only here
        from mcp.client.stdio import stdio_client

        params = StdioServerParameters(
            command=sys.executable, args=["-m", "jutul_jkernel.mcp"], env=dict(os.environ)
        )
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.stop = asyncio.Event()
        self.session: Any = None
        ready = threading.Event()

        async def run() -> None:
            with open(os.devnull, "w") as errlog:
                async with (
                    stdio_client(params, errlog=errlog) as (read, write),
                    ClientSession(read, write) as session,
                ):
                    await session.initialize()
                    self.session = session
                    ready.set()
                    await self.stop.wait()

        self.main = asyncio.run_coroutine_threadsafe(run(), self.loop)
        if not ready.wait(_START_WAIT):
            raise RuntimeError("the MCP server did not initialise")

    def eval(self, code: str) -> str:
        result = asyncio.run_coroutine_threadsafe(
            self.session.call_tool("julia_eval", {"code": code}), self.loop
        ).result(_START_WAIT)
        return "".join(c.text for c in result.content if c.type == "text")

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self.stop.set)
        self.main.result(_START_WAIT)
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def roundtrip(runs: int, warmup: int = 20, block: int = 20) -> None:
    samples: dict[str, list[float]] = {"agent": [], "mcp": [], "kernel": [], "supervisor": []}
    with JupyterEnv() as env, Kernel(env, JULIA) as kernel:
        kernel.start()
        settle(kernel)
        agent = agent_worker()
        mcp = ThreadedMcpClient()
        sup = ThreadedSupervisor()

        def agent_1p1() -> None:
            agent.send("1+1")
            got = agent.response(_ANSWER_WAIT)
            if got != [".", "2"]:
                raise RuntimeError(f"the agent answered 1+1 with {got!r}")

        def mcp_1p1() -> None:
            if (text := mcp.eval("1+1")) != "2":
                raise RuntimeError(f"the MCP server answered 1+1 with {text!r}")

        def sup_1p1() -> None:
            if (text := sup.call(sup.sup.execute("1+1")).text) != "2":
                raise RuntimeError(f"JuliaSupervisor answered 1+1 with {text!r}")

        ways = {
            "agent": agent_1p1,
            "mcp": mcp_1p1,
            "kernel": lambda: kernel.check("1+1", "2"),
            "supervisor": sup_1p1,
        }
        try:
            for run in ways.values():
                for _ in range(warmup):
                    run()
            time.sleep(4)  # the Julias compile their warm-up steps while idle
            for start in range(0, runs, block):
                for name, run in ways.items():
                    for _ in range(min(block, runs - start)):
                        t0 = time.perf_counter()
                        run()
                        samples[name].append(time.perf_counter() - t0)
        finally:
            agent.close()
            mcp.close()
            sup.close()
    medians = {name: (stat(xs, "median") or 0.0) * 1e3 for name, xs in samples.items()}
    print(f"round trip of 1+1, {runs} each, interleaved in blocks of {block} (ms):")
    for name, xs in samples.items():
        p90 = (stat(xs, "p90") or 0.0) * 1e3
        print(f"  {name:<11} median {medians[name]:6.2f}  p90 {p90:6.2f}")
    print(
        f"  agent / kernel = {medians['agent'] / medians['kernel']:.2f}; the agent's own share "
        f"(agent - supervisor in a thread) = {medians['agent'] - medians['supervisor']:.2f} ms; "
        f"MCP's (mcp - agent) = {medians['mcp'] - medians['agent']:.2f} ms"
    )


def interrupt(name: str, worker: LineWorker, sleep_code: str, started: Path, trials: int) -> None:
    """SIGINT a running sleep ``trials`` times; report each response and the requests after."""
    try:
        worker.send(sleep_code.replace("1000", "0.01"))  # compiled before the timed trials
        worker.response(_START_WAIT)
        for trial in range(trials):
            started.unlink(missing_ok=True)
            worker.send(sleep_code)
            ack = worker.line(_ANSWER_WAIT)
            deadline = time.monotonic() + _START_WAIT
            while not started.exists() and time.monotonic() < deadline:
                time.sleep(0.005)
            t0 = time.perf_counter()
            worker.proc.send_signal(signal.SIGINT)
            body = worker.response(_INTERRUPT_WAIT)
            latency = time.perf_counter() - t0
            print(f"{name} #{trial + 1}: ack {ack!r}; after SIGINT:", end=" ")
            if body is None:
                alive = worker.proc.poll() is None
                print(f"no delimiter within {_INTERRUPT_WAIT:g} s; the worker is", end=" ")
                print("alive" if alive else f"gone ({worker.proc.returncode})")
            else:
                print(f"response {body!r} in {latency * 1e3:.0f} ms")
            for i in range(3):
                worker.send(f"{7000 + i} + 1")
                print(f"  {7000 + i} + 1 -> {worker.response(_ANSWER_WAIT)!r}")
    finally:
        worker.close()


def main() -> int:
    parser = argparse.ArgumentParser(prog="python -m bench.agent", description=__doc__)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--interrupts", type=int, default=5, help="trials with the agent")
    parser.add_argument("--clikernel", metavar="PATH", help="a clikernel executable to compare")
    args = parser.parse_args()
    roundtrip(args.runs)
    with tempfile.TemporaryDirectory() as tmp:
        started = Path(tmp) / "agent-started"
        code = f'touch("{started}"); sleep(1000)'
        interrupt("agent", agent_worker(), code, started, args.interrupts)
        if args.clikernel:
            started = Path(tmp) / "clikernel-started"
            worker = LineWorker([args.clikernel], "loading complete. session delimiter:")
            code = f"import time; open('{started}', 'w').close(); time.sleep(1000)"
            interrupt("clikernel", worker, code, started, 1)  # it is out of step after one
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
