"""Interrupt matrix through jupyter_client: every cell shape, many trials, one kernel.

    python -m bench.interrupt_matrix [--trials 20] [--settle 1.0] [--ssh]

One kernel (the installed kernelspec, as a notebook would start it) runs each shape in
rotation; each trial interrupts it after ``--settle`` seconds with
``KernelManager.interrupt_kernel()`` and then checks that a variable set at the start is still
there. Prints, per shape, the median and maximum time from the interrupt to the execute_reply,
how often state was kept, and how often the interrupt had to be forced (the cell's notice).
With ``--ssh`` a private sshd on loopback (the tests' fixture) serves two more workers, and a
``pmap`` over them is one more shape.
Interrupts must never lose the session: the kernel's promise, measured here rather than
asserted, since timings on a shared 2-core machine are noise.
"""

from __future__ import annotations

import argparse
import os
import queue
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from jupyter_client.manager import KernelManager

SHAPES: dict[str, str] = {
    "allocating loop": "while true; global junk = [1, 2, 3]; end",
    "float spin": "function spin_(); x = 0.0; while true; x += 1.0; end; end; spin_()",
    "sleep": "sleep(1000)",
    "wait(Condition())": "wait(Condition())",
    "blocking ccall": "ccall(:sleep, Cuint, (Cuint,), 1000)",
    "print flood": 'while true; println("tick tock " ^ 8); end',
    "@async tasks printing": (
        'ts = [@async while true; println("task ", i); sleep(0.01); end for i in 1:3]; sleep(1000)'
    ),
    "readline waiting": "readline()",
    "shell command": ";sleep 1000",
    # Pkg's REPL mode stalled in libgit2 on a server that accepts but never answers (a hung
    # network during `] add`): libgit2 retries a read that a SIGINT interrupts.
    "] add, server silent": "] add http://127.0.0.1:{silent_port}/Slow.jl.git",
    "Distributed pmap (local)": "pmap(x -> (sleep(1000); x), local_workers)",
}
SSH_SHAPE = {"Distributed pmap (ssh)": "pmap(x -> (sleep(1000); x), ssh_workers)"}
SETUP = "using Distributed; local_workers = addprocs(2); keep = 42"
REPLY_TIMEOUT = 30.0


def _install() -> str:
    prefix = tempfile.mkdtemp(prefix="jj-matrix-")
    subprocess.run(
        [
            sys.executable,
            "-m",
            "jutul_jkernel.install",
            *("--prefix", prefix, "--name", "jj-matrix"),
            "--no-doctor",  # the doctor's seconds are no part of the matrix
        ],
        check=True,
        capture_output=True,
    )
    os.environ["JUPYTER_PATH"] = os.path.join(prefix, "share", "jupyter")
    return "jj-matrix"


def _run(kc: Any, code: str, timeout: float) -> tuple[dict, str, str]:
    """Run ``code``; return (reply, stderr text, result text)."""
    return _wait(kc, kc.execute(code), timeout)


def _wait(kc: Any, msg_id: str, timeout: float) -> tuple[dict, str, str]:
    deadline = time.monotonic() + timeout
    reply = None
    idle = False
    stderr, result = [], ""
    while not (reply and idle):
        left = deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError(f"no reply to {msg_id} within {timeout} s")
        try:
            m = kc.get_iopub_msg(timeout=min(0.05, left))
            if m["parent_header"].get("msg_id") == msg_id:
                if m["msg_type"] == "stream" and m["content"]["name"] == "stderr":
                    stderr.append(m["content"]["text"])
                elif m["msg_type"] == "execute_result":
                    result = m["content"]["data"]["text/plain"]
                elif m["msg_type"] == "status" and m["content"]["execution_state"] == "idle":
                    idle = True
        except queue.Empty:
            pass
        if reply is None:
            try:
                r = kc.get_shell_msg(timeout=0.001)
                if r["parent_header"].get("msg_id") == msg_id:
                    reply = r
            except queue.Empty:
                pass
    return reply, "".join(stderr), result


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--settle", type=float, default=1.0)
    parser.add_argument("--shape", default="", help="only the shapes whose name contains this")
    parser.add_argument("--ssh", action="store_true", help="also pmap over two workers via ssh")
    args = parser.parse_args()
    # Listens and never accepts: the kernel completes the TCP handshake, nothing answers.
    silent = socket.socket()
    silent.bind(("127.0.0.1", 0))
    silent.listen(64)
    port = str(silent.getsockname()[1])
    shapes = {n: c.replace("{silent_port}", port) for n, c in SHAPES.items()}
    setup = SETUP
    ssh: Any = None
    if args.ssh:
        from tests.ssh_fixture import SshServer  # the tests' private sshd

        ssh = SshServer.start(Path(tempfile.mkdtemp(prefix="jj-matrix-ssh-")))
        shapes.update(SSH_SHAPE)
        # The julia on PATH, as the kernel runs it (an ssh login lacks the kernel's environment:
        # tests/test_distributed_ssh.py _remote_julia says why).
        remote = shutil.which("julia") or "julia"
        setup += (
            f'; ssh_workers = addprocs([("{ssh.host} 127.0.0.1", 2)]; sshflags = {ssh.sshflags}, '
            f'exename = "{remote}")'
        )
    km = KernelManager(kernel_name=_install())
    km.start_kernel()
    kc = km.client()
    kc.start_channels()
    rows: dict[str, list[tuple[float, bool, bool]]] = {name: [] for name in shapes}
    only = [n for n in shapes if not args.shape or args.shape in n]
    try:
        kc.wait_for_ready(timeout=60)
        reply, _, _ = _run(kc, setup, 180)
        assert reply["content"]["status"] == "ok", reply["content"]
        for trial in range(args.trials):
            for name in only:
                code = shapes[name]
                msg_id = kc.execute(code, allow_stdin=name == "readline waiting")
                time.sleep(args.settle)
                t0 = time.monotonic()
                km.interrupt_kernel()
                try:
                    reply, stderr, _ = _wait(kc, msg_id, REPLY_TIMEOUT)
                except TimeoutError:
                    # a hang is a result too: say which shape, then try to go on
                    print(
                        f"trial {trial + 1}: {name}: no reply within {REPLY_TIMEOUT:g} s",
                        file=sys.stderr,
                        flush=True,
                    )
                    km.interrupt_kernel()
                    reply, stderr = {}, "hung"
                took = time.monotonic() - t0
                _, _, kept = _run(kc, "keep", REPLY_TIMEOUT)
                if kept != "42":  # lost: set it again so the next trials measure something
                    _run(kc, setup, 180)
                rows[name].append((took, kept == "42", "forced" in stderr))
            print(f"trial {trial + 1}/{args.trials} done", file=sys.stderr, flush=True)
    finally:
        kc.stop_channels()
        km.shutdown_kernel(now=False)
        silent.close()
        if ssh is not None:
            # Workers get `rmprocs` at shutdown and need a moment to exit (the ssh tests give
            # them GONE_TIMEOUT too); what is still there after that was left behind.
            deadline = time.monotonic() + 30.0
            while ssh.session_processes() and time.monotonic() < deadline:
                time.sleep(0.1)
            left = ssh.stop()
            if left:
                print(f"left under the sshd 30 s after shutdown: {left}", file=sys.stderr)
    print(f"{'shape':28} {'median':>9} {'max':>9}  kept   forced")
    for name, results in rows.items():
        if not results:
            continue
        times = [t for t, _, _ in results]
        kept = sum(k for _, k, _ in results)
        forced = sum(f for _, _, f in results)
        print(
            f"{name:28} {statistics.median(times) * 1000:7.0f}ms {max(times) * 1000:7.0f}ms"
            f"  {kept:2}/{len(results):<2}  {forced:2}"
        )
    lost = sum(not k for r in rows.values() for _, k, _ in r)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
