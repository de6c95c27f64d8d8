"""A private Jupyter prefix with the kernels under test, and a client that times cells by hand.

:class:`JupyterEnv` installs three kernelspecs into a temporary ``--prefix`` and points
``JUPYTER_PATH`` (and Jupyter's and IPython's own directories) there, so the user's kernelspecs,
config and profiles take no part: the real "Julia (supervised)" spec, ipykernel's python3 spec
written by *this* venv's python (the baseline), and a "late launch" spec that runs the same
kernel but launches Julia only once ipykernel is imported and the kernel starts (how the kernel
started Julia before issue 10 item 3; the start-up rows compare), the floor of any ipykernel
subclass (:mod:`bench.bare_kernel`), and, where the machine has one, the real IJulia's spec
(``JKERNEL_IJULIA_KERNELSPEC``: its folder, as ``IJulia.installkernel`` wrote it; it must run
the Julia this kernel runs). :class:`Kernel` starts one with
``KernelManager`` and runs cells with a plain ``BlockingKernelClient``, polling the shell and
IOPub sockets itself: no ``execute_interactive``, no output hooks, nothing between the wire and
the clock but message deserialisation, which both kernels pay alike.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import zmq
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

JULIA = "bench-julia-supervised"
PYTHON = "bench-python3"
LATE = "bench-julia-late-launch"
IJULIA = "bench-ijulia"
BARE = "bench-bare-kernel"
LABELS = {
    JULIA: "julia-supervised",
    PYTHON: "ipykernel",
    LATE: "julia-supervised (late launch)",
    IJULIA: "IJulia",
    BARE: "bare ipykernel Kernel",
}
# The folder of a real IJulia's kernelspec (kernel.json as IJulia.installkernel writes it):
# where set, IJulia is measured beside this kernel in every section. docs/development.md says
# how IJulia was installed on the development machines, outside the checkout.
IJULIA_KERNELSPEC = "JKERNEL_IJULIA_KERNELSPEC"
# The kernel as `python -m jutul_jkernel` runs it, minus the launch before ipykernel's imports.
_LATE_LAUNCH = (
    "from jutul_jkernel.jupyter.app import JuliaKernelApp; "
    "from jutul_jkernel.__main__ import app_options; "
    "JuliaKernelApp.launch_instance(**app_options())"
)

REPO = Path(__file__).resolve().parent.parent
START_TIMEOUT = 60.0
CELL_TIMEOUT = 120.0
# The client's sockets retry a refused connect every RECONNECT_IVL ms; ZMQ's default of 100 ms
# would put up to 0.1 s of the client's retry policy into every start-up figure.
_RECONNECT_IVL_MS = 10


class BenchError(RuntimeError):
    """A benchmark could not be measured (a kernel did not answer, output was wrong)."""


# ---- environment ----


class JupyterEnv:
    """Kernelspecs in a temporary prefix; Jupyter and IPython directories redirected there."""

    def __init__(self, ijulia: Path | None = None) -> None:
        self.ijulia = ijulia
        self.root = Path(tempfile.mkdtemp(prefix="jutul-bench-"))
        self.prefix = self.root / "prefix"
        self.logs = self.root / "logs"
        self.logs.mkdir()
        self._old_env: dict[str, str | None] = {}
        self.specs: dict[str, dict[str, Any]] = {}
        self.keep = False  # set when something failed: its kernel logs are worth reading

    def __enter__(self) -> JupyterEnv:
        for var, value in {
            "JUPYTER_PATH": str(self.prefix / "share" / "jupyter"),
            "JUPYTER_DATA_DIR": str(self.root / "data"),
            "JUPYTER_RUNTIME_DIR": str(self.root / "runtime"),
            "JUPYTER_CONFIG_DIR": str(self.root / "config"),
            "IPYTHONDIR": str(self.root / "ipython"),
            "JUPYTER_PLATFORM_DIRS": "1",
        }.items():
            self._old_env[var] = os.environ.get(var)
            os.environ[var] = value
        self._install()
        return self

    def __exit__(self, *exc: object) -> None:
        for var, value in self._old_env.items():
            if value is None:
                os.environ.pop(var, None)
            else:
                os.environ[var] = value
        if self.keep:
            print(f"kernel logs and traces kept in {self.root}", file=sys.stderr)
        else:
            shutil.rmtree(self.root, ignore_errors=True)

    def _run(self, *argv: str) -> None:
        done = subprocess.run(
            [sys.executable, *argv], capture_output=True, text=True, timeout=300, check=False
        )
        if done.returncode != 0:
            msg = f"{' '.join(argv)} failed:\n{done.stdout}{done.stderr}"
            raise BenchError(msg)

    def _install(self) -> None:
        prefix = str(self.prefix)
        # --no-doctor: the doctor's own seconds are no part of any benchmark.
        self._run("-m", "jutul_jkernel.install", "--prefix", prefix, "--name", JULIA, "--no-doctor")
        self._run("-m", "ipykernel", "install", "--prefix", prefix, "--name", PYTHON)
        kernels = self.prefix / "share" / "jupyter" / "kernels"
        spec = json.loads((kernels / JULIA / "kernel.json").read_text())
        if spec["argv"][1:3] != ["-m", "jutul_jkernel"]:
            msg = f"the kernelspec's argv changed ({spec['argv']}): update the late-launch spec"
            raise BenchError(msg)
        spec["argv"] = [spec["argv"][0], "-c", _LATE_LAUNCH, *spec["argv"][3:]]
        spec["display_name"] = "Julia (supervised, late launch)"
        (kernels / LATE).mkdir()
        (kernels / LATE / "kernel.json").write_text(json.dumps(spec, indent=2))
        bare = {
            "argv": [sys.executable, "-m", "bench.bare_kernel", "-f", "{connection_file}"],
            "display_name": LABELS[BARE],
            "language": "none",
            "env": {"PYTHONPATH": str(REPO)},
        }
        (kernels / BARE).mkdir()
        (kernels / BARE / "kernel.json").write_text(json.dumps(bare, indent=2))
        names = [JULIA, PYTHON, LATE, BARE]
        if self.ijulia is not None:
            (kernels / IJULIA).mkdir()
            shutil.copy(self.ijulia / "kernel.json", kernels / IJULIA / "kernel.json")
            names.append(IJULIA)
        for name in names:
            self.specs[name] = json.loads((kernels / name / "kernel.json").read_text())
        baseline_python = self.specs[PYTHON]["argv"][0]
        if os.path.realpath(baseline_python) != os.path.realpath(sys.executable):
            msg = f"the python3 baseline spec runs {baseline_python}, not {sys.executable}"
            raise BenchError(msg)

    @property
    def has_ijulia(self) -> bool:
        return IJULIA in self.specs

    def log_path(self, what: str) -> Path:
        n = len(list(self.logs.iterdir()))
        return self.logs / f"{n:03d}-{what}.log"


# ---- cells ----


@dataclass
class CellRun:
    """One execute_request as the client saw it; times in seconds from the send."""

    reply: dict[str, Any]
    t_reply: float
    t_idle: float
    stream_messages: int = 0
    stream_bytes: int = 0
    text: str | None = None  # stdout+stderr text, when kept
    result: str | None = None  # text/plain of execute_result

    @property
    def t_done(self) -> float:
        """Reply and idle both in hand."""
        return max(self.t_reply, self.t_idle)

    @property
    def status(self) -> str:
        return str(self.reply["content"]["status"])


class Kernel:
    """One kernel started with KernelManager, and a blocking client for it."""

    def __init__(self, env: JupyterEnv, name: str) -> None:
        self.env = env
        self.name = name
        self.label = LABELS[name]
        self.km: KernelManager | None = None
        self.kc: BlockingKernelClient | None = None
        self._log = None

    # ---- lifecycle ----

    def launch(self) -> None:
        """start_kernel and connect the channels; do not wait for anything."""
        km = KernelManager(kernel_name=self.name)
        # Context defaults apply to every socket made after this: the client's, too.
        km.context.setsockopt(zmq.RECONNECT_IVL, _RECONNECT_IVL_MS)
        km.context.setsockopt(zmq.RCVHWM, 0)  # never drop output in the client's queue
        self._log = open(self.env.log_path(self.label.replace(" ", "_")), "w")  # noqa: SIM115
        km.start_kernel(stdout=self._log, stderr=self._log)
        kc = km.client()
        kc.start_channels()
        self.km, self.kc = km, kc

    def start(self) -> Kernel:
        """Launch, then wait for kernel_info and a first cell."""
        self.launch()
        self.wait_ready()
        return self

    def wait_ready(self, timeout: float = START_TIMEOUT) -> None:
        """Wait for kernel_info_reply and a connected IOPub; run a first cell."""
        self.wait_kernel_info(timeout)
        self.wait_iopub(timeout)
        self.check("1+1", "2", timeout=timeout)

    def wait_kernel_info(self, timeout: float = START_TIMEOUT) -> None:
        """Send kernel_info_request and wait for its reply."""
        self._wait_shell(self._client().kernel_info(), timeout)

    def restart(self) -> None:
        """jupyter_client's restart_kernel: a new kernel process on the same connection."""
        self._manager().restart_kernel(now=False)

    def wait_iopub(self, timeout: float = START_TIMEOUT) -> None:
        """Return once IOPub delivers anything, nudging with kernel_info meanwhile.

        A SUB socket only receives what is published after its subscription reached the
        kernel: a cell sent before that loses its status messages (ZMQ's slow joiner), so
        clients wait for an IOPub message first, as jupyter_client's wait_for_ready does.
        ipykernel 7 sends iopub_welcome as soon as the subscription arrives.
        """
        kc = self._client()
        deadline = time.monotonic() + timeout
        asked: set[str] = set()
        while time.monotonic() < deadline:
            while kc.iopub_channel.socket.poll(50):
                msg = kc.iopub_channel.get_msg(timeout=0)
                # Only a message caused by now counts: not one queued before a restart.
                if (
                    msg["msg_type"] == "iopub_welcome"
                    or msg["parent_header"].get("msg_id") in asked
                ):
                    return
            asked.add(kc.kernel_info())
        msg = f"{self.label}: IOPub delivered nothing within {timeout:g} s"
        raise BenchError(msg)

    def stop(self) -> None:
        if self.kc is not None:
            self.kc.stop_channels()
        if self.km is not None:
            if self.km.has_kernel:
                try:
                    self.km.shutdown_kernel(now=False)
                except RuntimeError:
                    self.km.shutdown_kernel(now=True)
            self.km.cleanup_resources()
            self.km.context.destroy(linger=0)
        if self._log is not None:
            self._log.close()
        self.km = self.kc = None

    def __enter__(self) -> Kernel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def _client(self) -> BlockingKernelClient:
        if self.kc is None:
            msg = f"{self.label} is not running"
            raise BenchError(msg)
        return self.kc

    def _manager(self) -> KernelManager:
        if self.km is None:
            msg = f"{self.label} is not running"
            raise BenchError(msg)
        return self.km

    # ---- processes ----

    @property
    def pid(self) -> int:
        km = self._manager()
        pid = km.provisioner.pid if km.provisioner else None
        if pid is None:
            msg = f"{self.label} has no process"
            raise BenchError(msg)
        return int(pid)

    def julia_processes(self) -> list[psutil.Process]:
        """Julia processes started by this kernel (direct children named julia; none for
        IJulia, whose kernel process is Julia itself)."""
        try:
            children = psutil.Process(self.pid).children(recursive=False)
        except psutil.NoSuchProcess:
            return []
        found = []
        for p in children:
            try:
                if "julia" in p.name():
                    found.append(p)
            except psutil.NoSuchProcess:
                continue
        return found

    def rss(self) -> tuple[int, int]:
        """Resident bytes of the kernel process and of its Julia processes (0 for none)."""
        kernel = psutil.Process(self.pid).memory_info().rss
        julia = 0
        for p in self.julia_processes():
            try:
                julia += p.memory_info().rss
            except psutil.NoSuchProcess:
                continue
        return kernel, julia

    def kill_descendants_named(self, name: str) -> int:
        """Kill this kernel's descendant processes called ``name`` (leftovers of a cell)."""
        killed = 0
        try:
            procs = psutil.Process(self.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return 0
        for p in procs:
            try:
                if p.name() == name:
                    p.kill()
                    killed += 1
            except psutil.NoSuchProcess:
                continue
        return killed

    # ---- messages ----

    def drain(self, quiet: float = 0.1) -> int:
        """Drop IOPub messages until none came for ``quiet`` seconds; return how many."""
        kc = self._client()
        n = 0
        while kc.iopub_channel.socket.poll(int(quiet * 1000)):
            kc.iopub_channel.get_msg(timeout=0)
            n += 1
        while kc.shell_channel.socket.poll(0):
            kc.shell_channel.get_msg(timeout=0)
        return n

    def _wait_shell(self, msg_id: str, timeout: float) -> dict[str, Any]:
        kc = self._client()
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                msg = f"{self.label}: no reply to {msg_id} within {timeout:g} s"
                raise BenchError(msg)
            msg = kc.get_shell_msg(timeout=left)
            if msg["parent_header"].get("msg_id") == msg_id:
                return msg

    def send(self, code: str, **kwargs: Any) -> tuple[str, float]:
        """Send an execute_request; return its id and the perf_counter time of the send."""
        kc = self._client()
        t0 = time.perf_counter()
        return kc.execute(code, **kwargs), t0

    def request(
        self, msg_type: str, code: str, cursor: int = 0, timeout: float = CELL_TIMEOUT
    ) -> tuple[dict[str, Any], float]:
        """Send one shell request (execute, complete, inspect or is_complete); return its
        reply and the seconds from send to reply."""
        kc = self._client()
        t0 = time.perf_counter()
        if msg_type == "execute":
            msg_id = kc.execute(code)
        elif msg_type == "is_complete":
            msg_id = kc.is_complete(code)
        else:  # complete, inspect
            msg_id = getattr(kc, msg_type)(code, cursor)
        reply = self._wait_shell(msg_id, timeout)
        return reply, time.perf_counter() - t0

    def comm_echo(self, comm_id: str, data: dict[str, Any], timeout: float = CELL_TIMEOUT) -> float:
        """Send a comm_msg; return the seconds until its echo (a comm_msg on ``comm_id`` with the
        same data) arrives on IOPub, and wait for the request's idle so the next round starts
        clean. The echo is matched by its comm and data, not its parent: IJulia publishes a
        comm message under the last execute_request, not the comm_msg that caused it."""
        kc = self._client()
        msg = kc.session.msg("comm_msg", {"comm_id": comm_id, "data": data})
        t0 = time.perf_counter()
        kc.shell_channel.send(msg)
        msg_id = msg["header"]["msg_id"]
        took = -1.0
        idle = False
        deadline = time.monotonic() + timeout
        while took < 0 or not idle:
            left = deadline - time.monotonic()
            if left <= 0:
                what = "echo" if took < 0 else "idle after the echo"
                raise BenchError(f"{self.label}: no {what} within {timeout:g} s")
            got = kc.get_iopub_msg(timeout=left)
            content = got["content"]
            if (
                got["msg_type"] == "comm_msg"
                and content.get("comm_id") == comm_id
                and content.get("data") == data
                and took < 0
            ):
                took = time.perf_counter() - t0
            elif (
                got["parent_header"].get("msg_id") == msg_id
                and got["msg_type"] == "status"
                and content["execution_state"] == "idle"
            ):
                idle = True
        return took

    def open_comm(self, comm_id: str, target: str, timeout: float = CELL_TIMEOUT) -> None:
        """Open a comm to ``target`` from the client; wait until the kernel has handled it."""
        kc = self._client()
        msg = kc.session.msg("comm_open", {"comm_id": comm_id, "target_name": target, "data": {}})
        kc.shell_channel.send(msg)
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise BenchError(f"{self.label}: comm_open not handled within {timeout:g} s")
            got = kc.get_iopub_msg(timeout=left)
            if got["parent_header"].get("msg_id") != msg["header"]["msg_id"]:
                continue
            if got["msg_type"] == "comm_close":
                raise BenchError(f"{self.label}: the kernel closed the comm to {target}")
            if got["msg_type"] == "status" and got["content"]["execution_state"] == "idle":
                return

    def run(
        self,
        code: str,
        *,
        keep_text: bool = True,
        timeout: float = CELL_TIMEOUT,
        **kwargs: Any,
    ) -> CellRun:
        """Run one cell and collect its reply and IOPub messages up to its idle status."""
        msg_id, t0 = self.send(code, **kwargs)
        return self.collect(msg_id, t0, keep_text=keep_text, timeout=timeout)

    def collect(
        self,
        msg_id: str,
        t0: float,
        *,
        keep_text: bool = True,
        timeout: float = CELL_TIMEOUT,
    ) -> CellRun:
        """Poll shell and IOPub together, as a frontend does, until reply and idle are in."""
        kc = self._client()
        shell, iopub = kc.shell_channel, kc.iopub_channel
        poller = zmq.Poller()
        poller.register(shell.socket, zmq.POLLIN)
        poller.register(iopub.socket, zmq.POLLIN)
        deadline = t0 + timeout
        reply: dict[str, Any] | None = None
        t_reply = t_idle = -1.0
        chunks: list[str] = []
        n_stream = n_bytes = 0
        result = None
        while reply is None or t_idle < 0:
            left = deadline - time.perf_counter()
            if left <= 0:
                what = "reply" if reply is None else "idle status"
                msg = f"{self.label}: no {what} for {msg_id} within {timeout:g} s"
                raise BenchError(msg)
            ready = dict(poller.poll(int(left * 1000) + 1))
            if shell.socket in ready:
                msg = self._received(shell, "shell")
                if msg["parent_header"].get("msg_id") == msg_id:
                    reply, t_reply = msg, time.perf_counter() - t0
            if iopub.socket in ready:
                msg = self._received(iopub, "IOPub")
                if msg["parent_header"].get("msg_id") != msg_id:
                    continue
                kind = msg["msg_type"]
                if kind == "stream":
                    text = msg["content"]["text"]
                    n_stream += 1
                    n_bytes += len(text)
                    if keep_text:
                        chunks.append(text)
                elif kind == "status":
                    if msg["content"]["execution_state"] == "idle":
                        t_idle = time.perf_counter() - t0
                elif kind == "execute_result":
                    result = str(msg["content"]["data"].get("text/plain"))
        return CellRun(
            reply,
            t_reply,
            t_idle,
            n_stream,
            n_bytes,
            "".join(chunks) if keep_text else None,
            result,
        )

    def _received(self, channel: Any, name: str) -> dict[str, Any]:
        """The message waiting on ``channel``; a malformed one (jupyter_client's deserialize
        refuses it: a bad signature, missing parts) is this kernel's failure, named."""
        try:
            msg: dict[str, Any] = channel.get_msg(timeout=0)
        except ValueError as exc:
            raise BenchError(f"{self.label}: a malformed {name} message ({exc})") from exc
        return msg

    def check(self, code: str, expect: str | None = None, **kwargs: Any) -> CellRun:
        """Run a cell that must succeed (and show ``expect``, if given)."""
        run = self.run(code, **kwargs)
        if run.status != "ok":
            content = run.reply["content"]
            msg = f"{self.label}: {code!r} failed: {content.get('ename')}: {content.get('evalue')}"
            raise BenchError(msg)
        if expect is not None and run.result != expect:
            msg = f"{self.label}: {code!r} showed {run.result!r}, expected {expect!r}"
            raise BenchError(msg)
        return run

    def interrupt(self) -> None:
        self._manager().interrupt_kernel()

    def wait_busy(self, msg_id: str, timeout: float = 10.0) -> None:
        """Wait for the busy status of ``msg_id`` (the cell started), keeping other messages."""
        kc = self._client()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if not kc.iopub_channel.socket.poll(int((deadline - time.monotonic()) * 1000) + 1):
                continue
            msg = kc.iopub_channel.get_msg(timeout=0)
            if (
                msg["parent_header"].get("msg_id") == msg_id
                and msg["msg_type"] == "status"
                and msg["content"]["execution_state"] == "busy"
            ):
                return
        msg = f"{self.label}: {msg_id} never went busy"
        raise BenchError(msg)


def ijulia_kernelspec() -> Path | None:
    """The folder ``JKERNEL_IJULIA_KERNELSPEC`` names, checked; None where it is unset."""
    where = os.environ.get(IJULIA_KERNELSPEC)
    if not where:
        return None
    folder = Path(where)
    if not (folder / "kernel.json").is_file():
        msg = f"{IJULIA_KERNELSPEC}={where}: no kernel.json there (the folder of IJulia's spec)"
        raise BenchError(msg)
    return folder


def julia_version(julia: str) -> str:
    """What ``julia --version`` prints, or why it could not run."""
    try:
        done = subprocess.run([julia, "--version"], capture_output=True, text=True, timeout=60)
    except OSError as exc:
        return f"cannot run {julia}: {exc}"
    return done.stdout.strip() or done.stderr.strip()


def check_same_julia(ijulia: Path, julia: str) -> str:
    """The Julia version both kernels run; a BenchError where IJulia's spec runs another."""
    spec = json.loads((ijulia / "kernel.json").read_text())
    theirs, ours = julia_version(spec["argv"][0]), julia_version(julia)
    if theirs != ours:
        msg = (
            f"IJulia's kernelspec runs {spec['argv'][0]} ({theirs}) but this kernel runs "
            f"`{julia}` ({ours}): put that Julia's bin folder first on PATH, so that both "
            "kernels run the same Julia"
        )
        raise BenchError(msg)
    return ours
