"""What an IJulia user meets through jupyter_client: colour, the notebook's project, the
startup file and comms (issue 9, points 6 to 9).

Kernels are started the way Jupyter starts them for a notebook: from the notebook's folder
(``cwd``), with the installed kernelspec. Two specs are installed into a private prefix: the
default one, and one with every opt-out (``--no-color --no-startup-file --project DIR``). A
private ``JULIA_DEPOT_PATH`` holds the startup file, so the user's own never takes part
(Julia's own depots stay behind it: 1.10+ keeps its stdlibs' caches there).
"""

from __future__ import annotations

import contextlib
import os
import queue
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import zmq
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from jutul_jkernel.supervisor.launch_settings import default_threads

from .clients import (
    REPLY_TIMEOUT,
    collect,
    execute,
    result_of,
    text_of,
    wait_until_warm,
)
from .conftest import (
    ANSI,
    SHARED_KERNEL_PIDS,
    START_TIMEOUT,
    install_spec,
    julia_own_depots,
    stop_kernel,
)

pytestmark = pytest.mark.e2e

DEFAULT_SPEC = "julia-supervised-env-default"
OPT_OUT_SPEC = "julia-supervised-env-opt-out"
STARTUP = 'println("hello from startup")\nstartup_value = 41\nerror("startup broke")\n'


@dataclass
class Layout:
    """A notebook folder inside a project, a project pinned by the opt-out spec, a depot."""

    project: Path  # holds Project.toml
    notebooks: Path  # project/notebooks: where the notebook (and so the kernel) runs
    pinned: Path
    depot: Path


@pytest.fixture(scope="module")
def layout(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Layout]:
    root = tmp_path_factory.mktemp("ijulia-env")
    lay = Layout(root / "course", root / "course" / "notebooks", root / "pinned", root / "depot")
    lay.notebooks.mkdir(parents=True)
    (lay.project / "Project.toml").write_text('name = "Course"\n')
    lay.pinned.mkdir()
    (lay.pinned / "Project.toml").write_text('name = "Pinned"\n')
    (lay.depot / "config").mkdir(parents=True)
    (lay.depot / "config" / "startup.jl").write_text(STARTUP)
    prefix = root / "prefix"
    install_spec(prefix, DEFAULT_SPEC)
    install_spec(
        prefix, OPT_OUT_SPEC, "--no-color", "--no-startup-file", "--project", str(lay.pinned)
    )
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
        yield lay


@contextlib.contextmanager
def kernel(
    name: str, cwd: Path, env: dict[str, str] | None = None
) -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    """A kernel of spec ``name`` started in ``cwd``, as a notebook server starts one."""
    km = KernelManager(kernel_name=name)
    km.start_kernel(cwd=str(cwd), env={**os.environ, **(env or {})})
    km.context.setsockopt(zmq.RCVHWM, 0)
    kc = km.client()
    kc.start_channels()
    pid = km.provisioner.pid if km.provisioner else None
    assert pid is not None
    SHARED_KERNEL_PIDS.add(pid)  # shared by the tests of one fixture; stopped below
    try:
        kc.wait_for_ready(timeout=START_TIMEOUT)
        yield km, kc
    finally:
        stop_kernel(km, kc)
        SHARED_KERNEL_PIDS.discard(pid)


def alone(depot: Path) -> str:
    """A JULIA_DEPOT_PATH of ``depot`` and Julia's own depots: not the user's."""
    return f"{depot}{os.pathsep}{julia_own_depots()}"


@dataclass
class Session:
    kc: BlockingKernelClient
    first_reply: dict[str, Any]
    first_outputs: list[dict[str, Any]]


@contextlib.contextmanager
def notebook_session(spec: str, layout: Layout) -> Iterator[Session]:
    """A kernel of ``spec`` in the notebook folder, with the test depot, its first cell run."""
    with kernel(spec, layout.notebooks, {"JULIA_DEPOT_PATH": alone(layout.depot)}) as (_, kc):
        reply, outputs = execute(kc, "first_cell = 1 + 1")
        yield Session(kc, reply, outputs)


@pytest.fixture(scope="module")
def default_kernel(layout: Layout) -> Iterator[Session]:
    """The default spec."""
    with notebook_session(DEFAULT_SPEC, layout) as session:
        yield session


@pytest.fixture(scope="module")
def opt_out_kernel(layout: Layout) -> Iterator[Session]:
    """The spec with --no-color --no-startup-file --project DIR."""
    with notebook_session(OPT_OUT_SPEC, layout) as session:
        yield session


def value(kc: BlockingKernelClient, code: str) -> str | None:
    reply, outputs = execute(kc, code)
    assert reply["content"]["status"] == "ok", reply["content"]
    return result_of(outputs)


def julia_string(path: Path) -> str:
    """How Julia shows a path string (no escapes needed for these temporary paths)."""
    return f'"{path}"'


# ---- point 8: the startup file ----


def test_startup_file_output_and_error_show_in_the_first_cell(default_kernel: Session) -> None:
    """The first cell shows the startup file's output and error, and still runs."""
    assert default_kernel.first_reply["content"]["status"] == "ok"
    outputs = default_kernel.first_outputs
    assert text_of(outputs, "stdout") == "hello from startup\n"
    err = ANSI.sub("", text_of(outputs, "stderr"))
    assert "the startup file failed" in err and "startup broke" in err
    assert not [m for m in outputs if m["msg_type"] == "error"]
    assert value(default_kernel.kc, "(startup_value, first_cell, ARGS)") == "(41, 2, String[])"


def test_no_startup_file_option(opt_out_kernel: Session) -> None:
    assert [m for m in opt_out_kernel.first_outputs if m["msg_type"] == "stream"] == []
    assert value(opt_out_kernel.kc, "isdefined(Main, :startup_value)") == "false"


# ---- point 7: the notebook's project ----


def test_notebook_folder_activates_the_nearest_project(
    default_kernel: Session, layout: Layout
) -> None:
    """Started in course/notebooks, the kernel activates course/Project.toml (--project=@.)."""
    assert value(default_kernel.kc, "Base.active_project()") == julia_string(
        layout.project / "Project.toml"
    )


def test_project_option_pins_one(opt_out_kernel: Session, layout: Layout) -> None:
    assert value(opt_out_kernel.kc, "Base.active_project()") == julia_string(
        layout.pinned / "Project.toml"
    )


def test_without_a_project_the_default_environment_is_active(
    layout: Layout, tmp_path: Path
) -> None:
    """Outside any project, --project=@. falls back to the default environment."""
    assert not [p for p in tmp_path.parents if (p / "Project.toml").exists()], (
        "a Project.toml above the test's temporary directory would be the notebook's project"
    )
    with kernel(DEFAULT_SPEC, tmp_path, {"JULIA_DEPOT_PATH": alone(layout.depot)}) as (_, kc):
        active = value(kc, "Base.active_project()")
        default = value(
            kc,
            'joinpath(DEPOT_PATH[1], "environments", '
            '"v$(VERSION.major).$(VERSION.minor)", "Project.toml")',
        )
    assert active == default


# ---- point 6: colour ----

COLOUR_CELL = 'printstyled("red"; color=:red); println(); @info "note"; error("plain message")'


THREADS_SPEC = "julia-supervised-env-threads"


@pytest.mark.parametrize("where", ["kernelspec env", "Jupyter's environment", "julia args"])
def test_the_users_thread_count_wins(
    where: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """JULIA_NUM_THREADS where IJulia's users set it (installkernel's env=, the environment
    Jupyter started in) or -t among Julia's arguments is what Julia gets; the kernel's default
    (physical cores - 1) applies only when none is set. The count asked for is not the
    default (and no more than the CPU threads: Julia 1.5 caps the count there)."""
    asked = "1" if default_threads() > 1 else "2"
    args = {
        "kernelspec env": ("--env", f"JULIA_NUM_THREADS={asked}"),
        "Jupyter's environment": (),
        "julia args": ("--julia-args", f"-t {asked}"),
    }[where]
    prefix = tmp_path / "prefix"
    install_spec(prefix, THREADS_SPEC, *args)
    monkeypatch.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
    monkeypatch.delenv("JULIA_NUM_THREADS", raising=False)
    env = {"JULIA_NUM_THREADS": asked} if where == "Jupyter's environment" else {}
    with kernel(THREADS_SPEC, tmp_path, env) as (_, kc):
        assert value(kc, "Threads.nthreads()") == asked


def test_colour_in_streams_and_traceback(default_kernel: Session) -> None:
    reply, outputs = execute(default_kernel.kc, COLOUR_CELL)
    assert "\x1b[31mred\x1b[39m" in text_of(outputs, "stdout")
    assert ANSI.search(text_of(outputs, "stderr"))
    [error] = [m["content"] for m in outputs if m["msg_type"] == "error"]
    assert error["evalue"] == "plain message" == reply["content"]["evalue"]
    assert ANSI.search("\n".join(error["traceback"]))


def test_no_color_option(opt_out_kernel: Session) -> None:
    reply, outputs = execute(opt_out_kernel.kc, COLOUR_CELL)
    assert text_of(outputs, "stdout") == "red\n"
    assert not ANSI.search(text_of(outputs, "stderr"))
    assert not ANSI.search("\n".join(reply["content"]["traceback"]))


# ---- point 9: comms ----


def send_shell(kc: BlockingKernelClient, msg_type: str, content: dict[str, Any]) -> str:
    msg = kc.session.msg(msg_type, content)
    kc.shell_channel.send(msg)
    return str(msg["header"]["msg_id"])


def iopub_until(
    kc: BlockingKernelClient, parent_id: str, msg_type: str, state: str | None = None
) -> dict[str, Any]:
    """The first IOPub message of ``msg_type`` (and execution ``state``) parented by parent_id."""
    deadline = time.monotonic() + REPLY_TIMEOUT
    while True:
        try:
            msg = kc.get_iopub_msg(timeout=max(0.01, deadline - time.monotonic()))
        except queue.Empty:
            pytest.fail(f"no {msg_type} {state or ''} for {parent_id} within {REPLY_TIMEOUT} s")
        if msg["parent_header"].get("msg_id") != parent_id or msg["msg_type"] != msg_type:
            continue
        if state is None or msg["content"].get("execution_state") == state:
            return msg


@pytest.mark.parametrize("content", [{}, {"target_name": "jupyter.widget"}])
def test_comm_info_gets_an_empty_reply(default_kernel: Session, content: dict[str, Any]) -> None:
    msg_id = send_shell(default_kernel.kc, "comm_info_request", content)
    reply = default_kernel.kc.get_shell_msg(timeout=REPLY_TIMEOUT)
    while reply["parent_header"].get("msg_id") != msg_id:  # a late reply to an earlier test
        reply = default_kernel.kc.get_shell_msg(timeout=REPLY_TIMEOUT)
    assert reply["msg_type"] == "comm_info_reply"
    assert reply["content"] == {"status": "ok", "comms": {}}


def test_comm_open_to_an_unknown_target_is_closed(default_kernel: Session) -> None:
    """As ipykernel does: comm_close on IOPub, for the same comm, parented by the comm_open."""
    kc = default_kernel.kc
    comm_id = uuid.uuid4().hex
    msg_id = send_shell(
        kc, "comm_open", {"comm_id": comm_id, "target_name": "jupyter.widget", "data": {}}
    )
    closed = iopub_until(kc, msg_id, "comm_close")
    assert closed["content"] == {"comm_id": comm_id, "data": {}}
    iopub_until(kc, msg_id, "status", "idle")
    # Messages to that (closed) comm are ignored, with no reply, and the kernel stays usable.
    for msg_type in ("comm_msg", "comm_close"):
        other = send_shell(kc, msg_type, {"comm_id": comm_id, "data": {}})
        iopub_until(kc, other, "status", "idle")
    assert value(kc, "1 + 1") == "2"


def test_comm_open_is_answered_while_a_cell_runs(default_kernel: Session) -> None:
    """A widget manager opening a comm while a cell waits (here on stdin) is not kept waiting."""
    kc = default_kernel.kc
    # The kernel waits 1 s for Julia's answer to "is this target known?" and then queues the
    # comm_open behind the cell, which here waits on stdin. Cold, that answer took up to 3.6 s
    # beside a whole-suite run (the mutants baseline failed on it); the idle warm-up now
    # compiles it, and a session is warm long before a widget manager opens a comm mid-cell.
    wait_until_warm(kc)
    cell = kc.execute("answer = readline()", allow_stdin=True)
    request = kc.get_stdin_msg(timeout=REPLY_TIMEOUT)
    assert request["msg_type"] == "input_request"
    comm_id = uuid.uuid4().hex
    msg_id = send_shell(kc, "comm_open", {"comm_id": comm_id, "target_name": "x", "data": {}})
    assert iopub_until(kc, msg_id, "comm_close")["content"]["comm_id"] == comm_id
    kc.input("done")
    reply, outputs = collect(kc, cell)
    assert reply["content"]["status"] == "ok"
    assert result_of(outputs) == '"done"'
