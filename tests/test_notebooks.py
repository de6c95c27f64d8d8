"""Notebooks executed end to end: ``jupyter nbconvert --execute`` on the installed kernel.

Golden notebooks (``tests/notebooks/*.ipynb``) are stored *with* the outputs they must produce:
each is executed again and its outputs compared with the stored ones after normalisation (no
execution counts or metadata, consecutive stream messages merged, display ids without the pid,
errors reduced to ``ename`` and ``evalue``). The examples (``examples/*.ipynb``) are stored
without outputs: they must run without an unexpected error, and the quickstart's outputs are
checked one by one.

To refresh a golden notebook after an intended change, execute it in place
(``jupyter nbconvert --to notebook --execute --inplace tests/notebooks/NAME.ipynb`` with the
kernelspec installed), drop the cells' ``execution`` timing metadata, and review the diff.
"""

from __future__ import annotations

import pprint
import re
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import nbformat
import psutil
import pytest
from nbformat import NotebookNode

from .conftest import E2E_KERNEL_NAME

pytestmark = pytest.mark.e2e

REPO = Path(__file__).resolve().parent.parent
EXAMPLES = sorted((REPO / "examples").glob("*.ipynb"))
GOLDEN = sorted((REPO / "tests" / "notebooks").glob("*.ipynb"))
QUICKSTART = REPO / "examples" / "quickstart.ipynb"

# nbconvert's own limit per cell; the run as a whole (kernel start, every cell, shutdown) gets
# RUN_TIMEOUT, below pytest-timeout's 120 s so a hang is reported here, with nbconvert's output.
CELL_TIMEOUT = 60
RUN_TIMEOUT = 100.0

# JKernel.display(...; display_id=true) makes ids "jkernel-<pid>-<n>"; only <n> is reproducible.
_DISPLAY_ID = re.compile(r"jkernel-\d+-(\d+)")

Execute = Callable[[Path], NotebookNode]


# ---- running nbconvert ----


def nbconvert_execute(path: Path, out_dir: Path, env: dict[str, str]) -> NotebookNode:
    """Execute ``path`` with nbconvert in a subprocess and return the executed notebook."""
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "nbconvert",
        "--to",
        "notebook",
        "--execute",
        str(path),
        "--output-dir",
        str(out_dir),
        f"--ExecutePreprocessor.kernel_name={E2E_KERNEL_NAME}",
        f"--ExecutePreprocessor.timeout={CELL_TIMEOUT}",
    ]
    proc = subprocess.Popen(
        command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        stdout, stderr = proc.communicate(timeout=RUN_TIMEOUT)
    except subprocess.TimeoutExpired:
        # The kernel runs in a session of its own: end the whole tree, not just nbconvert.
        tree = [*psutil.Process(proc.pid).children(recursive=True), psutil.Process(proc.pid)]
        for p in tree:
            try:
                p.kill()
            except psutil.NoSuchProcess:
                continue
        stdout, stderr = proc.communicate()
        pytest.fail(f"nbconvert did not finish {path.name} in {RUN_TIMEOUT:.0f} s:\n{stderr}")
    assert proc.returncode == 0, (
        f"nbconvert failed on {path.name} (exit status {proc.returncode}):\n{stdout}{stderr}"
    )
    return nbformat.read(out_dir / path.name, as_version=4)


@pytest.fixture(scope="module")
def execute(e2e_jupyter_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory) -> Execute:
    """Execute a notebook once per module (several tests check the same run)."""
    runs: dict[Path, NotebookNode] = {}

    def run(path: Path) -> NotebookNode:
        if path not in runs:
            out_dir = tmp_path_factory.mktemp(f"executed-{path.parent.name}")
            runs[path] = nbconvert_execute(path, out_dir, e2e_jupyter_env)
        return runs[path]

    return run


# ---- normalisation ----


def code_cells(nb: NotebookNode) -> list[NotebookNode]:
    return [c for c in nb.cells if c.cell_type == "code"]


def julia_16_type_names(text: str) -> str:
    """Types written as Julia 1.6 and newer print them: `Array{T,1}` as `Vector{T}`,
    `Array{T,2}` as `Matrix{T}` (base/show.jl prints the aliases since 1.6), and a space after
    each comma between a type's parameters. Julia 1.5 prints `Array{Int64,1}`; the golden
    notebooks hold either, and so compare on every Julia."""
    out: list[str] = []
    i = 0
    while i < len(text):
        j = text.find("{", i)
        if j < 0:
            out.append(text[i:])
            break
        name_start = j
        while name_start > i and (text[name_start - 1].isalnum() or text[name_start - 1] == "_"):
            name_start -= 1
        depth, k = 0, j
        while k < len(text):
            depth += {"{": 1, "}": -1}.get(text[k], 0)
            if depth == 0:
                break
            k += 1
        if name_start == j or k == len(text):  # not `Name{...}`, or unbalanced: leave it
            out.append(text[i : j + 1])
            i = j + 1
            continue
        name, params = text[name_start:j], _split_params(text[j + 1 : k])
        params = [julia_16_type_names(p.strip()) for p in params]
        if name == "Array" and len(params) == 2 and params[1] in ("1", "2"):
            name, params = ("Vector" if params[1] == "1" else "Matrix"), params[:1]
        out.append(text[i:name_start] + name + "{" + ", ".join(params) + "}")
        i = k + 1
    return "".join(out)


def _split_params(inside: str) -> list[str]:
    """`a,B{c,d},e` as ["a", "B{c,d}", "e"]: the commas outside nested braces."""
    params, depth, start = [], 0, 0
    for n, ch in enumerate(inside):
        depth += {"{": 1, "}": -1}.get(ch, 0)
        if ch == "," and depth == 0:
            params.append(inside[start:n])
            start = n + 1
    return [*params, inside[start:]]


# What Julia itself renders differently from one version to the next, the kernel passing it
# on as it comes: emphasis in the terminal is underlined up to 1.11 and italic from 1.12
# (stdlib Markdown, terminal render), a docstring's code block is tagged `julia` in its
# Markdown from 1.12 and its indent moved out of the colour, and the REPL's help line "search:"
# lists the names near the query, which depend on what Base defines.
_JULIA_RENDERING = (
    (re.compile(r"\x1b\[3m(.*?)\x1b\[23m", re.S), "\x1b[4m\\1\x1b[24m"),
    (re.compile(r"^```julia$", re.M), "```"),
    (re.compile(r"\x1b\[36m( +)"), "\\1\x1b[36m"),
    (re.compile(r"^(search: \S+)[^\n]*$", re.M), "\\1 ..."),
)


def julia_rendering(text: Any) -> Any:
    """``text`` with what one Julia renders unlike another written one way (see above); a
    value that is no text (JSON) as it is."""
    if not isinstance(text, str):
        return text
    for pattern, replacement in _JULIA_RENDERING:
        text = pattern.sub(replacement, text)
    return text


def _text(value: Any) -> Any:
    """A MIME value as one string (nbformat may keep a list of lines), ids made reproducible,
    Julia's type names as 1.6+ prints them."""
    if isinstance(value, list):
        value = "".join(value)
    if isinstance(value, str):
        return julia_16_type_names(_DISPLAY_ID.sub(r"jkernel-<pid>-\1", value))
    return value


def normalise(outputs: list[NotebookNode]) -> list[dict[str, Any]]:
    """What a cell showed, without what legitimately differs between runs.

    Consecutive stream messages of one stream are merged (how output is cut into messages
    depends on timing); ``\\r`` is kept, so a redrawn line still shows every redraw. An error
    keeps its ``ename`` and ``evalue``; its traceback names Julia's own source lines.
    """
    result: list[dict[str, Any]] = []
    for out in outputs:
        kind = out["output_type"]
        if kind == "stream":
            text = _text(out["text"])
            last = result[-1] if result else None
            if last is not None and last["output_type"] == "stream" and last["name"] == out["name"]:
                last["text"] += text
            else:
                result.append({"output_type": "stream", "name": out["name"], "text": text})
        elif kind in ("display_data", "execute_result"):
            data = {mime: julia_rendering(_text(v)) for mime, v in out["data"].items()}
            result.append({"output_type": kind, "data": data})
        elif kind == "error":
            result.append({"output_type": "error", "ename": out["ename"], "evalue": out["evalue"]})
        else:
            result.append({"output_type": kind})
    for merged in result:  # a stream's whole text: a rendering may have come in pieces
        if merged["output_type"] == "stream":
            merged["text"] = julia_rendering(merged["text"])
    return result


def tags(cell: NotebookNode) -> list[str]:
    return list(cell.get("metadata", {}).get("tags", []))


# ---- golden notebooks ----


def test_there_are_golden_notebooks() -> None:
    """The glob below must not quietly parametrize over nothing."""
    assert GOLDEN, "no golden notebooks in tests/notebooks/"


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_golden_notebook_is_stored_with_outputs(path: Path) -> None:
    """A golden notebook saved without running it would compare against nothing."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == E2E_KERNEL_NAME
    unexecuted = [c.id for c in code_cells(nb) if c.execution_count is None]
    assert not unexecuted, f"{path.name}: cells stored without being executed: {unexecuted}"


@pytest.mark.parametrize("path", GOLDEN, ids=lambda p: p.stem)
def test_golden_notebook_outputs_match(path: Path, execute: Execute) -> None:
    """Executing the notebook again gives the stored outputs, cell by cell."""
    expected = code_cells(nbformat.read(path, as_version=4))
    got = code_cells(execute(path))
    assert [c.id for c in got] == [c.id for c in expected]
    differences = []
    for want, have in zip(expected, got, strict=True):
        if normalise(want.outputs) != normalise(have.outputs):
            differences.append(
                f"cell {want.id!r}:\n  source: {want.source!r}\n"
                f"  expected: {pprint.pformat(normalise(want.outputs), width=90)}\n"
                f"  got:      {pprint.pformat(normalise(have.outputs), width=90)}"
            )
    assert not differences, f"{path.name} differs from its golden copy:\n" + "\n".join(differences)


# ---- examples ----


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_is_stored_without_outputs(path: Path) -> None:
    """Examples are committed clean: outputs come from running them."""
    nb = nbformat.read(path, as_version=4)
    nbformat.validate(nb)
    assert nb.metadata.kernelspec.name == E2E_KERNEL_NAME
    assert nb.metadata.kernelspec.display_name == "Julia (supervised)"
    assert nb.metadata.kernelspec.language == "julia"
    dirty = [c.id for c in code_cells(nb) if c.outputs or c.execution_count is not None]
    assert not dirty, f"{path.name}: cells stored with outputs: {dirty}"


@pytest.mark.parametrize("path", EXAMPLES, ids=lambda p: p.stem)
def test_example_runs_without_unexpected_errors(path: Path, execute: Execute) -> None:
    """Every cell runs; only cells tagged ``raises-exception`` fail, and those do fail."""
    problems = []
    for cell in code_cells(execute(path)):
        if cell.execution_count is None:
            problems.append(f"{cell.id}: not executed")
        failed = any(o.output_type == "error" for o in cell.outputs)
        expected = "raises-exception" in tags(cell)
        if failed != expected:
            problems.append(f"{cell.id}: {'failed' if failed else 'did not fail'}: {cell.outputs}")
    assert not problems, "\n".join(problems)


# ---- the quickstart, output by output ----


@pytest.fixture
def quickstart(execute: Execute) -> dict[str, list[dict[str, Any]]]:
    """The executed quickstart's normalised outputs, by cell id."""
    return {c.id: normalise(c.outputs) for c in code_cells(execute(QUICKSTART))}


def result_data(outputs: list[dict[str, Any]]) -> dict[str, Any]:
    results = [o for o in outputs if o["output_type"] == "execute_result"]
    assert len(results) == 1, f"expected one execute_result, got {outputs}"
    data: dict[str, Any] = results[0]["data"]
    return data


def test_quickstart_has_a_parameters_cell() -> None:
    """Papermill needs exactly one code cell tagged ``parameters``; later cells use ``n``."""
    cells = code_cells(nbformat.read(QUICKSTART, as_version=4))
    tagged = [i for i, c in enumerate(cells) if "parameters" in tags(c)]
    assert len(tagged) == 1, f"cells tagged parameters: {tagged}"
    assert re.fullmatch(r"\s*n\s*=\s*5\s*", cells[tagged[0]].source)
    assert any(re.search(r"\bn\b", c.source) for c in cells[tagged[0] + 1 :])


def test_quickstart_keeps_state_across_cells(quickstart: dict[str, Any]) -> None:
    assert result_data(quickstart["state-define"]) == {"text/plain": "42"}
    assert result_data(quickstart["state-use"]) == {"text/plain": "43"}
    assert result_data(quickstart["parameters"]) == {"text/plain": "5"}
    # squares (from n) is used two cells later; x survives until the failing cell.
    assert result_data(quickstart["squares"])["text/plain"].splitlines()[-1].strip() == "25"
    [error] = quickstart["error"]
    assert "x is still 42" in error["evalue"]


def test_quickstart_progress_bar_redraws_in_place(quickstart: dict[str, Any]) -> None:
    """n = 5 redraws, each starting with \\r, then one newline; nothing else."""
    [stream] = quickstart["progress"]
    assert stream["name"] == "stdout"
    text = stream["text"]
    assert text.count("\r") == 5
    assert text.endswith("\n") and text.count("\n") == 1
    assert text.split("\r")[1:] == [
        f"progress: [{'#' * i}{' ' * (5 - i)}] {i}/5" + ("\n" if i == 5 else "")
        for i in range(1, 6)
    ]


def test_quickstart_shows_output_from_c(quickstart: dict[str, Any]) -> None:
    assert quickstart["c-output"] == [
        {"output_type": "stream", "name": "stdout", "text": "hello from C\n"}
    ]


def test_quickstart_custom_type_renders_as_html(quickstart: dict[str, Any]) -> None:
    data = result_data(quickstart["html-type"])
    assert set(data) == {"text/html", "text/plain"}
    assert "background:teal" in data["text/html"]
    assert data["text/plain"] == 'Swatch("teal")'


def test_quickstart_display_comes_between_prints(quickstart: dict[str, Any]) -> None:
    outputs = quickstart["svg-display"]
    assert [o["output_type"] for o in outputs] == ["stream", "display_data", "stream"]
    assert outputs[0]["text"] == "before the picture\n"
    assert outputs[2]["text"] == "after the picture\n"


def test_quickstart_display_shows_the_svg(quickstart: dict[str, Any]) -> None:
    [display] = [o for o in quickstart["svg-display"] if o["output_type"] == "display_data"]
    assert display["data"].get("image/svg+xml", "").startswith("<svg")


def test_quickstart_update_display_replaces_the_original(quickstart: dict[str, Any]) -> None:
    """nbclient applies update_display_data to the output that has the display id."""
    assert quickstart["update-display"] == [
        {
            "output_type": "display_data",
            "data": {
                "text/html": "<b>done: 55</b>",
                "text/plain": 'HTML{String}("<b>done: 55</b>")',
            },
        }
    ]


def test_quickstart_ends_with_an_error(execute: Execute, quickstart: dict[str, Any]) -> None:
    last = code_cells(execute(QUICKSTART))[-1]
    assert last.id == "error"
    assert "raises-exception" in tags(last)
    [error] = quickstart["error"]
    assert error["output_type"] == "error"
    assert error["ename"] == "ErrorException"
    assert error["evalue"].startswith("this cell fails on purpose")
