"""The kernelspec installer: what it writes, where, and how it refuses bad input.

Every install goes to a temporary prefix that ``JUPYTER_PATH`` points at, and ``JUPYTER_DATA_DIR``
is redirected too, so no test can read or write the user's own kernelspecs. Tests that check Julia
run the real ``julia`` on PATH: a missing Julia is a failure, never a skip.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import jupyter_core.paths
import pytest
from jupyter_client.kernelspec import KernelSpecManager, NoSuchKernel

from jutul_jkernel._resources import kernelspec_dir
from jutul_jkernel.tools import install, julia_setup

from .conftest import start_kernel, stop_kernel
from .test_doctor import ROWS, julia_binary

NAME = "julia-supervised"
DEFAULT_JULIA_ARGS = "--color=yes --project=@."
REPO_ROOT = Path(__file__).resolve().parent.parent
_SUBPROCESS_TIMEOUT = 60.0
_REPLY_TIMEOUT = 30.0


@pytest.fixture
def prefix(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """Return an install prefix Jupyter searches; the user data dir is redirected beside it.

    Jupyter also searches the running environment (``make demo`` installs a spec into .venv):
    hide that, so "not installed" means not installed by this test.
    """
    monkeypatch.setenv("JUPYTER_PATH", str(tmp_path / "share" / "jupyter"))
    monkeypatch.setenv("JUPYTER_DATA_DIR", str(tmp_path / "user-data"))
    monkeypatch.setattr(jupyter_core.paths, "ENV_JUPYTER_PATH", [])
    monkeypatch.delenv("JUTUL_JKERNEL_JULIA", raising=False)
    assert KernelSpecManager().user_kernel_dir.startswith(str(tmp_path))
    yield tmp_path


@pytest.fixture
def julia() -> str:
    """Return the absolute path of the real julia on PATH."""
    found = shutil.which("julia")
    assert found is not None, "julia is not on PATH; `make setup` installs one"
    return os.path.abspath(found)


def run_install(prefix: Path, *args: str, doctor: bool = False) -> int:
    """Install into ``prefix``; without the doctor (seconds) unless asked: it has its tests."""
    return install.main(["--prefix", str(prefix), *args, *([] if doctor else ["--no-doctor"])])


def installed_spec(name: str = NAME) -> dict[str, object]:
    """Return the kernel.json Jupyter finds for ``name`` (via KernelSpecManager)."""
    spec = KernelSpecManager().get_kernel_spec(name)
    text = (Path(spec.resource_dir) / "kernel.json").read_text(encoding="utf-8")
    loaded: dict[str, object] = json.loads(text)
    return loaded


def spec_env(name: str = NAME) -> dict[str, str]:
    env = KernelSpecManager().get_kernel_spec(name).env
    assert isinstance(env, dict)
    return env


def is_installed(name: str = NAME) -> bool:
    return name in KernelSpecManager().find_kernel_specs()


def png_size(path: Path) -> tuple[int, int]:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n", f"{path} is not a PNG"
    assert data[12:16] == b"IHDR"
    width, height = struct.unpack(">II", data[16:24])
    return width, height


# ---- the template ----


def test_template_is_the_packaged_kernelspec() -> None:
    """The template starts the package's kernel by message-mode interrupts and has both logos."""
    template = kernelspec_dir()
    spec = json.loads((template / "kernel.json").read_text(encoding="utf-8"))
    assert spec["argv"][1:] == ["-m", "jutul_jkernel", "-f", "{connection_file}"]
    assert spec["language"] == "julia"
    assert spec["interrupt_mode"] == "message"
    assert "debugger" not in spec["metadata"]
    assert png_size(template / "logo-32x32.png") == (32, 32)
    assert png_size(template / "logo-64x64.png") == (64, 64)


def _resources_probe(root: Path, code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter that imports jutul_jkernel from a copy under root."""
    shutil.copytree(REPO_ROOT / "jutul_jkernel", root / "site" / "jutul_jkernel")
    return subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=_SUBPROCESS_TIMEOUT,
        env={**os.environ, "PYTHONPATH": str(root / "site")},
        cwd=root,
    )


def test_resources_prefer_the_packaged_copy(tmp_path: Path) -> None:
    """Installed like a wheel (data inside the package), the packaged kernelspec is used."""
    packaged = tmp_path / "site" / "jutul_jkernel" / "kernelspec"
    done = _resources_probe(
        tmp_path,
        f"import shutil; shutil.copytree({str(REPO_ROOT / 'kernelspec')!r}, {str(packaged)!r});"
        "from jutul_jkernel._resources import kernelspec_dir; print(kernelspec_dir())",
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == str(packaged)


def test_resources_name_both_places_when_missing(tmp_path: Path) -> None:
    """With neither a packaged nor a checkout copy, the error names both paths tried."""
    done = _resources_probe(
        tmp_path, "from jutul_jkernel._resources import server_script; server_script()"
    )
    assert done.returncode != 0
    assert "FileNotFoundError" in done.stderr
    assert str(tmp_path / "site" / "jutul_jkernel" / "julia" / "server.jl") in done.stderr
    assert str(tmp_path / "site" / "julia" / "server.jl") in done.stderr


# ---- installing ----


@pytest.mark.integration
def test_install_compiles_the_julia_side(
    prefix: Path, julia: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """An install that checked Julia also compiles the JKernel package into the cache depot
    its kernels use (here one named with --env, which the spec passes on); --no-precompile
    skips that."""
    depot = tmp_path / "depot"
    assert run_install(prefix, "--no-precompile", "--env", f"JUTUL_JKERNEL_DEPOT={depot}") == 0
    assert not list(depot.glob("compiled/*/JKernel/*.ji"))
    assert run_install(prefix, "--env", f"JUTUL_JKERNEL_DEPOT={depot}") == 0
    assert "kernels start from its cache" in capsys.readouterr().out
    assert list(depot.glob("compiled/*/JKernel/*.ji"))
    spec = KernelSpecManager().get_kernel_spec(NAME)
    assert spec.env["JUTUL_JKERNEL_DEPOT"] == str(depot)


@pytest.mark.integration
def test_install_into_prefix_is_found_by_jupyter(
    prefix: Path, julia: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A default install is found by name, runs this interpreter, and reports the Julia."""
    assert run_install(prefix) == 0

    spec = KernelSpecManager().get_kernel_spec(NAME)
    assert Path(spec.resource_dir).is_relative_to(prefix / "share" / "jupyter" / "kernels")
    assert os.path.isabs(spec.argv[0])
    assert spec.argv[0] == os.path.abspath(sys.executable)
    assert spec.argv[1:] == ["-m", "jutul_jkernel", "-f", "{connection_file}"]
    assert spec.display_name == "Julia (supervised)"
    assert spec.language == "julia"
    assert spec.interrupt_mode == "message"
    assert "debugger" not in spec.metadata
    # Unpinned: the kernel finds julia itself at start-up. The one setting silences debugpy's
    # "frozen modules" warning, which ipykernel's import of debugpy prints at every start.
    # Julia gets IJulia's defaults: colour and the notebook's project.
    assert spec.env == {
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        "JUTUL_JKERNEL_JULIA_ARGS": DEFAULT_JULIA_ARGS,
    }
    for size in (32, 64):
        logo = Path(spec.resource_dir) / f"logo-{size}x{size}.png"
        assert png_size(logo) == (size, size)

    out = capsys.readouterr().out
    assert spec.resource_dir in out
    version = subprocess.run(
        [julia, "--startup-file=no", "-e", "print(VERSION)"],
        capture_output=True,
        text=True,
        timeout=_SUBPROCESS_TIMEOUT,
        check=True,
    ).stdout
    assert f"Julia {version} found at {julia}" in out


@pytest.mark.integration
def test_options_travel_in_env(
    prefix: Path, julia: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """--julia (bare name), --threads, --project (relative), --julia-args, --env land in env."""
    project = tmp_path / "my project"
    project.mkdir()
    monkeypatch.chdir(tmp_path)
    code = run_install(
        prefix,
        "--name",
        "jl-opts",
        "--display-name",
        "Julia opts",
        "--julia",
        "julia",
        "--threads",
        "3",
        "--project",
        "my project",
        "--julia-args=-O1 --check-bounds=yes",
        "--env",
        "OPENBLAS_NUM_THREADS=1",
        "--env",
        "WITH_EQUALS=a=b",
        "--env",
        "EMPTY=",
    )
    assert code == 0

    env = spec_env("jl-opts")
    assert env == {
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        "JUTUL_JKERNEL_JULIA": julia,
        "JUTUL_JKERNEL_THREADS": "3",
        "JUTUL_JKERNEL_JULIA_ARGS": shlex.join(
            ["--color=yes", f"--project={project}", "-O1", "--check-bounds=yes"]
        ),
        "OPENBLAS_NUM_THREADS": "1",
        "WITH_EQUALS": "a=b",
        "EMPTY": "",
    }
    # The path with a space survives the round trip the kernel will make.
    assert shlex.split(env["JUTUL_JKERNEL_JULIA_ARGS"])[1] == f"--project={project}"
    assert installed_spec("jl-opts")["display_name"] == "Julia opts"


@pytest.mark.integration
def test_absolute_julia_and_auto_threads(prefix: Path, julia: str) -> None:
    """An absolute --julia is kept as given; --threads accepts 'auto'."""
    assert run_install(prefix, "--julia", julia, "--threads", "auto") == 0
    env = spec_env()
    assert env["JUTUL_JKERNEL_JULIA"] == julia
    assert env["JUTUL_JKERNEL_THREADS"] == "auto"


@pytest.mark.integration
def test_reinstall_replaces(prefix: Path, julia: str) -> None:
    """Installing again under the same name replaces the old spec."""
    assert run_install(prefix, "--threads", "2") == 0
    assert run_install(prefix) == 0
    assert spec_env() == {
        "PYDEVD_DISABLE_FILE_VALIDATION": "1",
        "JUTUL_JKERNEL_JULIA_ARGS": DEFAULT_JULIA_ARGS,
    }


@pytest.mark.parametrize(
    ("options", "julia_args"),
    [
        (["--no-color"], ["--color=no", "--project=@."]),
        (["--no-startup-file"], ["--color=yes", "--project=@.", "--startup-file=no"]),
        (["--project", "@."], ["--color=yes", "--project=@."]),
        (["--project", "@shared-env"], ["--color=yes", "--project=@shared-env"]),
        (
            ["--no-color", "--no-startup-file", "--julia-args=-O1"],
            ["--color=no", "--project=@.", "--startup-file=no", "-O1"],
        ),
    ],
)
def test_color_project_and_startup_options(
    prefix: Path, options: list[str], julia_args: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """--no-color, --no-startup-file and "@" projects become Julia's own flags, in that order,
    before --julia-args (so a flag there wins, as Julia takes the last one)."""
    assert run_install(prefix, "--no-check", *options) == 0
    assert shlex.split(spec_env()["JUTUL_JKERNEL_JULIA_ARGS"]) == julia_args
    assert "does not exist" not in capsys.readouterr().out  # "@..." is not a directory


@pytest.mark.integration
def test_default_julia_args_pass_the_julia_check(prefix: Path, julia: str) -> None:
    """The real julia accepts every flag the options write."""
    assert run_install(prefix, "--no-color", "--no-startup-file") == 0
    assert run_install(prefix) == 0


# ---- the doctor after installing ----


@pytest.mark.integration
def test_install_runs_the_doctor_and_prints_one_line(
    prefix: Path, julia: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """After compiling the Julia side the installer runs the doctor once and prints one line:
    every check passed, on which Julia (the binary that ran, as Julia names it)."""
    assert run_install(prefix, doctor=True) == 0
    out = capsys.readouterr().out
    version = julia_setup.check_julia(julia)
    n = len(ROWS)
    want = f"doctor: {n}/{n} checks passed on Julia {version} ({julia_binary()})"
    assert [line for line in out.splitlines() if line.startswith("doctor: ")][-1] == want, out


@pytest.mark.integration
def test_a_failing_doctor_names_its_rows_and_where_to_report(
    prefix: Path, julia: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A julia that answers the version check but cannot run the server: the kernelspec is
    still installed, and the installer lists the failing row, with its reason, and where to
    report it (the rows after a failed start are counted, not listed)."""
    wrapper = tmp_path / "julia"
    wrapper.write_text(
        '#!/bin/sh\ncase "$*" in *server.jl*) echo "this julia runs no server" >&2; exit 7;; esac\n'
        f'exec "{julia}" "$@"\n'
    )
    wrapper.chmod(0o755)
    assert run_install(prefix, "--julia", str(wrapper), doctor=True) == 0
    assert is_installed()
    err = capsys.readouterr().err
    n = len(ROWS)
    assert f"doctor: {n} of {n} checks FAILED on Julia ? ({wrapper}):" in err, err
    failing = err.split("doctor: ", 1)[1]
    assert "FAIL" in failing and "start: Julia starts" in failing, err
    assert "exited with status 7" in failing and "this julia runs no server" in failing, err
    assert f"({n - 1} more checks not run: Julia did not start)" in failing, err
    assert "Please report this at" in failing
    assert "python -m jutul_jkernel.doctor" in failing


@pytest.mark.integration
def test_no_check_no_doctor_and_no_precompile_skip_the_doctor(
    prefix: Path, julia: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """--no-check runs nothing; --no-doctor and --no-precompile say how to run it instead."""
    assert run_install(prefix, "--no-check", doctor=True) == 0
    assert not [line for line in capsys.readouterr().out.splitlines() if "doctor:" in line]
    assert run_install(prefix, "--no-doctor", doctor=True) == 0
    assert "doctor: not run (--no-doctor); run `python -m jutul_jkernel.doctor`" in (
        capsys.readouterr().out
    )
    assert run_install(prefix, "--no-precompile", doctor=True) == 0
    assert "doctor: not run (--no-precompile)" in capsys.readouterr().out


def test_default_location_is_user(prefix: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With no location flag the spec goes to the (redirected) per-user kernel dir."""
    monkeypatch.delenv("JUPYTER_PATH")
    user_dir = Path(KernelSpecManager().user_kernel_dir)
    assert user_dir.is_relative_to(prefix)  # the fixture redirected it; never the real one
    assert install.main(["--no-check", "--julia", "/opt/julia/bin/julia"]) == 0
    assert (user_dir / NAME / "kernel.json").is_file()


def test_sys_prefix_installs_into_sys_prefix(prefix: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """--sys-prefix hands sys.prefix to KernelSpecManager."""
    env_prefix = prefix / "venv"
    monkeypatch.setattr(sys, "prefix", str(env_prefix))
    monkeypatch.setenv("JUPYTER_PATH", str(env_prefix / "share" / "jupyter"))
    assert install.main(["--sys-prefix", "--no-check"]) == 0
    spec = KernelSpecManager().get_kernel_spec(NAME)
    assert Path(spec.resource_dir).is_relative_to(env_prefix)


def test_no_check_keeps_an_unchecked_julia(prefix: Path) -> None:
    """--no-check installs without running julia, pinning the path as given."""
    missing = prefix / "nowhere" / "julia"
    assert run_install(prefix, "--no-check", "--julia", str(missing)) == 0
    assert spec_env()["JUTUL_JKERNEL_JULIA"] == str(missing)


def test_jupyter_kernelspec_list_shows_it(prefix: Path) -> None:
    """`jupyter kernelspec list` (a separate process) sees the installed name."""
    assert run_install(prefix, "--no-check") == 0
    listing = subprocess.run(
        [sys.executable, "-m", "jupyter", "kernelspec", "list"],
        capture_output=True,
        text=True,
        timeout=_SUBPROCESS_TIMEOUT,
        check=True,
        env=os.environ.copy(),
    )
    lines = [line.split() for line in listing.stdout.splitlines()]
    assert [NAME, str(prefix / "share" / "jupyter" / "kernels" / NAME)] in lines


@pytest.mark.integration
def test_module_entry_point(prefix: Path) -> None:
    """`python -m jutul_jkernel.install` works as a command and exits 0."""
    env = os.environ.copy()
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(REPO_ROOT), env.get("PYTHONPATH")]))
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "jutul_jkernel.install",
            "--prefix",
            str(prefix),
            "--no-doctor",
        ],
        capture_output=True,
        text=True,
        timeout=_SUBPROCESS_TIMEOUT,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    assert is_installed()


# ---- refusing ----


@pytest.mark.parametrize("bad", ["NOVALUE", "=value", "1ST=x", "A-B=x"])
def test_malformed_env_exits_2(prefix: Path, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    """A malformed --env is a usage error naming it, and nothing is installed."""
    with pytest.raises(SystemExit) as exit_info:
        run_install(prefix, "--no-check", "--env", bad)
    assert exit_info.value.code == 2
    assert repr(bad) in capsys.readouterr().err
    assert not is_installed()


@pytest.mark.parametrize("bad", ["0", "-2", "many", "1.5"])
def test_bad_threads_exits_2(prefix: Path, bad: str, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_install(prefix, "--no-check", f"--threads={bad}")
    assert exit_info.value.code == 2
    assert "--threads" in capsys.readouterr().err


def test_env_conflicting_with_its_option_exits_2(
    prefix: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_install(prefix, "--no-check", "--threads", "2", "--env", "JUTUL_JKERNEL_THREADS=4")
    assert exit_info.value.code == 2
    assert "JUTUL_JKERNEL_THREADS" in capsys.readouterr().err
    assert not is_installed()


def test_env_for_julia_args_always_conflicts(
    prefix: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The installer always writes Julia's arguments (colour, project): --env cannot too."""
    with pytest.raises(SystemExit) as exit_info:
        run_install(prefix, "--no-check", "--env", "JUTUL_JKERNEL_JULIA_ARGS=-O1")
    assert exit_info.value.code == 2
    err = capsys.readouterr().err
    assert "JUTUL_JKERNEL_JULIA_ARGS" in err and "--julia-args" in err
    assert not is_installed()


def test_unclosed_quote_in_julia_args_exits_2(
    prefix: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_install(prefix, "--no-check", "--julia-args=-e 'x")
    assert exit_info.value.code == 2
    assert "--julia-args" in capsys.readouterr().err


def test_invalid_name_exits_2(prefix: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_install(prefix, "--no-check", "--name", "my kernel")
    assert exit_info.value.code == 2
    assert "'my kernel'" in capsys.readouterr().err


def test_missing_julia_path_exits_2(prefix: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A --julia that does not exist: status 2, the path, the cause and the fix; no spec."""
    missing = prefix / "no" / "such" / "julia"
    assert run_install(prefix, "--julia", str(missing)) == 2
    err = capsys.readouterr().err
    assert str(missing) in err
    assert "No such file or directory" in err
    assert "juliaup" in err
    assert "--julia PATH" in err
    assert "make setup" in err
    assert not is_installed()


def test_bare_julia_name_not_on_path_exits_2(
    prefix: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    assert run_install(prefix, "--julia", "julia-does-not-exist-here") == 2
    err = capsys.readouterr().err
    assert "julia-does-not-exist-here" in err
    assert not is_installed()


def test_no_julia_on_path_exits_2(
    prefix: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """Without --julia the check looks on PATH, and says so when nothing is there."""
    monkeypatch.setenv("PATH", str(prefix / "empty-bin"))
    assert run_install(prefix) == 2
    err = capsys.readouterr().err
    assert "from PATH" in err
    assert "juliaup" in err


@pytest.mark.integration
def test_julia_rejecting_its_arguments_exits_2(
    prefix: Path, julia: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """The real julia exits non-zero on an unknown flag; its stderr is quoted."""
    assert run_install(prefix, "--julia-args=--no-such-julia-flag") == 2
    err = capsys.readouterr().err
    assert julia in err
    assert "exited with status 1" in err
    assert "--no-such-julia-flag" in err  # from Julia's own "unknown option" line
    assert "--color=yes --project=@. --no-such-julia-flag" in err
    assert not is_installed()


@pytest.mark.integration
def test_julia_that_hangs_exits_2(
    prefix: Path,
    julia: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A julia that does not answer within the check's timeout is a failure, not a wait."""
    hang = tmp_path / "hang.jl"
    hang.write_text("sleep(120)\n", encoding="utf-8")
    monkeypatch.setattr(julia_setup, "_CHECK_TIMEOUT", 3.0)
    assert run_install(prefix, "--julia-args", f"-L {hang}") == 2
    err = capsys.readouterr().err
    assert "did not finish within 3 s" in err
    assert julia in err
    assert not is_installed()


# ---- uninstalling ----


def test_uninstall_removes_it(prefix: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert run_install(prefix, "--no-check") == 0
    spec_dir = Path(KernelSpecManager().get_kernel_spec(NAME).resource_dir)
    assert install.main(["--uninstall", "--prefix", str(prefix)]) == 0
    assert str(spec_dir) in capsys.readouterr().out
    assert not spec_dir.exists()
    with pytest.raises(NoSuchKernel):
        KernelSpecManager().get_kernel_spec(NAME)


def test_uninstall_when_absent_exits_1(prefix: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert install.main(["--uninstall", "--name", "never-installed"]) == 1
    err = capsys.readouterr().err
    assert "no kernelspec named 'never-installed'" in err
    assert str(prefix / "share" / "jupyter" / "kernels") in err


def test_uninstall_leaves_a_spec_outside_the_given_prefix(
    prefix: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """--uninstall --prefix X never removes the spec Jupyter finds somewhere else."""
    assert run_install(prefix, "--no-check") == 0
    other = prefix / "other"
    assert install.main(["--uninstall", "--prefix", str(other)]) == 1
    assert "nothing removed" in capsys.readouterr().err
    assert is_installed()


# ---- headless graphics (--xvfb) ----


@pytest.fixture
def xvfb() -> str:
    """Return the absolute path of the real Xvfb on PATH."""
    found = shutil.which("Xvfb")
    assert found is not None, "Xvfb is not on PATH; `make setup` installs Debian's xvfb"
    return os.path.abspath(found)


@pytest.mark.integration
def test_xvfb_pins_the_xvfb_found_on_path(
    prefix: Path, julia: str, xvfb: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bare --xvfb writes the absolute path of the Xvfb on PATH into the spec's env."""
    assert run_install(prefix, "--xvfb", "--threads", "1") == 0
    assert spec_env()["JUTUL_JKERNEL_XVFB"] == xvfb
    assert spec_env()["JUTUL_JKERNEL_THREADS"] == "1"  # an option after --xvfb is not its PATH
    assert f"Xvfb ({xvfb})" in capsys.readouterr().out


@pytest.mark.integration
def test_xvfb_with_a_path(prefix: Path, julia: str, xvfb: str) -> None:
    assert run_install(prefix, f"--xvfb={xvfb}") == 0
    assert spec_env()["JUTUL_JKERNEL_XVFB"] == xvfb


def test_without_xvfb_the_spec_has_none(prefix: Path) -> None:
    assert run_install(prefix, "--no-check") == 0
    assert "JUTUL_JKERNEL_XVFB" not in spec_env()


@pytest.mark.integration
def test_missing_xvfb_path_exits_3(
    prefix: Path, julia: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """An --xvfb that does not exist: status 3, the path, the package and the way out."""
    missing = prefix / "no" / "such" / "Xvfb"
    assert run_install(prefix, "--xvfb", str(missing)) == 3
    err = capsys.readouterr().err
    assert str(missing) in err
    assert "xvfb package" in err
    assert "--no-check" in err
    assert not is_installed()


@pytest.mark.integration
def test_xvfb_not_on_path_exits_3(
    prefix: Path, julia: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """A bare --xvfb on a machine without Xvfb says it looked on PATH."""
    empty = prefix / "empty-bin"
    empty.mkdir()
    monkeypatch.setenv("PATH", str(empty))
    assert run_install(prefix, "--julia", julia, "--xvfb") == 3
    err = capsys.readouterr().err
    assert "'Xvfb' was not found on PATH" in err
    assert not is_installed()


def test_no_check_keeps_an_unchecked_xvfb(prefix: Path) -> None:
    missing = prefix / "nowhere" / "Xvfb"
    assert run_install(prefix, "--no-check", "--xvfb", str(missing)) == 0
    assert spec_env()["JUTUL_JKERNEL_XVFB"] == str(missing)


def test_env_conflicting_with_xvfb_exits_2(
    prefix: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_info:
        run_install(prefix, "--no-check", "--xvfb", "--env", "JUTUL_JKERNEL_XVFB=/x")
    assert exit_info.value.code == 2
    assert "--xvfb" in capsys.readouterr().err
    assert not is_installed()


# ---- juliaup channels, through a test double of juliaup's launcher ----

# juliaup cannot be installed here (no network registry for it), so these tests run a test
# double of its launcher: a script that handles its arguments as JuliaLang/juliaup master
# src/bin/julialauncher.rs does. Only a first argument `+channel` selects a channel; an unknown
# channel ends with the launcher's own message and status 1; the other arguments go to Julia,
# which replaces the launcher's process (exec), as on Linux and macOS. Every channel it knows
# runs the one Julia these machines have. It appends each argv it gets to a log, one JSON list
# a line, so a test sees what the installer and the kernel gave it.
_LAUNCHER_CHANNELS = ("release", "lts", "1.10")
_LAUNCHER_DOUBLE = """#!{python}
# Test double for juliaup's launcher: see tests/test_install.py.
import json, os, sys
with open({log!r}, "a", encoding="utf-8") as log:
    log.write(json.dumps(sys.argv[1:]) + "\\n")
args = sys.argv[1:]
if args and args[0].startswith("+"):
    channel, args = args[0][1:], args[1:]
    if channel not in {channels!r}:
        sys.stderr.write(
            f"ERROR: Invalid Juliaup channel `{{channel}}`. Please run `juliaup list` to get a "
            "list of valid channels and versions.\\n"
        )
        sys.exit(1)
os.execv({julia!r}, [{julia!r}, *args])
"""


class LauncherDouble:
    """A stand-in for juliaup's launcher in its own bin folder: ``julialauncher``, and ``julia``
    a link to it, as juliaup's installer and Homebrew's formula lay them out."""

    def __init__(self, root: Path, julia: str) -> None:
        self.bin = root / "juliaup-bin"
        self.bin.mkdir()
        self.log = root / "launcher-argv.log"
        self.log.touch()
        target = self.bin / "julialauncher"
        target.write_text(
            _LAUNCHER_DOUBLE.format(
                python=sys.executable, log=str(self.log), channels=_LAUNCHER_CHANNELS, julia=julia
            ),
            encoding="utf-8",
        )
        target.chmod(0o755)
        self.julia = self.bin / "julia"
        self.julia.symlink_to("julialauncher")

    def calls(self) -> list[list[str]]:
        """Every argv (without the program name) the launcher was started with, in order."""
        lines = self.log.read_text(encoding="utf-8").splitlines()
        return [json.loads(line) for line in lines]


@pytest.fixture
def launcher(tmp_path: Path, julia: str) -> LauncherDouble:
    return LauncherDouble(tmp_path, julia)


@pytest.fixture
def launcher_on_path(launcher: LauncherDouble, monkeypatch: pytest.MonkeyPatch) -> LauncherDouble:
    """The launcher double is the `julia` on PATH, as after juliaup's installer."""
    monkeypatch.setenv("PATH", f"{launcher.bin}{os.pathsep}{os.environ['PATH']}")
    return launcher


def spec_julia_command(name: str = NAME) -> list[str]:
    """The Julia command line a kernel from this spec starts with, before its own flags."""
    env = spec_env(name)
    return [env["JUTUL_JKERNEL_JULIA"], *shlex.split(env["JUTUL_JKERNEL_JULIA_ARGS"])]


@pytest.mark.integration
def test_channel_writes_the_launcher_and_the_channel_first(
    prefix: Path, launcher_on_path: LauncherDouble, capsys: pytest.CaptureFixture[str]
) -> None:
    """--channel 1.10 pins the launcher found on PATH, as found (the link, not what it links
    to), with +1.10 right after it; the installer checked the channel through the launcher."""
    assert run_install(prefix, "--channel", "1.10", "--no-precompile") == 0
    assert spec_julia_command() == [
        str(launcher_on_path.julia),
        "+1.10",
        "--color=yes",
        "--project=@.",
    ]
    calls = launcher_on_path.calls()
    assert calls[0] == ["+1.10", "--version"]
    assert all(call[0] == "+1.10" for call in calls)
    out = capsys.readouterr().out
    assert "juliaup channel '1.10': julia version 1." in out
    assert f"found at {launcher_on_path.julia} +1.10" in out


@pytest.mark.integration
def test_julia_given_the_launcher_is_written_as_given(
    prefix: Path, launcher: LauncherDouble
) -> None:
    """--julia naming juliaup's launcher (a link to julialauncher) is never resolved: the spec
    names the link, so a juliaup update or reinstall behind it changes nothing."""
    given = str(launcher.julia)
    assert run_install(prefix, "--julia", given, "--channel", "lts", "--no-precompile") == 0
    assert spec_julia_command()[:2] == [str(launcher.julia), "+lts"]
    assert run_install(prefix, "--julia", str(launcher.julia), "--no-precompile") == 0
    assert spec_env()["JUTUL_JKERNEL_JULIA"] == str(launcher.julia)


@pytest.mark.integration
def test_unknown_channel_fails_naming_it(
    prefix: Path, launcher_on_path: LauncherDouble, capsys: pytest.CaptureFixture[str]
) -> None:
    """A channel the launcher does not resolve: status 2, the channel, the launcher's own
    words, and how to add it; nothing installed."""
    assert run_install(prefix, "--channel", "9.99") == 2
    err = capsys.readouterr().err
    assert "the juliaup channel '9.99' did not resolve; nothing installed" in err
    assert f"tried: {launcher_on_path.julia} +9.99 --version" in err
    assert "Invalid Juliaup channel `9.99`" in err  # quoted from the launcher's stderr
    assert "juliaup add 9.99" in err
    assert "does not look like" not in err  # it is a launcher: the channel is at fault
    assert not is_installed()


@pytest.mark.integration
def test_channel_with_a_julia_that_is_no_launcher_says_so(
    prefix: Path, julia: str, capsys: pytest.CaptureFixture[str]
) -> None:
    """A plain julia takes +1.10 for a file to run: the error says a launcher is needed."""
    assert run_install(prefix, "--julia", julia, "--channel", "1.10") == 2
    err = capsys.readouterr().err
    assert "the juliaup channel '1.10' did not resolve" in err
    assert f"{julia} does not look like one" in err
    assert "~/.juliaup/bin/julia" in err
    assert not is_installed()


def test_channel_name_is_checked(prefix: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A channel name with a space or a slash is a usage error; a leading + is accepted."""
    for bad in ("1 10", "../x", ""):
        with pytest.raises(SystemExit) as exit_info:
            run_install(prefix, "--no-check", "--channel", bad)
        assert exit_info.value.code == 2
        assert "is not a juliaup channel name" in capsys.readouterr().err
    assert run_install(prefix, "--no-check", "--channel", "+release") == 0
    assert shlex.split(spec_env()["JUTUL_JKERNEL_JULIA_ARGS"])[0] == "+release"


@pytest.mark.integration
def test_julia_inside_juliaup_warns_that_an_update_removes_it(
    prefix: Path, julia: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A --julia in juliaup's versioned folder (here a link to the real one) installs, with a
    warning that suggests the channel of its version (the version of the Julia it links to)."""
    version = subprocess.run(
        [julia, "--startup-file=no", "-e", "print(VERSION)"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    ).stdout
    folder = f"julia-{version}+0.x64.linux.gnu"
    versioned = tmp_path / ".julia" / "juliaup" / folder / "bin"
    versioned.mkdir(parents=True)
    (versioned / "julia").symlink_to(julia)
    assert run_install(prefix, "--julia", str(versioned / "julia"), "--no-precompile") == 0
    err = capsys.readouterr().err
    assert folder in err
    assert f"--channel {'.'.join(version.split('.')[:2])}" in err
    assert spec_env()["JUTUL_JKERNEL_JULIA"] == str(versioned / "julia")


@pytest.mark.e2e
def test_kernel_from_a_channel_spec_runs_the_channel(
    prefix: Path, julia: str, launcher_on_path: LauncherDouble
) -> None:
    """A kernel from a --channel spec starts Julia through the launcher with +1.10 as its first
    argument, runs a cell, and its banner names the Julia binary that ran (not the launcher)."""
    assert run_install(prefix, "--channel", "1.10", "--no-precompile", "--name", "jl-channel") == 0
    km, kc = start_kernel("jl-channel")
    try:
        # reply=True reads shell replies until the one to this request (start_kernel's
        # wait_for_ready may leave kernel_info replies queued).
        reply = kc.execute("1 + 1", reply=True, timeout=_REPLY_TIMEOUT)["content"]
        assert reply["status"] == "ok", reply
        info = kc.kernel_info(reply=True, timeout=_REPLY_TIMEOUT)["content"]
    finally:
        stop_kernel(km, kc)
    real = subprocess.run(
        [julia, "--startup-file=no", "-e", 'print(joinpath(Sys.BINDIR, "julia"))'],
        capture_output=True,
        text=True,
        timeout=_SUBPROCESS_TIMEOUT,
        check=True,
    ).stdout
    assert f"({real})" in info["banner"], info["banner"]
    assert info["language_info"]["version"] in info["banner"]
    kernel_calls = [call for call in launcher_on_path.calls() if "--version" not in call]
    assert kernel_calls, "the kernel did not start Julia through the launcher"
    assert all(call[0] == "+1.10" for call in kernel_calls), kernel_calls


@pytest.mark.integration
def test_doctor_through_a_channel_names_the_julia_that_ran(
    prefix: Path, launcher_on_path: LauncherDouble, capsys: pytest.CaptureFixture[str]
) -> None:
    """With --channel, the installer's doctor starts Julia (and its bare `julia -e nothing`)
    through the launcher with +1.10 first, and its line names the binary that ran, not the
    launcher."""
    assert run_install(prefix, "--channel", "1.10", doctor=True) == 0
    out = capsys.readouterr().out
    n = len(ROWS)
    version = julia_setup.check_julia(str(launcher_on_path.julia), ["+1.10"])
    want = f"doctor: {n}/{n} checks passed on Julia {version} ({julia_binary()})"
    assert [line for line in out.splitlines() if line.startswith("doctor: ")][-1] == want, out
    calls = launcher_on_path.calls()
    assert ["+1.10", "-e", "nothing"] in calls, calls
    servers = [call for call in calls if any(a.endswith("server.jl") for a in call)]
    assert servers and all(call[0] == "+1.10" for call in servers), calls
