"""py-spy on the kernel process while it answers round trips and prints: where Python spends CPU.

py-spy attaches to the running kernel by pid (no change to the kernel, no restart) and samples
it without pausing it (``--nonblocking``). py-spy's idle filter still let through threads parked
in ``select`` or ``Condition.wait`` here, and ``--gil`` saw no GIL holder in this kernel's main
thread, so samples whose leaf is one of those waits are dropped (``_IDLE_LEAVES``): what is left
approximates CPU time. Each profile
is folded by thread, by leaf frame (self time), by frame anywhere on the stack (inclusive
time) and by the leaf's package. CPU per OS thread, for the kernel and for its Julia, comes from
``/proc`` through psutil over the same interval, GIL or not (zmq's I/O threads included).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import psutil

from .cases import Plan, Result, settle
from .harness import JULIA, PYTHON, REPO, BenchError, JupyterEnv, Kernel
from .report import Row

_RATE = 250  # samples per second; py-spy pauses the target briefly for each
_ATTACH_TIMEOUT = 15.0
_IDLE_LEAVES = (
    "EpollSelector.select ",
    "Condition.wait ",
    "Event.wait ",
    "Poller.poll ",
    "Thread._wait_for_tstate_lock ",
    "Thread.join ",
    "poll (",
    "select (",
    "sleep (",
)
_FRAME = re.compile(r"^(?P<func>.*) \((?P<file>.*?)(?::(?P<line>\d+))?\)$")


def pyspy() -> str | None:
    """The py-spy executable beside this python, or on PATH."""
    beside = Path(sys.executable).parent / "py-spy"
    return str(beside) if beside.exists() else shutil.which("py-spy")


def short_file(path: str) -> str:
    for marker in ("site-packages/", "/lib/python3", f"{REPO}/"):
        if marker in path:
            rest = path.split(marker, 1)[1]
            return rest.split("/", 1)[1] if marker == "/lib/python3" else rest
    return os.path.basename(path)


def package_of(file: str) -> str:
    head = file.split("/", 1)[0]
    if head.endswith(".py"):
        head = head[:-3]
    return {"zmq": "pyzmq", "jutul_jkernel": "jutul_jkernel"}.get(head, head)


@dataclass
class Profile:
    """Folded py-spy samples of one workload."""

    rate: int
    wall: float
    threads: Counter[str] = field(default_factory=Counter)
    tids: dict[int, str] = field(default_factory=dict)  # native thread id -> Python name
    idle: Counter[str] = field(default_factory=Counter)  # samples dropped as waits
    leaf: dict[str, Counter[str]] = field(default_factory=dict)
    inclusive: dict[str, Counter[str]] = field(default_factory=dict)
    packages: dict[str, Counter[str]] = field(default_factory=dict)

    def top(self, thread: str, kind: str, n: int = 12) -> list[tuple[str, float]]:
        """The ``n`` heaviest frames as (frame, CPU seconds)."""
        table = self.leaf if kind == "self" else self.inclusive
        total = self.threads[thread]
        out = []
        for frame, count in table.get(thread, Counter()).most_common():
            if kind == "inclusive" and count >= 0.97 * total:
                continue  # the event loop and thread entry frames: everything is under them
            out.append((frame, count / self.rate))
            if len(out) == n:
                break
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "rate": self.rate,
            "wall": self.wall,
            "threads_cpu_s": {t: c / self.rate for t, c in self.threads.items()},
            "self": {t: self.top(t, "self", 25) for t in self.threads},
            "inclusive": {t: self.top(t, "inclusive", 25) for t in self.threads},
            "packages": {
                t: {p: c / self.rate for p, c in pk.most_common()}
                for t, pk in self.packages.items()
            },
        }


def parse_raw(path: Path, rate: int, wall: float) -> Profile:
    prof = Profile(rate, wall)
    for line in path.read_text().splitlines():
        stack, _, count_s = line.rpartition(" ")
        if not stack or not count_s.isdigit():
            continue
        count = int(count_s)
        parts = stack.split(";")
        head = re.match(r"thread \((?:0x)?([0-9a-fA-F]+)\): (.*)", parts[0])
        thread = head.group(2).strip() if head else "?"
        if head:
            prof.tids[int(head.group(1))] = thread
        frames = []
        for raw in parts[1:]:
            m = _FRAME.match(raw)
            frames.append(f"{m['func']} ({short_file(m['file'])})" if m else raw)
        if not frames:
            continue
        if frames[-1].startswith(_IDLE_LEAVES):
            prof.idle[thread] += count
            continue
        prof.threads[thread] += count
        prof.leaf.setdefault(thread, Counter())[frames[-1]] += count
        inc = prof.inclusive.setdefault(thread, Counter())
        for f in set(frames):
            inc[f] += count
        # The leaf's package, but time under the kernel's own code counts as the kernel's
        # when the leaf is in the standard library (its dict/bytes work, its encode calls).
        m = re.search(r"\(([^)]*)\)$", frames[-1])
        pkg = package_of(m.group(1)) if m else "?"
        prof.packages.setdefault(thread, Counter())[pkg] += count
    return prof


class Recorder:
    """``py-spy record`` on one pid for the duration of a ``with`` block."""

    def __init__(self, pid: int, out: Path, rate: int = _RATE) -> None:
        exe = pyspy()
        if exe is None:
            msg = "py-spy is not installed (pip install -e '.[bench]')"
            raise BenchError(msg)
        self.argv = [
            exe,
            "record",
            "--pid",
            str(pid),
            "--rate",
            str(rate),
            "--format",
            "raw",
            "--threads",
            "--nonblocking",
            "--full-filenames",
            "--output",
            str(out),
        ]
        self.pid = pid
        self.cpu_before: dict[int, float] = {}
        self.cpu: dict[int, float] = {}
        self.others_before: dict[int, float] = {}
        self.others: dict[int, float] = {}
        self.out = out
        self.rate = rate
        self.proc: subprocess.Popen[str] | None = None
        self.log: list[str] = []
        self.t0 = 0.0
        self.wall = 0.0

    def __enter__(self) -> Recorder:
        for _ in range(3):  # a just-started process may not show its python yet
            self.proc = subprocess.Popen(
                self.argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
            )
            attached = threading.Event()
            reader = threading.Thread(target=self._read, args=(attached,), daemon=True)
            reader.start()
            if attached.wait(_ATTACH_TIMEOUT):
                self.cpu_before = _thread_cpu(self.pid)
                self.others_before = _child_cpu(self.pid)
                self.t0 = time.perf_counter()
                return self
            self.proc.kill()
            self.proc.wait()
        msg = f"py-spy did not attach: {''.join(self.log)[-500:]}"
        raise BenchError(msg)

    def _read(self, attached: threading.Event) -> None:
        assert self.proc is not None and self.proc.stdout is not None
        for line in self.proc.stdout:
            self.log.append(line)
            if "Sampling process" in line:
                attached.set()

    def __exit__(self, *exc: object) -> None:
        self.wall = time.perf_counter() - self.t0
        after = _thread_cpu(self.pid)
        self.cpu = {t: c - self.cpu_before.get(t, 0.0) for t, c in after.items()}
        after_children = _child_cpu(self.pid)
        self.others = {p: c - self.others_before.get(p, 0.0) for p, c in after_children.items()}
        if self.proc is not None:
            self.proc.send_signal(signal.SIGINT)  # py-spy writes its output on Ctrl-C
            try:
                self.proc.wait(30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()

    def profile(self) -> Profile:
        if not self.out.exists():
            msg = f"py-spy wrote no profile: {''.join(self.log)[-500:]}"
            raise BenchError(msg)
        return parse_raw(self.out, self.rate, self.wall)


def _thread_cpu(pid: int) -> dict[int, float]:
    """CPU seconds (user + system) of each thread of ``pid``, by native thread id."""
    return {t.id: t.user_time + t.system_time for t in psutil.Process(pid).threads()}


def _child_cpu(pid: int) -> dict[int, float]:
    """CPU seconds of each child process of ``pid`` (Julia, for julia-supervised)."""
    out = {}
    for child in psutil.Process(pid).children():
        try:
            c = child.cpu_times()
            out[child.pid] = c.user + c.system
        except psutil.NoSuchProcess:
            continue
    return out


def _roundtrips(n: int) -> Callable[[Kernel], None]:
    def go(k: Kernel) -> None:
        for _ in range(n):
            k.check("1+1", "2")

    return go


def _prints(k: Kernel) -> None:
    code = {
        JULIA: "for i in 1:200_000; println(lpad(i, 99)); end",
        PYTHON: "for i in range(200000): print(str(i).rjust(99))",
    }[k.name]
    for _ in range(2):
        k.run(code, keep_text=False, timeout=600)


def profiles(env: JupyterEnv, plan: Plan) -> Result:
    """Profile both kernels on round trips and on the 200,000-line cell."""
    workloads = {
        "round trips": _roundtrips(plan.profile_cells),
        "200,000 println lines x2": _prints,
    }
    rows: list[Row] = []
    data: dict[str, Any] = {}
    for name in (JULIA, PYTHON):
        with Kernel(env, name) as k:
            k.start()
            settle(k)
            _prints(k)  # compile the loop before profiling it
            for wname, work in workloads.items():
                out = env.root / f"pyspy-{name}-{wname.split()[0]}.txt"
                with Recorder(k.pid, out) as rec:
                    t0 = time.perf_counter()
                    work(k)
                    took = time.perf_counter() - t0
                prof = rec.profile()
                key = f"{k.label}: {wname}"
                data[key] = {
                    **prof.as_dict(),
                    "workload_s": took,
                    "thread_cpu_s": {prof.tids.get(t, str(t)): c for t, c in rec.cpu.items()},
                    "child_cpu_s": rec.others,
                }
                rows += _rows(key, prof, took, rec)
    return rows, data


def _rows(key: str, prof: Profile, took: float, rec: Recorder) -> list[Row]:
    sec = f"profile: {key}"
    rows = [Row(sec, "workload wall time", "s", took)]
    named = sorted(rec.cpu.items(), key=lambda kv: -kv[1])
    total = sum(rec.cpu.values())
    rows.append(
        Row(
            sec,
            "kernel process CPU, all threads (/proc)",
            "s",
            total,
            note=f"{100 * total / took:.0f}% of wall",
        )
    )
    for tid, cpu in named[:5]:
        name = prof.tids.get(tid, "native thread (zmq I/O or other C thread)")
        rows.append(
            Row(
                sec,
                f"  thread {name}: CPU (/proc)",
                "s",
                cpu,
                note=f"{100 * cpu / took:.0f}% of wall",
            )
        )
    for pid, cpu in rec.others.items():
        rows.append(
            Row(
                sec,
                f"child process {pid} (Julia) CPU",
                "s",
                cpu,
                note=f"{100 * cpu / took:.0f}% of wall",
            )
        )
    for thread, count in prof.threads.most_common(3):
        rows.append(
            Row(
                sec,
                f"thread {thread}: active samples (py-spy, waits dropped)",
                "s",
                count / prof.rate,
            )
        )
    main = (
        "MainThread"
        if "MainThread" in prof.threads
        else (prof.threads.most_common(1)[0][0] if prof.threads else "")
    )
    for pkg, count in prof.packages.get(main, Counter()).most_common(6):
        rows.append(Row(sec, f"{main} self time in module {pkg}", "s", count / prof.rate))
    for frame, secs in prof.top(main, "self", 8):
        rows.append(Row(sec, f"{main} self: {frame}", "s", secs))
    for frame, secs in prof.top(main, "inclusive", 12):
        rows.append(Row(sec, f"{main} incl: {frame}", "s", secs))
    if "IOPub" in prof.threads:
        for frame, secs in prof.top("IOPub", "inclusive", 5):
            rows.append(Row(sec, f"IOPub incl: {frame}", "s", secs))
    return rows
