"""Headless graphics: a kernel installed with ``--xvfb`` gives Julia a private X display.

Real Xvfb, real X clients (xdpyinfo from x11-utils, run from a cell), real kernels through
jupyter_client. Every Xvfb a test sees is checked to be gone afterwards: after a shutdown, and
after the kernel is SIGKILLed (when no cleanup code of ours runs).
"""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
from jupyter_client.blocking.client import BlockingKernelClient
from jupyter_client.manager import KernelManager

from jutul_jkernel.supervisor.xvfb import Xvfb, XvfbError

from .clients import execute, result_of, text_of
from .conftest import install_spec, julia_descendants, start_kernel, stop_kernel

pytestmark = pytest.mark.e2e

XVFB_KERNEL = "julia-supervised-xvfb-test"
MISSING_KERNEL = "julia-supervised-xvfb-missing-test"
# Xvfb exits within milliseconds of SIGTERM; Julia within ~1 s of losing its parent.
GONE_WITHIN = 10.0


@pytest.fixture(scope="module")
def xvfb_env(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Install a ``--xvfb`` kernelspec and one naming a missing Xvfb; point Jupyter at them."""
    assert shutil.which("Xvfb"), "Xvfb is not on PATH; `make setup` installs Debian's xvfb"
    assert shutil.which("xdpyinfo"), "xdpyinfo is not on PATH; `make setup` installs x11-utils"
    prefix = tmp_path_factory.mktemp("xvfb-prefix")
    install_spec(prefix, XVFB_KERNEL, "--xvfb")
    missing = prefix / "no" / "such" / "Xvfb"
    install_spec(prefix, MISSING_KERNEL, "--no-check", "--xvfb", str(missing))
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("JUPYTER_PATH", str(prefix / "share" / "jupyter"))
        yield missing


class Seen:
    """Xvfb processes met during a test; all must be gone when it ends."""

    def __init__(self) -> None:
        self.procs: list[psutil.Process] = []
        self.dirs: list[Path] = []

    def xvfb_of(self, km: KernelManager) -> psutil.Process:
        """The kernel's Xvfb (its direct child), recorded for the end-of-test check."""
        pid = km.provisioner.pid if km.provisioner else None
        assert pid is not None
        found = [p for p in psutil.Process(pid).children() if p.name() == "Xvfb"]
        assert len(found) == 1, f"expected one Xvfb child of the kernel, found {found}"
        self.procs.append(found[0])
        self.dirs.append(auth_dir(found[0]))
        return found[0]


def auth_dir(xvfb: psutil.Process) -> Path:
    """The private directory of an Xvfb's cookie (its ``-auth`` file's parent)."""
    argv = xvfb.cmdline()
    return Path(argv[argv.index("-auth") + 1]).parent


def _alive(p: psutil.Process) -> bool:
    try:
        return p.is_running() and p.status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def wait_gone(procs: list[psutil.Process], within: float = GONE_WITHIN) -> list[psutil.Process]:
    """Wait (bounded) until none of ``procs`` runs; return those still running."""
    deadline = time.monotonic() + within
    left = [p for p in procs if _alive(p)]
    while left and time.monotonic() < deadline:
        time.sleep(0.05)
        left = [p for p in left if _alive(p)]
    return left


@pytest.fixture
def seen() -> Iterator[Seen]:
    record = Seen()
    yield record
    left = wait_gone(record.procs)
    for p in left:
        p.kill()
    for d in record.dirs:  # a SIGKILLed kernel cannot remove its cookie's directory
        shutil.rmtree(d, ignore_errors=True)
    assert not left, f"Xvfb left behind: {[p.pid for p in left]}"


@pytest.fixture
def kernel(xvfb_env: Path, seen: Seen) -> Iterator[tuple[KernelManager, BlockingKernelClient]]:
    """A ``--xvfb`` kernel, stopped before ``seen`` checks that its Xvfb is gone."""
    km, kc = start_kernel(XVFB_KERNEL)
    try:
        yield km, kc
    finally:
        stop_kernel(km, kc)


XDPYINFO_CELL = """
println(stdout, "julia to stdout")
println(stderr, "julia to stderr")
run(`xdpyinfo`)                                        # an X client: all on stdout
run(ignorestatus(`xdpyinfo -display :31999`))          # no such display: all on stderr
ENV["DISPLAY"]
"""


def test_a_cell_reaches_the_display_and_streams_stay_separate(
    kernel: tuple[KernelManager, BlockingKernelClient], seen: Seen
) -> None:
    """xdpyinfo run from a cell talks to the kernel's Xvfb (24-bit, full HD, with GLX), and
    what it and Julia write to stdout and to stderr arrive as separate streams."""
    km, kc = kernel
    xvfb = seen.xvfb_of(km)
    reply, outputs = execute(kc, XDPYINFO_CELL, timeout=60)
    assert reply["content"]["status"] == "ok", reply["content"]
    display = result_of(outputs)
    assert display is not None and re.fullmatch(r'":[0-9]+"', display), display
    display = display.strip('"')
    assert "-displayfd" in xvfb.cmdline()  # the number is the one Xvfb chose and reported
    out, err = text_of(outputs, "stdout"), text_of(outputs, "stderr")
    assert "julia to stdout" in out
    assert re.search(rf"name of display:\s+{re.escape(display)}\b", out), out[:500]
    assert re.search(r"dimensions:\s+1920x1080 pixels", out)
    assert re.search(r"depth of root window:\s+24 planes", out)
    assert "GLX" in out
    assert "julia to stderr" in err
    assert 'unable to open display ":31999"' in err
    # and nothing crossed over
    assert "unable to open display" not in out and "julia to stderr" not in out
    assert "name of display" not in err and "julia to stdout" not in err


def test_the_display_refuses_clients_without_the_cookie(
    kernel: tuple[KernelManager, BlockingKernelClient], seen: Seen
) -> None:
    """Another user of a shared machine, without the kernel's XAUTHORITY, is turned away."""
    km, kc = kernel
    seen.xvfb_of(km)
    reply, outputs = execute(
        kc,
        'withenv("XAUTHORITY" => "/dev/null") do; run(ignorestatus(`xdpyinfo`)); end; nothing',
        timeout=60,
    )
    assert reply["content"]["status"] == "ok"
    assert "unable to open display" in text_of(outputs, "stderr")
    assert "name of display" not in text_of(outputs)


def test_concurrent_kernels_get_their_own_displays(xvfb_env: Path, seen: Seen) -> None:
    """Two kernels started together each get a display of their own, both usable."""
    kernels = [start_kernel(XVFB_KERNEL), start_kernel(XVFB_KERNEL)]
    try:
        displays = []
        for km, kc in kernels:
            seen.xvfb_of(km)
            reply, outputs = execute(kc, 'run(`xdpyinfo`); ENV["DISPLAY"]', timeout=60)
            assert reply["content"]["status"] == "ok"
            assert "name of display" in text_of(outputs)
            displays.append(result_of(outputs))
        assert displays[0] != displays[1], displays
    finally:
        for km, kc in kernels:
            stop_kernel(km, kc)


def test_shutdown_ends_xvfb(xvfb_env: Path, seen: Seen) -> None:
    """An orderly shutdown stops the kernel's Xvfb with Julia and removes its cookie."""
    km, kc = start_kernel(XVFB_KERNEL)
    try:
        xvfb = seen.xvfb_of(km)
        cookie_dir = auth_dir(xvfb)
        assert (cookie_dir / "Xauthority").is_file()
        julia = julia_descendants()
        assert julia
    finally:
        stop_kernel(km, kc)
    assert not wait_gone([xvfb, *julia])
    assert not cookie_dir.exists()


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL], ids=lambda s: s.name)
def test_killed_kernel_takes_xvfb_along(xvfb_env: Path, seen: Seen, sig: signal.Signals) -> None:
    """SIGTERM: the kernel's handler ends Xvfb and removes its cookie. SIGKILL runs no code of
    the kernel's: Xvfb and Julia still end (their parent-death signal)."""
    km, kc = start_kernel(XVFB_KERNEL)
    try:
        reply, _ = execute(kc, "1 + 1")
        assert reply["content"]["status"] == "ok"
        xvfb = seen.xvfb_of(km)
        cookie_dir = auth_dir(xvfb)
        julia = julia_descendants()
        assert julia
        pid = km.provisioner.pid if km.provisioner else None
        assert pid is not None
        os.kill(pid, sig)
        assert not wait_gone([xvfb, *julia]), f"Xvfb or Julia outlived a kernel sent {sig.name}"
        if sig == signal.SIGTERM:
            assert not cookie_dir.exists()
    finally:
        stop_kernel(km, kc)


def test_missing_xvfb_is_a_clear_error_in_the_cell(xvfb_env: Path) -> None:
    """With the spec's Xvfb missing, each cell fails saying what is missing and how to get it,
    the kernel stays up, and no Julia starts without the display it was promised."""
    missing = xvfb_env
    km, kc = start_kernel(MISSING_KERNEL)
    try:
        for _ in range(2):
            reply, outputs = execute(kc, "1 + 1")
            content = reply["content"]
            assert content["status"] == "error"
            assert content["ename"] == "JuliaStartupError"
            assert str(missing) in content["evalue"]
            assert "xvfb package" in content["evalue"]
            assert [m["msg_type"] for m in outputs] == ["error"]
            assert not julia_descendants()
        assert km.is_alive()
    finally:
        stop_kernel(km, kc)


# ---- the Xvfb class on its own ----


async def test_xvfb_start_stop_and_restart() -> None:
    """start() reports a display a client can open with the cookie; stop() ends Xvfb and
    removes the cookie; a second start() gives a working display again."""
    x = Xvfb()
    try:
        for _ in range(2):
            env = await x.start()
            assert await x.start() == env  # idempotent while it runs
            proc = psutil.Process(x.pid)
            done = await asyncio.to_thread(
                subprocess.run,
                ["xdpyinfo"],
                env={**os.environ, **env},
                capture_output=True,
                text=True,
                timeout=30,
            )
            assert done.returncode == 0, done.stderr
            await x.stop()
            assert not wait_gone([proc])
            assert not Path(env["XAUTHORITY"]).exists()
            assert not x.alive
    finally:
        await x.stop()


async def test_xvfb_that_exits_at_once_is_explained(tmp_path: Path) -> None:
    """An X server that exits before reporting a display: the error quotes what it said."""
    fake = tmp_path / "Xvfb"
    fake.write_text("#!/bin/sh\necho 'Fatal server error: no screens found' >&2\nexit 1\n")
    fake.chmod(0o755)
    x = Xvfb(str(fake))
    with pytest.raises(XvfbError, match="exited with status 1") as info:
        await x.start()
    assert "no screens found" in str(info.value)
    assert not x.alive
