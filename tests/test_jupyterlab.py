"""JupyterLab in a real browser: what a user of "Julia (supervised)" sees, step by step.

A private JupyterLab server (its own config, data, runtime, settings and workspaces directories;
the kernelspec installed under a temporary ``--prefix`` that ``JUPYTER_PATH`` names, so the user's
own Jupyter set-up takes no part) is driven by Debian's headless Chromium through Playwright. The
test clicks, types and reads the page as a user would: the launcher card, Shift+Enter, the
toolbar's stop button, the Kernel menu, the input box of ``readline()``.

Every step ends with a screenshot in ``tests/artifacts/jupyterlab/`` (``NN-step.png``, and the
page as the test left it, ``<test>-end.png``), next to the server's log, so a failure can be seen
and not only read.

Chromium is ``/usr/bin/chromium`` (``make setup`` runs ``scripts/ensure-browser.sh``; set
``JUTUL_JKERNEL_CHROMIUM`` for another path). Playwright's own browser download is never used. A
missing browser or Playwright fails the test: it is never skipped.
"""

from __future__ import annotations

import base64
import contextlib
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import psutil
import pytest

from .conftest import failed
from .page_traffic import PageTraffic, ask_julia_for_stacks

try:
    from playwright.sync_api import Error as PlaywrightError
    from playwright.sync_api import Locator, Page, expect, sync_playwright
except ImportError as exc:  # reported by the `page` fixture as a failure, never a skip
    _PLAYWRIGHT_MISSING: ImportError | None = exc
else:
    _PLAYWRIGHT_MISSING = None

pytestmark = pytest.mark.e2e

ARTIFACTS = Path(__file__).resolve().parent / "artifacts" / "jupyterlab"
SLIDER_EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "widget_slider.jl"
KERNEL_NAME = "julia-supervised"
DISPLAY_NAME = "Julia (supervised)"
CHROMIUM = os.environ.get("JUTUL_JKERNEL_CHROMIUM", "/usr/bin/chromium")
# As the machine notes start Chromium: without the background-networking flags it keeps trying
# (and failing) to reach Google's hosts through this machine's closed network.
_CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# Seconds. JupyterLab answers /api/status within ~3 s here; a minute only catches a hang.
_LAB_START_TIMEOUT = 60.0
# The server's shutdown API stops every kernel first (each stops its Julia), then exits.
_LAB_SHUTDOWN_TIMEOUT = 30.0
_TERMINATE_TIMEOUT = 10.0
# Milliseconds, as Playwright counts. A page load with JupyterLab's bundles takes ~2 s here.
_PAGE_LOAD_MS = 60_000
# Kernel start = Python + ipykernel + a cold Julia: ~2 s here, much more on a loaded machine.
_KERNEL_START_MS = 60_000
_CELL_MS = 30_000
# The kernel's interrupt escalation ends any cell within ~6 s (docs/interrupts.md).
_INTERRUPT_MS = 20_000
_UI_MS = 10_000
_SLIDER_ASKS = 5  # cells that read the slider's value in Julia, until the last update arrived

# Records every value the notebook's kernel-status indicator takes, with a timestamp, so a wait
# can demand "went through restarting, then idle" instead of trusting a momentary "idle" (the
# indicator shows idle for a moment before the session has even started a kernel).
_STATUS_RECORDER = """
window.__jkStatus = [];
new MutationObserver(() => {
  const el = document.querySelector('.jp-NotebookPanel-toolbar .jp-Notebook-ExecutionIndicator');
  const status = el ? el.getAttribute('data-status') : null;
  const log = window.__jkStatus;
  if (status !== null && (log.length === 0 || log[log.length - 1][0] !== status)) {
    log.push([status, Math.round(performance.now())]);
  }
}).observe(document, {subtree: true, childList: true, attributes: true,
                      attributeFilter: ['data-status']});
"""
_STATUSES = "window.__jkStatus || []"
_SETTLED_AFTER = """([start, via]) => {
  const log = (window.__jkStatus || []).slice(start);
  return log.length > 0 && log[log.length - 1][0] === 'idle'
      && log.some(([status]) => via.includes(status));
}"""


# ---- the JupyterLab server ----


@dataclass(frozen=True)
class LabServer:
    url: str
    token: str
    root: Path
    log: Path
    process: subprocess.Popen[bytes]

    def api(self, path: str, method: str = "GET") -> Any:
        request = urllib.request.Request(
            f"{self.url}{path}",
            method=method,
            headers={"Authorization": f"token {self.token}"},
        )
        with urllib.request.urlopen(request, timeout=5) as response:
            body = response.read()
        return json.loads(body) if body else None

    def log_tail(self, lines: int = 40) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace")
        return "\n".join(text.splitlines()[-lines:])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _lab_environment(base: Path) -> dict[str, str]:
    """Install the kernelspec under ``base`` and return an environment that sees only it."""
    prefix = base / "prefix"
    done = subprocess.run(
        # --no-doctor: tested in test_doctor.py, and seconds per install.
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
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, f"kernelspec install failed:\n{done.stdout}{done.stderr}"
    settings = base / "lab-settings"
    # No "would you like Jupyter news?" toast over the notebook, and no calls to the internet.
    notification = settings / "@jupyterlab" / "apputils-extension"
    notification.mkdir(parents=True)
    (notification / "notification.jupyterlab-settings").write_text(
        json.dumps({"fetchNews": "false", "checkForUpdates": False}), encoding="utf-8"
    )
    env = dict(os.environ)
    env.update(
        JUPYTER_PATH=str(prefix / "share" / "jupyter"),
        JUPYTER_CONFIG_DIR=str(base / "config"),
        JUPYTER_DATA_DIR=str(base / "data"),
        JUPYTER_RUNTIME_DIR=str(base / "runtime"),
        JUPYTERLAB_SETTINGS_DIR=str(settings),
        JUPYTERLAB_WORKSPACES_DIR=str(base / "workspaces"),
        IPYTHONDIR=str(base / "ipython"),
    )
    return env


def _stop_lab(server: LabServer) -> list[psutil.Process]:
    """Shut the server down (it shuts its kernels down); return processes that outlived it."""
    proc = server.process
    try:
        tree = psutil.Process(proc.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    if proc.poll() is None:
        # URLError or a timeout (it answers after stopping the kernels), or an odd body
        with contextlib.suppress(OSError, ValueError):
            server.api("/api/shutdown", method="POST")
        try:
            proc.wait(timeout=_LAB_SHUTDOWN_TIMEOUT)
        except subprocess.TimeoutExpired:
            proc.send_signal(signal.SIGTERM)  # the server's own handler stops kernels too
            try:
                proc.wait(timeout=_TERMINATE_TIMEOUT)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait(timeout=_TERMINATE_TIMEOUT)
    # A kernel the server failed to stop would now be an orphan the conftest guard cannot see.
    _, alive = psutil.wait_procs(tree, timeout=5.0)
    for p in alive:
        with contextlib.suppress(psutil.NoSuchProcess):
            p.kill()
    return alive


def _explain_failure(server: LabServer) -> None:
    """After a failed step: each kernel writes its threads' stacks into the server's log
    (SIGUSR1, jutul_jkernel/__main__.py), and the log's end is printed (pytest shows it with
    the failure), so that a kernel that hung says where."""
    try:
        tree = psutil.Process(server.process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        tree = []
    for p in tree:
        with contextlib.suppress(psutil.Error):
            if "jutul_jkernel" in " ".join(p.cmdline()):
                p.send_signal(signal.SIGUSR1)
    time.sleep(1.0)  # the handler writes at once; the log is a file the server shares
    print(f"[jupyterlab] the server's log ({server.log}) ends with:\n{server.log_tail(150)}")


@pytest.fixture
def lab(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[LabServer]:
    """A private JupyterLab on a free loopback port, shut down (kernels and all) afterwards;
    after a failure, with its kernels' stacks and its log printed."""
    env = _lab_environment(tmp_path)
    root = tmp_path / "notebooks"
    root.mkdir()
    token = secrets.token_hex(16)
    port = _free_port()
    log = tmp_path / "jupyterlab.log"
    command = [
        sys.executable,
        "-m",
        "jupyter",
        "lab",
        "--no-browser",
        "--ServerApp.ip=127.0.0.1",
        f"--ServerApp.port={port}",
        "--ServerApp.port_retries=0",  # fail rather than quietly take another port
        f"--IdentityProvider.token={token}",
        f"--ServerApp.root_dir={root}",
        "--ServerApp.allow_root=True",  # containers run tests as root; the server refuses root
        "--LabApp.extension_manager=readonly",  # no PyPI look-ups from the extension manager
        "--LabApp.expose_app_in_browser=True",  # window.jupyterapp: a console's subshell id
    ]
    with log.open("wb") as log_file:
        process = subprocess.Popen(
            command, env=env, stdin=subprocess.DEVNULL, stdout=log_file, stderr=subprocess.STDOUT
        )
    server = LabServer(f"http://127.0.0.1:{port}", token, root, log, process)
    try:
        deadline = time.monotonic() + _LAB_START_TIMEOUT
        while True:
            if process.poll() is not None:
                pytest.fail(
                    f"JupyterLab exited with status {process.returncode} before answering; "
                    f"its log ({log}) ends with:\n{server.log_tail()}"
                )
            with contextlib.suppress(OSError, ValueError):
                server.api("/api/status")
                break
            if time.monotonic() > deadline:
                pytest.fail(
                    f"JupyterLab did not answer /api/status within {_LAB_START_TIMEOUT:.0f} s; "
                    f"its log ({log}) ends with:\n{server.log_tail()}"
                )
            time.sleep(0.2)
        yield server
    finally:
        if failed(request.node):
            _explain_failure(server)
        leftovers = _stop_lab(server)
        ARTIFACTS.mkdir(parents=True, exist_ok=True)
        (ARTIFACTS / "jupyterlab-server.log").write_bytes(log.read_bytes())
    assert not leftovers, (
        f"JupyterLab's shutdown left processes behind (killed now): {[p.pid for p in leftovers]}"
    )


# ---- the browser ----


@pytest.fixture
def page(tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[Page]:
    """A page in headless Debian Chromium, with an empty profile of its own.

    Whatever the outcome, the page as it was at the end of the test is saved as
    ``<test name>-end.png``: after a failure, that is what the user would have been looking at.
    """
    if _PLAYWRIGHT_MISSING is not None:
        pytest.fail(
            f"Playwright for Python is not importable ({_PLAYWRIGHT_MISSING}); "
            "run `make setup` (it installs the `test` extra)."
        )
    if not os.access(CHROMIUM, os.X_OK):
        pytest.fail(
            f"no Chromium at {CHROMIUM}: run `make setup` (scripts/ensure-browser.sh installs "
            "Debian's chromium) or set JUTUL_JKERNEL_CHROMIUM to a Chromium executable."
        )
    with sync_playwright() as playwright:
        try:
            context = playwright.chromium.launch_persistent_context(
                str(tmp_path / "chromium-profile"),
                executable_path=CHROMIUM,
                headless=True,
                args=_CHROMIUM_FLAGS,
                viewport={"width": 1280, "height": 960},
                timeout=_PAGE_LOAD_MS,
            )
        except PlaywrightError as exc:
            pytest.fail(f"Playwright could not start Chromium ({CHROMIUM}):\n{exc}")
        # Leaving sync_playwright() stops its driver, and with it the browser, whatever happens.
        new_page = context.new_page()
        new_page.add_init_script(_STATUS_RECORDER)
        traffic = PageTraffic(new_page)
        try:
            yield new_page
        finally:
            if failed(request.node):
                ask_julia_for_stacks()
                with contextlib.suppress(PlaywrightError):
                    print(f"[page] kernel statuses seen: {new_page.evaluate(_STATUSES)}")
                print(traffic.explain())
            ARTIFACTS.mkdir(parents=True, exist_ok=True)
            with contextlib.suppress(PlaywrightError):
                new_page.screenshot(path=str(ARTIFACTS / f"{request.node.name}-end.png"))
            context.close()


# ---- driving a notebook ----


class Notebook:
    """The one notebook open in the page, driven through what the page shows."""

    def __init__(self, page: Page) -> None:
        self.page = page
        self.panel = page.locator(".jp-NotebookPanel")
        self.cells = self.panel.locator(".jp-Notebook .jp-Cell")
        self.indicator = self.panel.locator(
            ".jp-NotebookPanel-toolbar .jp-Notebook-ExecutionIndicator"
        )

    def status_log(self) -> list[list[Any]]:
        return list(self.page.evaluate(_STATUSES))

    def wait_settled(self, start: int, via: tuple[str, ...], timeout_ms: float) -> None:
        """Wait until the kernel status, from log entry ``start`` on, passed ``via`` and is idle."""
        try:
            self.page.wait_for_function(_SETTLED_AFTER, arg=[start, list(via)], timeout=timeout_ms)
        except PlaywrightError:
            status_bar = self.page.locator("#jp-main-statusbar").inner_text(timeout=_UI_MS)
            pytest.fail(
                f"the kernel status did not go through {via} to idle within "
                f"{timeout_ms / 1000:.0f} s; statuses seen: {self.status_log()[start:]}; "
                f"status bar: {status_bar!r}"
            )

    def type_cell(self, code: str) -> Locator:
        """Type ``code`` into the last (empty) cell and return that cell."""
        count = self.cells.count()
        cell = self.cells.nth(count - 1)
        editor = cell.locator(".jp-InputArea-editor .cm-content")
        expect(editor).to_have_text("", timeout=_UI_MS)
        editor.click(timeout=_UI_MS)
        self.page.keyboard.type(code)
        expect(editor).to_have_text(code, timeout=_UI_MS)  # nothing auto-closed or indented
        return cell

    def run(self, code: str, *, wait: bool = True, timeout_ms: float = _CELL_MS) -> Locator:
        """Type ``code`` into a new cell, press Shift+Enter, and (with ``wait``) wait it out."""
        count = self.cells.count()
        cell = self.type_cell(code)
        self.page.keyboard.press("Shift+Enter")
        # Shift+Enter on the last cell runs it and adds the next, empty cell.
        expect(self.cells).to_have_count(count + 1, timeout=_UI_MS)
        if wait:
            self.wait_done(cell, timeout_ms)
        return cell

    def wait_done(self, cell: Locator, timeout_ms: float = _CELL_MS) -> None:
        """Wait until ``cell``'s prompt shows an execution count instead of ``[*]``."""
        expect(prompt(cell)).to_have_text(re.compile(r"^\[\d+\]:$"), timeout=timeout_ms)

    def screenshot(self, name: str, cell: Locator | None = None) -> Path:
        if cell is not None:
            cell.scroll_into_view_if_needed(timeout=_UI_MS)
        path = ARTIFACTS / f"{name}.png"
        self.page.screenshot(path=str(path), timeout=_UI_MS)
        return path


def prompt(cell: Locator) -> Locator:
    return cell.locator(".jp-InputPrompt")


def outputs(cell: Locator, mime: str | None = None) -> Locator:
    selector = ".jp-OutputArea-output"
    if mime is not None:
        selector += f'[data-mime-type="{mime}"]'
    return cell.locator(selector)


def result(cell: Locator) -> Locator:
    return cell.locator(".jp-OutputArea-executeResult .jp-OutputArea-output")


def open_julia_notebook(page: Page, server: LabServer) -> Notebook:
    """Open JupyterLab, click the launcher's "Julia (supervised)" card, wait for an idle kernel."""
    specs = server.api("/api/kernelspecs")["kernelspecs"]
    ours = [name for name, s in specs.items() if s["spec"]["display_name"] == DISPLAY_NAME]
    assert ours == [KERNEL_NAME], f"launcher cards named {DISPLAY_NAME!r} would start {ours}"
    page.goto(f"{server.url}/lab?token={server.token}", timeout=_PAGE_LOAD_MS)
    card = page.locator(f'.jp-LauncherCard[data-category="Notebook"][title="{DISPLAY_NAME}"]')
    expect(card.locator(".jp-LauncherCard-label")).to_have_text(DISPLAY_NAME, timeout=_PAGE_LOAD_MS)
    card.click(timeout=_UI_MS)
    notebook = Notebook(page)
    expect(notebook.cells).to_have_count(1, timeout=_UI_MS)
    # "connecting"/"busy" first: the indicator's idle before the kernel exists does not count.
    notebook.wait_settled(0, ("connecting", "unknown", "busy"), _KERNEL_START_MS)
    expect(notebook.indicator).to_have_attribute("data-status", "idle", timeout=_UI_MS)
    expect(page.locator("#jp-main-statusbar")).to_contain_text(
        f"{DISPLAY_NAME} | Idle", timeout=_UI_MS
    )
    sessions = server.api("/api/sessions")
    assert [s["kernel"]["name"] for s in sessions] == [KERNEL_NAME], sessions
    return notebook


# ---- the tests ----


@pytest.mark.timeout(240)
def test_jupyterlab_in_a_browser(lab: LabServer, page: Page) -> None:
    """Launcher, live output, rich output, errors, interrupt, restart, stdin, a Vega-Lite chart
    and a widget in JupyterLab."""
    started = time.monotonic()
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for stale in ARTIFACTS.glob("*.png"):  # an earlier run's pictures would mislead
        stale.unlink()
    shots: list[Path] = []

    # 1. A notebook with "Julia (supervised)" from the launcher; the kernel goes idle.
    nb = open_julia_notebook(page, lab)
    expect(nb.panel.locator(".jp-KernelName")).to_have_text(DISPLAY_NAME, timeout=_UI_MS)
    shots.append(nb.screenshot("01-notebook-created"))

    # 2. Output appears while the cell still runs: tick 1 is shown next to a [*] prompt.
    ticking = nb.run('for i in 1:10; println("tick $i"); sleep(0.3); end', wait=False)
    stdout = outputs(ticking, "application/vnd.jupyter.stdout")
    # wait_for reacts within a frame; expect() re-checks only every second once it has waited.
    stdout.filter(has_text="tick 1").wait_for(timeout=_CELL_MS)
    first_seen = time.monotonic()
    running_prompt = prompt(ticking).inner_text(timeout=_UI_MS)
    text_then = stdout.inner_text(timeout=_UI_MS)
    shots.append(nb.screenshot("02-output-while-running", ticking))
    assert running_prompt == "[*]:", f"prompt when 'tick 1' showed: {running_prompt!r}"
    assert "tick 10" not in text_then, f"all output arrived at once:\n{text_then}"
    nb.wait_done(ticking)
    finished = time.monotonic()
    expect(stdout).to_have_text(
        "".join(f"tick {i}\n" for i in range(1, 11)), timeout=_UI_MS, use_inner_text=True
    )
    # The nine ticks after the first take 2.7 s of sleep(0.3): live output shows tick 1 long
    # before the cell ends; output held back until the end would leave no time between them.
    assert finished - first_seen > 1.0, f"tick 1 was shown only {finished - first_seen:.2f} s early"
    shots.append(nb.screenshot("03-output-finished", ticking))

    # 3. Rich results: HTML as an element; SVG as a picture, given as a string of SVG source
    # and as an object that shows itself as SVG (as plotting packages do).
    html = nb.run("HTML(\"<b id='jk-bold'>bold</b>\")")
    bold = result(html).locator("b#jk-bold")
    expect(bold).to_have_text("bold", timeout=_UI_MS)
    expect(result(html)).not_to_contain_text("<b", timeout=_UI_MS)
    svg_string = nb.run(
        "display(\"image/svg+xml\", \"<svg xmlns='http://www.w3.org/2000/svg' width='60' "
        "height='60'><circle id='jk-circle' cx='30' cy='30' r='25' fill='teal'/></svg>\")"
    )
    _expect_svg_picture(svg_string, "circle#jk-circle")
    svg_object = nb.run(
        "struct JkSquare end; "
        'Base.show(io::IO, ::MIME"image/svg+xml", ::JkSquare) = print(io, '
        "\"<svg xmlns='http://www.w3.org/2000/svg' width='60' height='60'>"
        "<rect id='jk-square' width='50' height='50' fill='orange'/></svg>\"); "
        'display("image/svg+xml", JkSquare())'
    )
    _expect_svg_picture(svg_object, "rect#jk-square")
    shots.append(nb.screenshot("04-html-and-svg", svg_object))

    # 4. An error: the message and its stack trace, pointing at the cell.
    failing = nb.run('error("boom")')
    stderr = outputs(failing, "application/vnd.jupyter.stderr")
    expect(stderr).to_contain_text("boom", timeout=_UI_MS)
    expect(stderr).to_contain_text("Stacktrace:", timeout=_UI_MS)
    # Julia 1.5: "top-level scope at In[n]:1"; 1.6+: "top-level scope", then "@ In[n]:1".
    frame = re.compile(r"top-level scope(?: at |\s+@ )In\[\d+\]:1")
    expect(stderr).to_contain_text(frame, timeout=_UI_MS)
    shots.append(nb.screenshot("05-error-traceback", failing))

    # 5. The toolbar's stop button ends sleep(1000); variables from before survive.
    keep = nb.run("keep = 42")
    expect(result(keep)).to_have_text("42", timeout=_UI_MS)
    sleeping = nb.run("sleep(1000)", wait=False)
    expect(prompt(sleeping)).to_have_text("[*]:", timeout=_UI_MS)
    expect(nb.indicator).to_have_attribute("data-status", "busy", timeout=_CELL_MS)
    time.sleep(1.0)  # well inside sleep(), not racing the start of the cell
    stop = nb.panel.locator(
        '.jp-NotebookPanel-toolbar jp-button[data-command="notebook:interrupt-kernel"]'
    )
    expect(stop).to_have_attribute("title", "Interrupt the kernel", timeout=_UI_MS)
    clicked = time.monotonic()
    stop.click(timeout=_UI_MS)
    expect(outputs(sleeping)).to_contain_text("InterruptException", timeout=_INTERRUPT_MS)
    nb.wait_done(sleeping, _INTERRUPT_MS)
    interrupt_s = time.monotonic() - clicked
    kept = nb.run("keep")
    expect(result(kept)).to_have_text("42", timeout=_UI_MS)
    shots.append(nb.screenshot("06-interrupted-state-kept", kept))

    # 6. Kernel > Restart Kernel..., confirmed: idle again, and the variables are gone.
    before = len(nb.status_log())
    page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Kernel$")).click(timeout=_UI_MS)
    page.locator('.lm-Menu-item[data-command="kernelmenu:restart"]').click(timeout=_UI_MS)
    dialog = page.locator(".jp-Dialog")
    expect(dialog.locator(".jp-Dialog-header")).to_have_text("Restart Kernel?", timeout=_UI_MS)
    shots.append(nb.screenshot("07-restart-dialog"))
    dialog.locator("button.jp-mod-accept").click(timeout=_UI_MS)
    expect(dialog).to_have_count(0, timeout=_UI_MS)
    nb.wait_settled(before, ("restarting",), _KERNEL_START_MS)
    expect(page.locator("#jp-main-statusbar")).to_contain_text(
        f"{DISPLAY_NAME} | Idle", timeout=_UI_MS
    )
    gone = nb.run("isdefined(Main, :keep)")
    expect(result(gone)).to_have_text("false", timeout=_UI_MS)
    expect(prompt(gone)).to_have_text("[1]:", timeout=_UI_MS)  # a new session counts from 1
    shots.append(nb.screenshot("08-after-restart", gone))

    # 7. readline() asks through the page's input box; the answer reaches Julia.
    asking = nb.run('name = readline(); "hi " * name', wait=False)
    box = asking.locator(".jp-Stdin-input")
    expect(box).to_be_visible(timeout=_CELL_MS)
    expect(prompt(asking)).to_have_text("[*]:", timeout=_UI_MS)
    shots.append(nb.screenshot("09-readline-asks", asking))
    box.click(timeout=_UI_MS)
    page.keyboard.type("Jutul")
    page.keyboard.press("Enter")
    nb.wait_done(asking)
    expect(result(asking)).to_have_text('"hi Jutul"', timeout=_UI_MS)
    shots.append(nb.screenshot("10-readline-answered", asking))

    # 8. A Vega-Lite spec, as plotting packages show one, is drawn by JupyterLab's own Vega
    # renderer: Vega's canvas or SVG in the output, not the JSON as text.
    chart = nb.run(VEGA_LITE_CHART)
    # (The Vega renderer's output node has no data-mime-type; its class names it.)
    drawn = chart.locator(".jp-RenderedVegaLite.jp-OutputArea-output").locator(
        "canvas.marks, svg.marks"
    )
    expect(drawn.first).to_be_visible(timeout=_CELL_MS)
    box = drawn.first.bounding_box()
    assert box is not None and box["width"] > 50 and box["height"] > 50, box
    expect(outputs(chart)).not_to_contain_text('"mark"', timeout=_UI_MS)
    shots.append(nb.screenshot("11-vega-lite-chart", chart))

    # 9. A widget made in Julia over comms (examples/widget_slider.jl): ipywidgets' frontend
    # draws the slider, and moving it reaches the observer in Julia.
    widget = nb.run(f'include(raw"{SLIDER_EXAMPLE}"); slider')
    handle = widget.locator(".widget-slider .noUi-handle")  # ipywidgets 8's slider (noUiSlider)
    expect(handle).to_be_visible(timeout=_CELL_MS)
    readout = widget.locator(".widget-readout")
    expect(readout).to_have_text("5", timeout=_UI_MS)
    shots.append(nb.screenshot("12-widget-slider", widget))
    handle.focus(timeout=_UI_MS)
    page.keyboard.press("ArrowRight")
    page.keyboard.press("ArrowRight")
    expect(readout).to_have_text("7", timeout=_UI_MS)
    # ipywidgets keeps one update in flight per model and sends the next only when the kernel
    # reports idle for the last (the throttle in @jupyter-widgets/base widget.ts, sync()), so a
    # cell run at once can reach the kernel before the second update, with ipykernel too.
    # Ask again until Julia has it: each ask is a cell, which the queued update precedes.
    moved = nb.run("slider_value[]")
    for _ in range(_SLIDER_ASKS):
        if result(moved).inner_text(timeout=_UI_MS).strip() == "7":
            break
        moved = nb.run("slider_value[]")
    expect(result(moved)).to_have_text("7", timeout=_UI_MS)
    shots.append(nb.screenshot("13-widget-slider-moved", moved))

    print(
        f"\n[jupyterlab] {len(shots)} screenshots in {ARTIFACTS}"
        f"\n[jupyterlab] interrupt took {interrupt_s:.2f} s from the click to the error shown;"
        f" whole test {time.monotonic() - started:.1f} s"
    )


# A type that shows itself as Vega-Lite v5 (VegaLite.jl's and Plots' vega-lite output are this
# MIME type), two bars.
VEGA_LITE_CHART = (
    "struct JkBars end; "
    'Base.show(io::IO, ::MIME"application/vnd.vegalite.v5+json", ::JkBars) = print(io, '
    '"""{"width": 200, "height": 120, "mark": "bar", '
    '"data": {"values": [{"a": "A", "b": 28}, {"a": "B", "b": 55}]}, '
    '"encoding": {"x": {"field": "a", "type": "nominal"}, '
    '"y": {"field": "b", "type": "quantitative"}}}"""); '
    "JkBars()"
)


def _expect_svg_picture(cell: Locator, element: str) -> None:
    """Check that ``cell`` shows a 60x60 SVG picture containing ``element`` (tag#id)."""
    expect(outputs(cell).first).to_be_visible(timeout=_UI_MS)
    shown = outputs(cell).evaluate_all("es => es.map(e => e.dataset.mimeType)")
    assert shown == ["image/svg+xml"], f"outputs shown as {shown}, not as one SVG picture"
    image = outputs(cell, "image/svg+xml").locator("img, svg")
    expect(image).to_have_count(1, timeout=_UI_MS)
    expect(image).to_be_visible(timeout=_UI_MS)
    if image.evaluate("e => e.tagName.toLowerCase()") == "img":
        # JupyterLab draws SVG output through an <img> with a data: URL (no inline script).
        image.page.wait_for_function(
            "e => e.complete && e.naturalWidth === 60", arg=image.element_handle(), timeout=_UI_MS
        )
        header, _, payload = str(image.get_attribute("src")).partition(",")
        source = (
            base64.b64decode(payload).decode()
            if header.endswith(";base64")
            else urllib.parse.unquote(payload)
        )
        tag, _, element_id = element.partition("#")
        assert f"<{tag} id='{element_id}'" in source, source
    else:
        expect(image.locator(element)).to_have_count(1, timeout=_UI_MS)


# The subshell id of the console JupyterLab shows (null until it has one).
_CONSOLE_SUBSHELL = """() => {
  const app = window.jupyterapp;
  if (!app) { return null; }
  for (const w of app.shell.widgets('main')) {
    const kernel = w.sessionContext && w.sessionContext.session && w.sessionContext.session.kernel;
    if (w.hasClass('jp-ConsolePanel') && kernel && kernel.subshellId) { return kernel.subshellId; }
  }
  return null;
}"""


@pytest.mark.timeout(240)
def test_a_subshell_console_and_a_slider_reach_a_running_loop(lab: LabServer, page: Page) -> None:
    """Kernel subshells in JupyterLab (docs/subshells.md): while a notebook's loop updates a
    global, the notebook's subshell console shows the global's current value, growing; and a
    slider moved during the loop (its comm messages go over a subshell of their own) changes
    what the loop reads, which then ends."""
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    for stale in ARTIFACTS.glob("subshells-*.png"):
        stale.unlink()

    # 1. The slider of examples/widget_slider.jl, drawn by ipywidgets' frontend.
    nb = open_julia_notebook(page, lab)
    widget = nb.run(f'include(raw"{SLIDER_EXAMPLE}"); slider')
    handle = widget.locator(".widget-slider .noUi-handle")
    readout = widget.locator(".widget-readout")
    expect(handle).to_be_visible(timeout=_CELL_MS)
    expect(readout).to_have_text("5", timeout=_UI_MS)

    # 2. A loop that counts in a global and reads the slider, until the slider is at 8.
    loop = nb.run(
        'global x = 0; println("looping"); '
        "while slider_value[] != 8; global x += 1; sleep(0.05); end; "
        '"ended at $(slider_value[])"',
        wait=False,
    )
    expect(prompt(loop)).to_have_text("[*]:", timeout=_UI_MS)
    # [*] shows as soon as the cell is sent; `x` exists once the cell has begun (it may wait
    # for the warm-up step Julia is running: 1.5.3 compiles each at run time).
    looping = outputs(loop, "application/vnd.jupyter.stdout").filter(has_text="looping")
    looping.wait_for(timeout=_CELL_MS)

    # 3. The notebook's subshell console (its context menu; shown only for a kernel that lists
    # "kernel subshells"): `x` answers while the loop runs, a larger number each time.
    nb.panel.locator(".jp-Notebook").click(button="right", timeout=_UI_MS)
    item = page.locator('.lm-Menu-item[data-command="notebook:create-subshell-console"]')
    expect(item).to_be_visible(timeout=_UI_MS)
    item.click(timeout=_UI_MS)
    console = page.locator(".jp-CodeConsole")
    editor = console.locator(".jp-CodeConsole-promptCell .jp-InputArea-editor .cm-content")
    expect(editor).to_be_visible(timeout=_KERNEL_START_MS)
    # The console asks the kernel for its info, then for a subshell; until it has one, what is
    # typed would go to the main shell, behind the loop.
    page.wait_for_function(_CONSOLE_SUBSHELL, timeout=_CELL_MS)
    seen: list[int] = []
    for n in range(1, 4):
        editor.click(timeout=_UI_MS)
        page.keyboard.type("x")
        page.keyboard.press("Shift+Enter")
        answers = console.locator(
            ".jp-CodeConsole-content .jp-OutputArea-executeResult .jp-OutputArea-output"
        )
        expect(answers).to_have_count(n, timeout=_CELL_MS)
        seen.append(int(answers.nth(n - 1).inner_text(timeout=_UI_MS).strip()))
        time.sleep(0.3)
    assert seen == sorted(seen) and seen[0] < seen[-1], f"x seen from the console: {seen}"
    expect(prompt(loop)).to_have_text("[*]:", timeout=_UI_MS)  # the loop still runs
    nb.screenshot("subshells-01-console-during-loop")

    # 4. The slider moved to 8 during the loop: the loop reads it and ends.
    handle.focus(timeout=_UI_MS)
    for _ in range(3):
        page.keyboard.press("ArrowRight")
    expect(readout).to_have_text("8", timeout=_UI_MS)
    nb.wait_done(loop)
    expect(result(loop)).to_have_text('"ended at 8"', timeout=_UI_MS)
    nb.screenshot("subshells-02-slider-ended-the-loop", loop)
