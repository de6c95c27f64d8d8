"""The modules that start Julia import only what they use.

``julia_options.py`` holds the Julia options the installer, the agent and the doctor share. No
Julia runs here: the import checks run in a fresh Python each, since this process has imported
everything already.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# A fresh Python importing the agent and the doctor takes a second or two here.
IMPORT_BOUND = 60.0


def _fresh_python(code: str, env: dict[str, str]) -> list[str]:
    """Run ``code`` in a new interpreter from the repository's root; return its stdout lines."""
    done = subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=IMPORT_BOUND,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    return done.stdout.splitlines()


# ---- what each start imports ----


def test_the_agent_and_the_doctor_import_nothing_of_jupyter() -> None:
    """Their Julia options come from julia_options.py, not from the installer, which imports
    jupyter_client's KernelSpecManager."""
    code = """
        import sys
        import jutul_jkernel.agent, jutul_jkernel.doctor
        heavy = ("jutul_jkernel.install", "jupyter_client", "ipykernel", "jutul_jkernel.xvfb")
        print(sorted(m for m in heavy if m in sys.modules))
    """
    assert _fresh_python(code, dict(os.environ)) == ["[]"]
