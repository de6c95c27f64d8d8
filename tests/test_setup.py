"""`make setup` changes only what it installs: Debian's Julia 1.5.3 gets its own libunwind.

scripts/ensure-julia.sh gives Debian's julia 1.5.3 bullseye's libunwind from a folder beside
the venv (a launcher puts it first on LD_LIBRARY_PATH), where it used to downgrade and hold the
system's libunwind8, which removed libunwind-dev and every package that needs it. These tests
run the script on this machine's real apt state, into a temporary venv folder, and leave that
state as they found it: a package they install for the check is purged afterwards. apt waits
(bounded) for a dpkg lock that another apt holds, instead of failing at once.

They need root and Debian's julia package (what `make setup` installs on Debian); elsewhere
they skip and say why.
"""

from __future__ import annotations

import fcntl
import os
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.slow]

REPO = Path(__file__).resolve().parent.parent
_APT_TIMEOUT = 600.0
_DPKG_FRONTEND_LOCK = "/var/lib/dpkg/lock-frontend"

needs_debian_julia = pytest.mark.skipif(
    os.geteuid() != 0
    or shutil.which("dpkg-query") is None
    or subprocess.run(["dpkg-query", "-W", "julia"], capture_output=True).returncode != 0,
    reason="needs root and Debian's julia package (make setup installs it on Debian)",
)


def _out(*argv: str) -> str:
    return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False).stdout


def _installed() -> set[str]:
    """Installed packages with their versions: `name=version` lines."""
    listing = _out("dpkg-query", "-W", "-f=${db:Status-Abbrev} ${Package}=${Version}\n")
    return {line.split()[1] for line in listing.splitlines() if line.startswith("ii")}


def _apt_get(*args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "DEBIAN_FRONTEND": "noninteractive"}
    return subprocess.run(
        ["apt-get", "-o", "DPkg::Lock::Timeout=600", "-q", *args],
        capture_output=True,
        text=True,
        timeout=_APT_TIMEOUT,
        env=env,
        check=False,
    )


@pytest.fixture
def libunwind_dev() -> Iterator[None]:
    """libunwind-dev installed for the test (it needs the system's newer libunwind8). Then the
    machine is put back as it was, even after a set-up that broke its promise: holds it added
    are released, packages it changed or removed are installed again at their old versions,
    and what the test or the set-up added is purged."""
    before, holds = _installed(), set(_out("apt-mark", "showhold").split())
    if not any(p.startswith("libunwind-dev=") for p in before):
        done = _apt_get("install", "-y", "--no-install-recommends", "libunwind-dev")
        if done.returncode != 0:
            pytest.fail(f"could not install libunwind-dev for the check:\n{done.stderr[-2000:]}")
    try:
        yield
    finally:
        new_holds = set(_out("apt-mark", "showhold").split()) - holds
        if new_holds:
            subprocess.run(["apt-mark", "unhold", *sorted(new_holds)], timeout=60, check=False)
        names = {p.split("=")[0] for p in before}
        now = _installed()
        lost = sorted(before - now)
        if lost:
            _apt_get("install", "-y", "--allow-downgrades", "--no-install-recommends", *lost)
        added = sorted({p.split("=")[0] for p in now - before} - names)
        if added:
            _apt_get("purge", "-y", *added)
        assert _installed() == before, "the machine's packages were not left as they were"


@needs_debian_julia
def test_setup_keeps_the_systems_libunwind_and_holds_nothing(
    tmp_path: Path, libunwind_dev: None
) -> None:
    """ensure-julia.sh leaves every package and hold as it was, and its launcher's Julia
    loads the private libunwind, not the system's."""
    holds, packages = _out("apt-mark", "showhold"), _installed()
    venv = tmp_path / "venv"
    venv.mkdir()
    path = os.environ["PATH"].split(os.pathsep)
    # Debian's julia on PATH, as on a machine that has no launcher yet.
    path = [d for d in path if not os.path.exists(os.path.join(d, "julia"))] + ["/usr/bin"]
    done = subprocess.run(
        ["bash", str(REPO / "scripts" / "ensure-julia.sh"), str(venv)],
        capture_output=True,
        text=True,
        timeout=_APT_TIMEOUT,
        env={**os.environ, "PATH": os.pathsep.join(path)},
        check=False,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert _out("apt-mark", "showhold") == holds
    assert _installed() == packages
    launcher = venv / "julia-bin" / "julia"
    maps = subprocess.run(
        [str(launcher), "--startup-file=no", "-e", 'print(read("/proc/self/maps", String))'],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout
    unwind = {line.split()[-1] for line in maps.splitlines() if "libunwind.so" in line}
    assert unwind == {str(venv / "julia-libunwind" / "libunwind.so.8.0.1")}


def _hold_dpkg_lock(seconds: float, held: threading.Event) -> None:
    """Hold dpkg's frontend lock as apt does (an fcntl write lock) for ``seconds``."""
    with open(_DPKG_FRONTEND_LOCK, "w") as f:
        fcntl.lockf(f, fcntl.LOCK_EX)
        held.set()
        time.sleep(seconds)
        fcntl.lockf(f, fcntl.LOCK_UN)


def _apt_get_as_setup_does(wait: int) -> tuple[subprocess.CompletedProcess[str], float]:
    """debian.sh's apt_get (as every ensure-*.sh runs apt) on a package that is installed."""
    script = f'. "{REPO}/scripts/debian.sh"; sudo=""; apt_get -q install -y bash'
    t0 = time.monotonic()
    done = subprocess.run(
        ["bash", "-c", script],
        capture_output=True,
        text=True,
        timeout=120,
        env={**os.environ, "JUTUL_JKERNEL_APT_LOCK_WAIT": str(wait)},
        check=False,
    )
    return done, time.monotonic() - t0


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root: it takes dpkg's lock")
def test_apt_waits_for_a_busy_dpkg_lock() -> None:
    """While another apt holds dpkg's lock, set-up's apt waits for it and then works; past
    its bound it fails naming the lock."""
    held = threading.Event()
    holder = threading.Thread(target=_hold_dpkg_lock, args=(4.0, held))
    holder.start()
    try:
        assert held.wait(60), "could not take dpkg's lock for the check"
        done, took = _apt_get_as_setup_does(wait=60)
    finally:
        holder.join(60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert took >= 2.0, f"apt returned after {took:.1f} s, while the lock was held 4 s"

    held.clear()
    holder = threading.Thread(target=_hold_dpkg_lock, args=(6.0, held))
    holder.start()
    try:
        assert held.wait(60)
        done, _ = _apt_get_as_setup_does(wait=1)
    finally:
        holder.join(60)
    assert done.returncode != 0
    assert "lock" in done.stderr, done.stderr[-2000:]
