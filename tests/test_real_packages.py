"""Real packages in the kernel, as a course notebook uses them, through jupyter_client.

No package registry is reachable on the development machines, so the packages are their public
sources in a folder outside the checkout (an implicit environment: ``NAME/Project.toml``,
``NAME/src/NAME.jl``), named by ``JKERNEL_REAL_PACKAGES``, compiled into the depot that
``JKERNEL_REAL_PACKAGES_DEPOT`` names (docs/development.md says how they were installed here).
Where the folder is absent, or its packages do not load on the Julia on PATH, every test here
skips and says why; tests/test_ijulia_packages.py keeps the stand-ins that hold the same
promises on any machine.

Each test is a thing a user does with the package: ProgressMeter's live bar, Colors' SVG
swatches, a DataFrame's HTML table cut to the display size, LaTeX from Latexify, ``@btime``,
an interrupt inside a DataFrames loop that keeps the session, and Revise picking up an edited
file before the next cell.
"""

from __future__ import annotations

import functools
import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from jupyter_client.blocking.client import BlockingKernelClient

from .clients import INTERRUPT_TIMEOUT, collect, execute, result_of, text_of
from .conftest import install_spec, shared_kernel

pytestmark = [pytest.mark.e2e, pytest.mark.integration]

PACKAGES = os.environ.get("JKERNEL_REAL_PACKAGES", "")
DEPOT = os.environ.get("JKERNEL_REAL_PACKAGES_DEPOT", "")
NAME = "julia-supervised-real-packages"
USED = ("ProgressMeter", "Colors", "DataFrames", "Latexify", "BenchmarkTools", "Revise")
# A first load compiles a package into the depot: minutes for DataFrames where no cache is yet.
_LOAD_TIMEOUT = 1800.0


def _julia_env() -> dict[str, str]:
    """The packages after the default environments; their depot first, Julia's own behind."""
    env = {"JULIA_LOAD_PATH": f"@:@v#.#:@stdlib:{PACKAGES}"}
    if DEPOT:
        env["JULIA_DEPOT_PATH"] = f"{DEPOT}:"
    return env


@functools.cache
def _why_not() -> str | None:
    """Why the packages cannot be used here, or None: the folder, then a load on this Julia."""
    if not PACKAGES:
        return "JKERNEL_REAL_PACKAGES is not set (no folder of real package sources here)"
    if not all((Path(PACKAGES) / name / "Project.toml").is_file() for name in USED):
        return f"JKERNEL_REAL_PACKAGES={PACKAGES} lacks one of {', '.join(USED)}"
    julia = shutil.which(os.environ.get("JUTUL_JKERNEL_JULIA", "julia")) or "julia"
    done = subprocess.run(
        [julia, "--startup-file=no", "-e", f"using {', '.join(USED)}"],
        capture_output=True,
        text=True,
        timeout=_LOAD_TIMEOUT,
        env={**os.environ, **_julia_env()},
        check=False,
    )
    if done.returncode != 0:
        lines = done.stderr.strip().splitlines()
        said = [line for line in lines if line.startswith("ERROR:")] or lines[-1:]
        return f"the packages in {PACKAGES} do not load on {julia}: {said[0][:300]}"
    return None


@pytest.fixture(scope="module")
def kc(tmp_path_factory: pytest.TempPathFactory) -> Iterator[BlockingKernelClient]:
    """One kernel with the packages loaded, for the module."""
    why = _why_not()
    if why is not None:
        pytest.skip(why)
    prefix = tmp_path_factory.mktemp("prefix")
    install_spec(prefix, NAME)
    spec_file = prefix / "share" / "jupyter" / "kernels" / NAME / "kernel.json"
    spec = json.loads(spec_file.read_text())
    spec.setdefault("env", {}).update(_julia_env())
    spec_file.write_text(json.dumps(spec))
    old = os.environ.get("JUPYTER_PATH")
    os.environ["JUPYTER_PATH"] = str(prefix / "share" / "jupyter")
    try:
        with shared_kernel(NAME) as (_, client):
            reply, _ = execute(client, f"using {', '.join(USED)}", timeout=_LOAD_TIMEOUT)
            assert reply["content"]["status"] == "ok", reply["content"]
            yield client
    finally:
        if old is None:
            os.environ.pop("JUPYTER_PATH", None)
        else:
            os.environ["JUPYTER_PATH"] = old


def _ok(kc: BlockingKernelClient, code: str, timeout: float = 120.0) -> list[dict[str, Any]]:
    reply, outputs = execute(kc, code, timeout=timeout)
    assert reply["content"]["status"] == "ok", reply["content"]
    return outputs


def _data(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    for m in outputs:
        if m["msg_type"] in ("execute_result", "display_data"):
            return dict(m["content"]["data"])
    return {}


def test_progressmeter_shows_a_live_bar(kc: BlockingKernelClient) -> None:
    """ProgressMeter 1.11 draws its bar as it goes, and ends at 100%."""
    outputs = _ok(kc, 'p = Progress(4; dt=0, desc="Working: "); for i in 1:4; next!(p); end')
    text = text_of(outputs, "stderr")
    assert "Working: " in text and "100%" in text, text
    assert sum(m["msg_type"] == "stream" for m in outputs) >= 1


def test_colors_show_as_svg_swatches(kc: BlockingKernelClient) -> None:
    data = _data(_ok(kc, 'range(colorant"red", colorant"blue", length=5)'))
    assert "image/svg+xml" in data, sorted(data)
    assert "<svg" in data["image/svg+xml"]


def test_a_long_dataframe_is_cut_to_the_display_size(kc: BlockingKernelClient) -> None:
    """DataFrames' HTML table of 10,000 rows holds the rows that fit, and says how many it
    left out (the :limit and :displaysize the kernel gives, as IJulia does)."""
    data = _data(_ok(kc, "DataFrame(n = 1:10_000, sq = (1:10_000) .^ 2)"))
    html = data["text/html"]
    assert "<table" in html and "rows omitted" in html, html[:500]
    assert len(html) < 50_000, len(html)


def test_latexify_gives_latex(kc: BlockingKernelClient) -> None:
    data = _data(_ok(kc, "latexify(:(x^2 + 1 / y))"))
    assert "text/latex" in data, sorted(data)
    assert "frac" in data["text/latex"]


def test_btime_prints_its_timing(kc: BlockingKernelClient) -> None:
    text = text_of(_ok(kc, "@btime sum($(collect(1:1000)));"))
    assert "allocation" in text or "ns" in text or "μs" in text, text


def test_an_interrupt_inside_a_dataframes_loop_keeps_the_session(
    kc: BlockingKernelClient,
) -> None:
    _ok(kc, "keep = DataFrame(a = [42]); nothing")
    msg_id = kc.execute("while true; global d = DataFrame(x = rand(100)); sum(d.x); end")
    time.sleep(1.0)
    _interrupt(kc)
    reply, _ = collect(kc, msg_id, timeout=INTERRUPT_TIMEOUT)
    assert reply["content"]["status"] == "error"
    assert reply["content"]["ename"] == "InterruptException"
    assert result_of(_ok(kc, "keep.a[1]")) == "42"


def _interrupt(kc: BlockingKernelClient) -> None:
    """An interrupt_request on the control channel, as this kernel's spec (message mode) asks."""
    msg = kc.session.msg("interrupt_request", {})
    kc.control_channel.send(msg)
    kc.get_control_msg(timeout=INTERRUPT_TIMEOUT)


def test_revise_picks_up_an_edited_file(kc: BlockingKernelClient, tmp_path: Path) -> None:
    """A file tracked by Revise's includet, edited between cells: the next cell runs the new
    definition, as at the REPL."""
    src = tmp_path / "lib.jl"
    src.write_text("answer() = 1\n")
    _ok(kc, f"includet({json.dumps(str(src))})")
    assert result_of(_ok(kc, "answer()")) == "1"
    time.sleep(1.1)  # a new mtime second: Revise's watcher compares them
    src.write_text("answer() = 2\n")
    deadline = time.monotonic() + 30
    while result_of(_ok(kc, "answer()")) != "2":
        assert time.monotonic() < deadline, "Revise did not pick up the edit within 30 s"
        time.sleep(0.5)
