"""Drive a supervised Julia from plain Python: no Jupyter involved.

Run it with ``make demo`` or ``.venv/bin/python examples/supervisor_demo.py``. It starts Julia,
evaluates cells with live output, interrupts a long cell from another task, shows how errors
and deaths come back, restarts, and shuts down.
"""

from __future__ import annotations

import asyncio
import sys
import time

from jutul_jkernel.supervisor.julia_supervisor import JuliaDiedError, JuliaSupervisor


def show_output(stream: str, data: bytes) -> None:
    """Print Julia's output as it arrives; stderr goes to our stderr."""
    target = sys.stdout if stream == "stdout" else sys.stderr
    target.write(data.decode("utf-8", "replace"))
    target.flush()


async def cell(julia: JuliaSupervisor, code: str) -> None:
    print(f"\njulia> {code}")
    t0 = time.perf_counter()
    result = await julia.execute(code, show_output)
    took = (time.perf_counter() - t0) * 1000
    if result.status == "ok":
        if result.text:
            print(result.text)
    else:
        print(f"[{result.status}] {result.text.splitlines()[0] if result.text else ''}")
    if result.notice:
        print(f"[notice] {result.notice}")
    print(f"({took:.0f} ms)")


async def main() -> None:
    t0 = time.perf_counter()
    async with JuliaSupervisor() as julia:
        print(
            f"Julia {julia.julia_version} ready in {time.perf_counter() - t0:.2f} s "
            f"(pid {julia.pid})"
        )
        await cell(julia, "x = 6 * 7")
        await cell(julia, 'for i in 1:3; println("step $i"); sleep(0.2); end; x')
        await cell(julia, 'ccall(:puts, Cint, (Cstring,), "output from C is captured too")')
        await cell(julia, 'error("errors come back as results")')

        print("\njulia> sleep(1000)   # interrupted from another task after 1 s")
        running = asyncio.create_task(julia.execute("sleep(1000)", show_output))
        await asyncio.sleep(1.0)
        t_int = time.perf_counter()
        await julia.interrupt()
        result = await running
        print(
            f"[{result.status}] after {(time.perf_counter() - t_int) * 1000:.0f} ms; "
            f"state kept: {result.state_kept}"
        )
        await cell(julia, "x  # still here")

        print("\njulia> exit(3)   # Julia dies; the error says how")
        try:
            await julia.execute("exit(3)", show_output)
        except JuliaDiedError as exc:
            print(f"[died] {str(exc).splitlines()[0]}")
        await cell(julia, "isdefined(Main, :x)  # the next cell runs in a fresh Julia")

        await julia.restart()
        print(f"\nrestarted: new pid {julia.pid}")
        await cell(julia, "1 + 1")
    print("\nshut down; no Julia left running")


if __name__ == "__main__":
    asyncio.run(main())
