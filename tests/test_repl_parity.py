"""Cells behave as in IJulia and the REPL: soft scope, ans/In/Out/err, ?/]/; modes, hooks, IJulia.

Through jupyter_client on the installed kernel (what a notebook sends), plus the supervisor
where a setting is changed by environment. Pkg runs offline against a private depot whose only
registry is an empty local one (Pkg 1.5 would otherwise try to clone the General registry
before `dev`).
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from jutul_jkernel import _resources
from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor
from jutul_jkernel.supervisor.output_sink import Display, OutputSink

from .clients import REPLY_TIMEOUT, collect, execute, result_of, text_of
from .conftest import STARTUP_TIMEOUT, Kernel, private_depot, shared_kernel

pytestmark = pytest.mark.e2e

EMPTY_REGISTRY = """name = "Local"
uuid = "7e9b3c2a-1d4f-4b8e-9c6a-5f2e8d1b0a37"
repo = ""

[packages]
"""


@pytest.fixture(scope="module")
def depot(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A Julia depot of the tests' own, with an empty registry: Pkg needs no network."""
    root = tmp_path_factory.mktemp("depot")
    (root / "registries" / "Local").mkdir(parents=True)
    (root / "registries" / "Local" / "Registry.toml").write_text(EMPTY_REGISTRY)
    return root


@pytest.fixture(scope="module")
def kernel(kernel_env: dict[str, str], depot: Path) -> Iterator[Kernel]:
    old = os.environ.get("JULIA_DEPOT_PATH")
    os.environ["JULIA_DEPOT_PATH"] = private_depot(depot)
    try:
        with shared_kernel() as k:
            yield k
    finally:
        if old is None:
            os.environ.pop("JULIA_DEPOT_PATH", None)
        else:
            os.environ["JULIA_DEPOT_PATH"] = old


def jl(value: object) -> str:
    """A Julia string literal (JSON's escapes are Julia's too)."""
    return json.dumps(str(value))


def ok(kc: BlockingKernelClient, code: str) -> tuple[str | None, list[dict]]:
    """Run a cell that must succeed; return its result text and its outputs."""
    reply, outputs = execute(kc, code)
    assert reply["content"]["status"] == "ok", (code, reply["content"], outputs)
    return result_of(outputs), outputs


def failed(kc: BlockingKernelClient, code: str) -> dict:
    reply, _ = execute(kc, code)
    assert reply["content"]["status"] == "error", (code, reply["content"])
    return reply["content"]


# ---- soft scope ----


def test_a_loop_updates_a_global_as_in_the_repl(kernel: Kernel) -> None:
    """The first loop of every tutorial: 55, with no ambiguity warning."""
    _, kc = kernel
    result, outputs = ok(kc, "s = 0; for i in 1:10; s += i; end; s")
    assert result == "55"
    assert "ambiguous" not in text_of(outputs, "stderr")
    # The one that silently returned 0: assignment (not +=) inside the loop.
    assert ok(kc, "s = 0; for i in 1:3; s = i; end; s")[0] == "3"
    assert ok(kc, "t = 0\nwhile t < 5\n    t += 1\nend\nt")[0] == "5"


def test_include_keeps_the_semantics_a_file_has(kernel: Kernel, tmp_path: Path) -> None:
    """Soft scope is for cells: an included file's top-level loop is a file's (hard) scope."""
    _, kc = kernel
    f = tmp_path / "loop.jl"
    f.write_text("u = 0\nfor i in 1:3\n    u += i\nend\n")
    content = failed(kc, f"include({jl(f)})")
    assert "UndefVarError" in content["ename"] + content["evalue"], content


async def test_soft_scope_can_be_turned_off() -> None:
    """JUTUL_JKERNEL_SOFTSCOPE=no gives a script's rules (the kernel's --env sets it)."""
    async with JuliaSupervisor(
        env={"JUTUL_JKERNEL_SOFTSCOPE": "no"}, startup_timeout=STARTUP_TIMEOUT
    ) as julia:
        r = await julia.execute("s = 0; for i in 1:10; s += i; end; s", name="In[1]")
        assert r.status == "error" and r.error is not None
        assert r.error.ename == "UndefVarError", r.error


# ---- the session ----


def test_cells_are_interactive_as_at_the_repl(kernel: Kernel) -> None:
    """isinteractive() is true, as at the REPL and in IJulia (N3): packages take their
    interactive branch, and Pkg's `]` mode does not warn that it is for interactive use only."""
    _, kc = kernel
    assert ok(kc, "isinteractive()")[0] == "true"


def test_a_server_that_cannot_start_still_ends_with_status_1(tmp_path: Path) -> None:
    """isinteractive() is true only while the server runs. With it set when the script ends,
    Julia skips a script error's exit(1) and runs its REPL on stdin (base/client.jl,
    exec_options): a server that cannot reach the supervisor would end with status 0, or wait
    for input, instead of failing as any script does."""
    with socket.socket() as unused:  # bound, never listening: connecting is refused
        unused.bind(("127.0.0.1", 0))
        env = {**os.environ, "JUTUL_JKERNEL_TOKEN": "t", "JUTUL_JKERNEL_PRECOMPILED": "no"}
        done = subprocess.run(
            [
                "julia",
                "--startup-file=no",
                str(_resources.server_script()),
                str(unused.getsockname()[1]),
            ],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            env=env,
            cwd=tmp_path,
            timeout=STARTUP_TIMEOUT,
        )
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert "connection refused" in done.stderr, done.stderr[-2000:]


# ---- ans, In, Out, err ----


def test_ans_in_out_err(kernel: Kernel) -> None:
    _, kc = kernel
    reply, outputs = execute(kc, "40 + 2")
    n = reply["content"]["execution_count"]
    assert result_of(outputs) == "42"
    assert ok(kc, "ans + 1")[0] == "43"
    assert ok(kc, f"In[{n}]")[0] == '"40 + 2"'
    assert ok(kc, f"Out[{n}]")[0] == "42"
    # A trailing semicolon shows nothing, so Out has no entry for it; ans is still set.
    reply, _ = execute(kc, "7;")
    quiet = reply["content"]["execution_count"]
    assert ok(kc, f"haskey(Out, {quiet}), ans")[0] == "(false, 7)"
    failed(kc, 'error("the last error")')
    assert "the last error" in ok(kc, "sprint(showerror, err isa Exception ? err : err[end][1])")[0]


def test_out_can_be_emptied_to_free_memory(kernel: Kernel) -> None:
    _, kc = kernel
    ok(kc, "big = zeros(10)")
    assert ok(kc, "isempty(Out)")[0] == "false"
    ok(kc, "IJulia.clear_history(); nothing")
    assert ok(kc, "isempty(Out), isempty(In)")[0] == "(true, false)"  # this cell is in In


# ---- ? ] ; ----


def test_help_is_the_cells_value_so_it_is_saved(kernel: Kernel) -> None:
    _, kc = kernel
    ok(kc, '"Area of a circle of radius `r`."\narea(r) = π * r^2')
    reply, outputs = execute(kc, "# what does area do?\n?area")
    assert reply["content"]["status"] == "ok"
    assert reply["content"]["payload"] == []
    results = [m for m in outputs if m["msg_type"] == "execute_result"]
    assert len(results) == 1, outputs
    data = results[0]["content"]["data"]
    assert "Area of a circle of radius" in data["text/plain"]
    assert "Area of a circle of radius `r`." in data["text/markdown"]


def test_help_leaves_a_users_docs_alone(kernel: Kernel) -> None:
    """Julia 1.11+ help assigns a global `docs`; cells keep their own."""
    _, kc = kernel
    ok(kc, "docs = 3")
    ok(kc, "?sum")
    assert ok(kc, "docs")[0] == "3"


def test_apropos_prints_what_it_finds(kernel: Kernel) -> None:
    _, kc = kernel
    ok(kc, '"A function whose docstring mentions xylophones."\nxylo() = 1')
    _, outputs = ok(kc, '?"xylophones"')
    assert "xylo" in text_of(outputs), outputs


def test_pkg_mode_works_offline(kernel: Kernel, tmp_path: Path) -> None:
    """`] activate`, `] dev <path>` and `] st` against the active project, with no network."""
    _, kc = kernel
    pkg = tmp_path / "Greeter"
    (pkg / "src").mkdir(parents=True)
    (pkg / "Project.toml").write_text(
        'name = "Greeter"\nuuid = "0d2b0c9e-4f6c-4a3e-9a11-2f3b8f5d6c71"\nversion = "0.1.0"\n'
    )
    (pkg / "src" / "Greeter.jl").write_text('module Greeter\ngreet() = "hello"\nend\n')
    env = tmp_path / "env"
    _, outputs = ok(kc, f"] activate {env}")
    assert "Activating" in text_of(outputs) + text_of(outputs, "stderr")
    ok(kc, f"] dev {pkg}")
    _, outputs = ok(kc, "] st")
    status = text_of(outputs) + text_of(outputs, "stderr")
    assert "Greeter" in status and str(env) in status, status
    assert ok(kc, "using Greeter; Greeter.greet()")[0] == '"hello"'


def test_shell_mode_runs_in_the_kernels_directory(kernel: Kernel, tmp_path: Path) -> None:
    _, kc = kernel
    ok(kc, 'word = "interpolated"')
    _, outputs = ok(kc, ";echo shell says $word")
    assert text_of(outputs) == "shell says interpolated\n"
    _, outputs = ok(kc, f";cd {tmp_path}")
    assert ok(kc, "pwd()")[0] == jl(tmp_path)
    _, outputs = ok(kc, ";ls -d .")
    assert text_of(outputs) == ".\n"
    # C and child-process output is captured at the fd level: stderr stays stderr.
    _, outputs = ok(kc, ";sh -c 'echo to-err 1>&2'")
    assert text_of(outputs, "stderr") == "to-err\n"


def test_an_interrupt_stops_a_shell_command_and_keeps_state(kernel: Kernel) -> None:
    km, kc = kernel
    ok(kc, "kept = 11")
    msg_id = kc.execute(";sleep 1000")
    deadline = time.monotonic() + REPLY_TIMEOUT
    sleeper = None
    while sleeper is None and time.monotonic() < deadline:
        for p in psutil.Process(km.provisioner.pid).children(recursive=True):  # type: ignore[union-attr]
            if p.name() == "sleep":
                sleeper = p
        time.sleep(0.05)
    assert sleeper is not None, "the shell command never started"
    km.interrupt_kernel()
    reply, _ = collect(kc, msg_id)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "InterruptException"
    assert sleeper.wait(timeout=5) is not None or not sleeper.is_running()
    assert ok(kc, "kept")[0] == "11"


# ---- hooks and the IJulia API ----


def test_hooks_run_around_cells(kernel: Kernel) -> None:
    _, kc = kernel
    ok(
        kc,
        "calls = String[]\n"
        'pre() = push!(calls, "pre"); post() = push!(calls, "post"); oops() = push!(calls, "err")\n'
        "IJulia.push_preexecute_hook(pre); IJulia.push_postexecute_hook(post)\n"
        "IJulia.push_posterror_hook(oops); nothing",
    )
    ok(kc, "empty!(calls); 1")
    failed(kc, 'error("x")')
    result = ok(kc, 'join(calls, " ")')[0]
    ok(
        kc,
        "IJulia.pop_preexecute_hook(pre); IJulia.pop_postexecute_hook(post); "
        "IJulia.pop_posterror_hook(oops); nothing",
    )
    # The cell that emptied `calls` ran its post hook; the error ran pre and err; the reading
    # cell ran pre before it copied.
    assert result == '"post pre err pre"', result


def test_repl_ast_transforms_are_honoured(kernel: Kernel) -> None:
    """Revise's REPL path pushes onto Base.active_repl_backend.ast_transforms."""
    _, kc = kernel
    ok(
        kc,
        "double_literals(ex) = ex isa Int ? 2ex : ex isa Expr ? "
        "Expr(ex.head, map(double_literals, ex.args)...) : ex\n"
        "push!(Base.active_repl_backend.ast_transforms, double_literals); nothing",
    )
    assert ok(kc, "21")[0] == "42"
    ok(kc, "pop!(Base.active_repl_backend.ast_transforms); nothing")
    assert ok(kc, "21")[0] == "21"


def test_ijulia_api_without_using_ijulia(kernel: Kernel, tmp_path: Path) -> None:
    _, kc = kernel
    assert ok(kc, "IJulia.inited")[0] == "true"
    _, outputs = ok(kc, 'for i in 1:3\n    IJulia.clear_output(true)\n    println("step ", i)\nend')
    kinds = [m["msg_type"] for m in outputs]
    assert kinds.count("clear_output") == 3, kinds
    assert all(m["content"]["wait"] for m in outputs if m["msg_type"] == "clear_output")
    snippet = tmp_path / "snippet.jl"
    snippet.write_text("x = 1\n")
    reply, _ = execute(kc, f"IJulia.load({jl(snippet)})")
    assert reply["content"]["payload"] == [
        {"source": "set_next_input", "text": "x = 1\n", "replace": False}
    ]
    _, outputs = ok(kc, "IJulia.set_max_stdio(1 << 20)")
    assert "never caps" in text_of(outputs, "stderr")


def test_using_ijulia_binds_the_kernels_module(kernel: Kernel) -> None:
    """`using IJulia` never loads the package over ours; the notebook API keeps working."""
    _, kc = kernel
    assert ok(kc, "using IJulia; import IJulia; IJulia.inited")[0] == "true"
    _, outputs = ok(kc, "using IJulia: clear_output; clear_output(); 1")
    assert any(m["msg_type"] == "clear_output" for m in outputs)


# Every form of import that comm code written for IJulia starts with (IJulia's docs, packages
# that register comm targets), with the name each binds: all must be the kernel's module.
IJULIA_IMPORTS = {
    "import IJulia.CommManager": ("CommManager", "IJulia.CommManager"),
    "using IJulia.CommManager": ("CommManager", "IJulia.CommManager"),
    "import IJulia.CommManager: Comm, send_comm": ("send_comm", "IJulia.CommManager.send_comm"),
    "using IJulia.CommManager: Comm": ("Comm", "IJulia.CommManager.Comm"),
    "import IJulia.CommManager: Comm, register_comm, send_comm": (
        "register_comm",
        "IJulia.CommManager.register_comm",
    ),
    "using Main.IJulia.CommManager: Comm": ("Comm", "IJulia.CommManager.Comm"),
    "import IJulia: clear_output": ("clear_output", "IJulia.clear_output"),
}


def test_every_import_of_ijulia_binds_the_kernels_module(kernel: Kernel, tmp_path: Path) -> None:
    """`import IJulia.CommManager: ...` and the other forms bind the kernel's module, never the
    package, in a cell, inside a user's own module and in an included file (which includes
    another)."""
    _, kc = kernel
    for n, (line, (name, ours)) in enumerate(IJULIA_IMPORTS.items()):
        assert ok(kc, f"{line}\n{name} === {ours}")[0] == "true", line
        module = f"ImportsIJulia{n}"
        code = f"module {module}\n{line}\nconst got = {name}\nend\n{module}.got === {ours}"
        assert ok(kc, code)[0] == "true", line
    # `import X as Y` parses on Julia 1.6 and newer: where it does, it binds ours too.
    if ok(kc, 'Meta.isexpr(Meta.parse("import A as B"; raise = false), :import)')[0] == "true":
        code = "import IJulia.CommManager as CM\nimport IJulia: clear_output as co\n"
        code += "(CM, co) === (IJulia.CommManager, IJulia.clear_output)"
        assert ok(kc, code)[0] == "true"
    inner = tmp_path / "inner.jl"
    inner.write_text("using IJulia.CommManager\ninner_got = CommManager\n")
    outer = tmp_path / "outer.jl"
    outer.write_text(
        f"import IJulia.CommManager: Comm, register_comm\nouter_got = Comm\ninclude({jl(inner)})\n"
    )
    both = "(IJulia.CommManager.Comm, IJulia.CommManager)"
    code = f"include({jl(outer)})\n(outer_got, inner_got) === {both}"
    assert ok(kc, code)[0] == "true"
    code = f"module InModule\ninclude({jl(outer)})\nend\nInModule.inner_got === IJulia.CommManager"
    assert ok(kc, code)[0] == "true"


def test_a_user_include_method_stays_the_users(kernel: Kernel) -> None:
    """Only an `include` that takes a path gets the kernel's mapping; a user's own method of
    `include` (defined or passed in) is called as written."""
    _, kc = kernel
    # A baremodule with the two-argument method every module had before 1.12 (`include(mapexpr,
    # path)`, which a rewrite would call): from 1.12 a module's own `include` is a constant
    # (`Base.IncludeInto`), and Julia refuses a method of that name ("cannot define function
    # include").
    own = (
        "baremodule OwnInclude\nusing Base\ninclude(n::Int) = n + 1\n"
        "include(mapexpr::Function, n::Int) = mapexpr(n)\nconst got = include(41)\nend"
    )
    assert ok(kc, f"{own}; OwnInclude.got")[0] == "42"
    assert ok(kc, "apply_include(include) = include(2); apply_include(x -> 10x)")[0] == "20"


def test_an_ijulia_path_the_kernel_lacks_is_named(kernel: Kernel) -> None:
    """`import IJulia.X` for an X the kernel's IJulia does not have names X, not 'Package
    IJulia not found'; the session goes on."""
    _, kc = kernel
    for line, missing in (
        ("import IJulia.NoSuchModule", "NoSuchModule"),
        ("using IJulia: installkernel", "installkernel"),
        ("import IJulia.CommManager: Comm, no_such_function", "no_such_function"),
    ):
        content = failed(kc, line)
        assert content["ename"] == "ArgumentError", content
        assert f"has no `{missing}`" in content["evalue"], content["evalue"]
        assert "not found in current path" not in content["evalue"]
    assert ok(kc, "1 + 1")[0] == "2"


async def test_display_and_clear_output_from_another_thread() -> None:
    """A Threads.@spawn task may display: the work hops to the server's thread."""
    shown: list[Display] = []
    async with JuliaSupervisor(threads=2, startup_timeout=STARTUP_TIMEOUT) as julia:
        # Threads.@spawn may run its task on thread 1 when thread 1 is idle (it often was once
        # Julia no longer pumped its own output); @threads' static schedule puts k = 2 on the
        # default pool's second thread: 2 on Julia 1.5, 3 on 1.9+ where "2,1" makes thread 1
        # the interactive one.
        r = await julia.execute(
            "where = Threads.Atomic{Int}(0)\n"
            "Threads.@threads for k in 1:2\n"
            "    k == 2 || continue\n"
            "    for i in 1:20\n"
            '        println("line ", i)  # output in flight makes each display wait to drain\n'
            '        display(HTML("<b>from thread $(Threads.threadid())</b>"))\n'
            "    end\n"
            "    IJulia.clear_output(true)\n"
            "    where[] = Threads.threadid()\n"
            "end\n"
            "where[]",
            OutputSink(display=shown.append),
            name="In[1]",
        )
        assert r.status == "ok", r
        assert r.text in ("2", "3")  # it did run on another thread
        kinds = [m.kind for m in shown]
        assert kinds == ["display_data"] * 20 + ["clear_output"], shown
        assert shown[0].data["text/html"] == f"<b>from thread {r.text}</b>"


def test_is_complete_answers_unknown_while_julia_is_busy(kernel: Kernel, tmp_path: Path) -> None:
    """jupyter console gives up on is_complete for good after one 1 s miss: answer in time."""
    _, kc = kernel
    started = tmp_path / "spinning"
    # After the cell has ended, a background task holds Julia's only thread for 4 s; it marks
    # the start with a file (a synchronous write: Julia does not yield there).
    ok(
        kc,
        f"busy = @async (sleep(0.3); touch({jl(started)}); t0 = time(); "
        "while time() - t0 < 4; end); nothing",
    )
    deadline = time.monotonic() + REPLY_TIMEOUT
    while not started.exists():
        assert time.monotonic() < deadline, "the background task never started"
        time.sleep(0.02)
    assert is_complete(kc, "function f(x)") == "unknown"
    ok(kc, "wait(busy)")
    assert is_complete(kc, "function f(x)") == "incomplete"


def is_complete(kc: BlockingKernelClient, code: str) -> str:
    msg_id = kc.is_complete(code)
    deadline = time.monotonic() + REPLY_TIMEOUT
    while True:
        reply = kc.get_shell_msg(timeout=max(0.01, deadline - time.monotonic()))
        if reply["parent_header"].get("msg_id") == msg_id:
            return str(reply["content"]["status"])
