"""Settings live in one place, and the modules that start Julia import only what they use.

``jutul_jkernel/settings.py`` names every ``JUTUL_JKERNEL_*`` variable and parses the ones Python
reads; ``supervisor/julia_options.py`` holds the Julia options the installer, the agent and the
doctor share; ``supervisor/from_env.py`` imports the Xvfb module only for a kernel that asks for a
private display. No Julia runs here: the import checks run in a fresh Python each, since this
process has imported everything already.
"""

from __future__ import annotations

import ast
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from jutul_jkernel import settings
from jutul_jkernel.tools import doctor

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = ROOT / "jutul_jkernel"
# A fresh Python importing the kernel (ipykernel and all) takes a second or two here.
IMPORT_BOUND = 60.0
NAME = re.compile(r"JUTUL_JKERNEL_[A-Z_]+")


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

_BUILD_THE_KERNELS_SUPERVISOR = """
    import sys
    import jutul_jkernel.jupyter.kernel  # the kernel class's module, as the app imports it
    from jutul_jkernel.supervisor.from_env import supervisor_from_env  # as __main__ does

    supervisor = supervisor_from_env()  # builds it; launch() would start Julia
    print(type(supervisor).__name__)
    print("jutul_jkernel.supervisor.xvfb" in sys.modules)
"""


@pytest.mark.parametrize(
    ("xvfb", "supervisor", "imported"),
    [(None, "JuliaSupervisor", "False"), ("Xvfb", "HeadlessJuliaSupervisor", "True")],
    ids=["plain", "with-xvfb"],
)
def test_the_xvfb_module_is_imported_only_for_a_kernel_with_a_private_display(
    xvfb: str | None, supervisor: str, imported: str
) -> None:
    """Without JUTUL_JKERNEL_XVFB the kernel's entry point and kernel class build a plain
    supervisor and never import jutul_jkernel.supervisor.xvfb; with it, a headless one (Xvfb is only
    named here, not started)."""
    env = {k: v for k, v in os.environ.items() if k != settings.XVFB}
    if xvfb is not None:
        env[settings.XVFB] = xvfb
    assert _fresh_python(_BUILD_THE_KERNELS_SUPERVISOR, env) == [supervisor, imported]


def test_the_agent_and_the_doctor_import_nothing_of_jupyter() -> None:
    """Their Julia options come from supervisor/julia_options.py, not from the installer, which
    imports jupyter_client's KernelSpecManager."""
    code = """
        import sys
        import jutul_jkernel.agents.agent, jutul_jkernel.tools.doctor
        heavy = ("jutul_jkernel.install", "jupyter_client", "ipykernel",
                 "jutul_jkernel.supervisor.xvfb")
        print(sorted(m for m in heavy if m in sys.modules))
    """
    assert _fresh_python(code, dict(os.environ)) == ["[]"]


def test_settings_imports_only_the_standard_library() -> None:
    """settings.py is a leaf: importing it brings in no other module of the package, and
    nothing from outside the standard library."""
    code = """
        import sys
        before = set(sys.modules)
        import jutul_jkernel.settings
        new = set(sys.modules) - before - {"jutul_jkernel", "jutul_jkernel.settings"}
        print(sorted(m for m in new if m.split(".")[0] not in sys.stdlib_module_names))
    """
    assert _fresh_python(code, dict(os.environ)) == ["[]"]


# ---- the list ----


def _constants() -> dict[str, str]:
    """settings.py's name constants, by value."""
    return {
        value: key
        for key, value in vars(settings).items()
        if key.isupper() and isinstance(value, str) and NAME.fullmatch(value)
    }


def test_every_name_the_code_spells_is_in_the_list() -> None:
    """Each JUTUL_JKERNEL_* name in the package or in the Julia side is a settings.py
    constant (scripts/ and tests/ have names of their own, like JUTUL_JKERNEL_CHROMIUM)."""
    sources = [*PACKAGE.rglob("*.py"), *(ROOT / "julia").rglob("*.jl")]
    spelled = {m for path in sources for m in NAME.findall(path.read_text(encoding="utf-8"))}
    assert spelled, "no JUTUL_JKERNEL_ name found: the pattern or the paths are wrong"
    assert spelled <= set(_constants()), sorted(spelled - set(_constants()))


def test_every_user_setting_is_documented_and_no_other() -> None:
    """docs/configuration.md's table lists exactly settings.USER_SETTINGS."""
    page = (ROOT / "docs" / "configuration.md").read_text(encoding="utf-8")
    rows = [line for line in page.splitlines() if line.startswith("| ")]
    documented = {m for row in rows for m in NAME.findall(row)}
    assert documented == set(settings.USER_SETTINGS)
    assert set(settings.SUPERVISOR_ONLY) <= set(settings.USER_SETTINGS)


def _spelled_in_code(path: Path) -> list[str]:
    """The names in ``path``'s string literals, docstrings left out (comments are not in
    the tree): a docstring may name a setting, code uses the constant."""
    tree = ast.parse(path.read_text(encoding="utf-8"))
    docstrings = {
        id(node.body[0].value)
        for node in ast.walk(tree)
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef)
        and node.body
        and isinstance(node.body[0], ast.Expr)
        and isinstance(node.body[0].value, ast.Constant)
    }
    return [
        name
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str)
        if id(node) not in docstrings
        for name in NAME.findall(node.value)
    ]


def test_code_outside_settings_uses_the_constants() -> None:
    """No module of the package but settings.py spells a name in its code."""
    spelled = {
        path.name: names
        for path in sorted(PACKAGE.rglob("*.py"))
        if path.name != "settings.py" and (names := _spelled_in_code(path))
    }
    assert spelled == {}


# ---- parsing ----


@pytest.mark.parametrize(("value", "seconds"), [(None, 7.0), ("", 7.0), ("2.5", 2.5), ("90", 90)])
def test_env_seconds_reads_a_positive_number_or_takes_the_default(
    monkeypatch: pytest.MonkeyPatch, value: str | None, seconds: float
) -> None:
    if value is None:
        monkeypatch.delenv(settings.STARTUP_TIMEOUT, raising=False)
    else:
        monkeypatch.setenv(settings.STARTUP_TIMEOUT, value)
    assert settings.startup_timeout(7.0) == seconds


@pytest.mark.parametrize("value", ["soon", "0", "-5", "1s", "nan"])
def test_env_seconds_names_the_variable_and_the_bad_value(
    monkeypatch: pytest.MonkeyPatch, value: str
) -> None:
    """The message the supervisor shows in the cell and the kernel logs (each adds its own
    ending): the variable, the value as given, and what it should be."""
    monkeypatch.setenv(settings.IS_COMPLETE_WAIT, value)
    with pytest.raises(ValueError) as info:
        settings.env_seconds(settings.IS_COMPLETE_WAIT, 0.8)
    assert str(info.value) == (
        f"JUTUL_JKERNEL_IS_COMPLETE_WAIT={value!r} is not a positive number of seconds"
    )


@pytest.mark.parametrize("value", ["0", "nan", "soon"])
def test_the_doctors_timeout_keeps_its_own_message(
    capsys: pytest.CaptureFixture[str], value: str
) -> None:
    with pytest.raises(SystemExit):
        doctor._parser().parse_args(["--timeout", value])
    assert f"expected a positive number of seconds, got {value!r}" in capsys.readouterr().err
    assert doctor._parser().parse_args(["--timeout", "1.5"]).timeout == 1.5


def test_the_supervisors_defaults_come_from_the_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for name in settings.SUPERVISOR_ONLY:
        monkeypatch.delenv(name, raising=False)
    assert (settings.julia_command(), settings.julia_args(), settings.threads()) == (
        "julia",
        [],
        None,
    )
    monkeypatch.setenv(settings.JULIA, "/opt/julia/bin/julia")
    monkeypatch.setenv(settings.JULIA_ARGS, "+1.10 --project='my env' -O1")
    monkeypatch.setenv(settings.THREADS, "auto")
    assert settings.julia_command() == "/opt/julia/bin/julia"
    assert settings.julia_args() == ["+1.10", "--project=my env", "-O1"]
    assert settings.threads() == "auto"
    monkeypatch.setenv(settings.XVFB, "")
    assert settings.xvfb_command() is None
    monkeypatch.setenv(settings.XVFB, "/usr/bin/Xvfb")
    assert settings.xvfb_command() == "/usr/bin/Xvfb"


def test_the_architecture_page_names_every_module() -> None:
    """docs/architecture.md, the map of the house, names every module of the package (by its
    path under jutul_jkernel/, or by its file name inside its layer's list) and every file of
    the Julia side: a new module is placed on the map when it is made."""
    page = (ROOT / "docs" / "architecture.md").read_text(encoding="utf-8")
    missing = [
        str(path.relative_to(ROOT))
        for path in sorted([*PACKAGE.rglob("*.py"), *(ROOT / "julia").rglob("*.jl")])
        if path.name != "__init__.py" or path.parent == PACKAGE
        if path.name not in page and str(path.relative_to(PACKAGE)) not in page
    ]
    assert missing == [], f"docs/architecture.md does not name {missing}"
