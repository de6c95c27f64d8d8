"""papermill runs the example notebook with an injected parameter through the kernel."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from .conftest import E2E_KERNEL_NAME

pytestmark = pytest.mark.e2e

EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "quickstart.ipynb"
RUN_TIMEOUT = 300.0


def test_papermill_injects_the_parameter(e2e_jupyter_env: dict[str, str], tmp_path: Path) -> None:
    """`papermill ... -k julia-supervised -p n 10` puts n = 10 after the parameters cell, and
    the cells that use n see 10."""
    out = tmp_path / "out.ipynb"
    papermill = Path(sys.executable).with_name("papermill")
    done = subprocess.run(
        [str(papermill), str(EXAMPLE), str(out), "-k", E2E_KERNEL_NAME, "-p", "n", "10"],
        env=e2e_jupyter_env,
        capture_output=True,
        text=True,
        timeout=RUN_TIMEOUT,
        check=False,
    )
    # The example's last cell fails on purpose; papermill reports that and exits non-zero.
    assert out.exists(), done.stderr
    nb = nbformat.read(out, 4)
    ids = [c.get("id") for c in nb.cells]
    injected = nb.cells[ids.index("parameters") + 1]
    assert "injected-parameters" in injected.metadata.get("tags", [])
    assert "n = 10" in injected.source
    squares = nb.cells[ids.index("squares")]
    [result] = [o for o in squares.outputs if o.output_type == "execute_result"]
    assert result.data["text/plain"].startswith("10-element")
    assert result.data["text/plain"].rstrip().endswith("100")
    failed = [
        c.get("id") for c in nb.cells if any(o.output_type == "error" for o in c.get("outputs", []))
    ]
    assert failed == ["error"], done.stderr
