"""Jupyter's own conformance suite (jupyter_kernel_test) against the installed kernel.

``KernelTests`` skips every feature it has no sample for; this module gives a sample for each,
so every test of the suite runs. The kernelspec is installed into a private prefix that only
``JUPYTER_PATH`` points at; Jupyter's and IPython's user directories are redirected there too
(for the life of the class, restored afterwards), so the user's own kernelspecs and settings take
no part.

The class's one kernel lives from setUpClass to tearDownClass, across tests, so its pid goes
into conftest's ``SHARED_KERNEL_PIDS`` (the no-Julia-left-behind guard then accepts the Julia
under it between tests); tearDownClass checks itself that this Julia is gone after shutdown.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import sys
import tempfile
import time
from typing import Any, ClassVar

# The module, not its KernelTests: a TestCase in this module's namespace would be collected too,
# and the base class runs against the "python3" kernel with everything skipped.
import jupyter_kernel_test
import psutil
import pytest
from jupyter_kernel_test.msgspec_v5 import validate_message

from .conftest import REAP_GRACE, SHARED_KERNEL_PIDS, julia_descendants

pytestmark = pytest.mark.e2e

KERNEL_NAME = "julia-supervised-test"
# Installing runs `julia -e 'print(VERSION)'` once; the installer's own bound is 60 s.
INSTALL_TIMEOUT = 120.0
# An unknown request is refused without touching Julia: a reply must come at once.
UNKNOWN_REPLY_TIMEOUT = 5.0
# While waiting for a shell reply, check this often that the kernel process is still there.
LIVENESS_POLL = 0.5

SVG = (
    '<svg xmlns="http://www.w3.org/2000/svg" width="8" height="8">'
    '<circle cx="4" cy="4" r="3"/></svg>'
)
# A value whose richest representation is SVG, as plotting packages define them.
SVG_TYPE = (
    "struct ConformanceSvg end\n"
    f'Base.show(io::IO, ::MIME"image/svg+xml", ::ConformanceSvg) = print(io, """{SVG}""")\n'
)
# Four bytes of PNG signature: enough to check the base64 encoding of a binary MIME type.
PNG_TYPE = (
    "struct ConformancePng end\n"
    'Base.show(io::IO, ::MIME"image/png", ::ConformancePng) = '
    "write(io, UInt8[0x89, 0x50, 0x4e, 0x47])\n"
)
PNG_BASE64 = "iVBORw=="  # base64 of b"\x89PNG"
JSON_TYPE = (
    "struct ConformanceJson end\n"
    'Base.show(io::IO, ::MIME"application/json", ::ConformanceJson) = '
    'print(io, """{"a": [1, 2]}""")\n'
)


def _jupyter_env(prefix: str) -> dict[str, str]:
    """The environment that makes Jupyter find our kernelspec and nothing of the user's, and
    the kernel wait that these tests need."""
    return {
        "JUPYTER_PATH": os.path.join(prefix, "share", "jupyter"),
        "JUPYTER_DATA_DIR": os.path.join(prefix, "data"),
        "JUPYTER_RUNTIME_DIR": os.path.join(prefix, "runtime"),
        "JUPYTER_CONFIG_DIR": os.path.join(prefix, "config"),
        "IPYTHONDIR": os.path.join(prefix, "ipython"),
        # These tests check what each reply says. Past its wait the kernel answers is_complete
        # "unknown", as a console needs, and a loaded machine's first one can take longer than
        # the default 0.8 s; how fast it answers is the bench's first-query row, not a timed
        # assertion here.
        "JUTUL_JKERNEL_IS_COMPLETE_WAIT": "10",
    }


def _restore_env(saved: dict[str, str | None]) -> None:
    for name, value in saved.items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value


def _julia_under(pid: int) -> list[psutil.Process]:
    """The Julia processes whose ancestors include ``pid``."""
    found = []
    for p in julia_descendants():
        try:
            if any(a.pid == pid for a in p.parents()):
                found.append(p)
        except psutil.NoSuchProcess:
            continue
    return found


class JuliaKernelConformance(jupyter_kernel_test.KernelTests):
    """jupyter_kernel_test's KernelTests with a sample for every feature it checks."""

    kernel_name = KERNEL_NAME
    language_name = "julia"
    file_extension = ".jl"

    code_hello_world = 'println("hello, world")'
    code_stderr = 'println(stderr, "written to stderr")'

    completion_samples: ClassVar[list[dict[str, Any]]] = [
        {"text": "prin", "matches": {"print", "println", "printstyled"}},
        {"text": "printl", "matches": {"println"}},
        {"text": "\\alpha", "matches": {"\u03b1"}},  # LaTeX-style completion (alpha), as the REPL
    ]

    complete_code_samples: ClassVar[list[str]] = [
        "1 + 1",
        'println("hi")',
        "f(x) = x^2",
        "function f() end",
        "for i in 1:3\n    println(i)\nend",
        "",
    ]
    incomplete_code_samples: ClassVar[list[str]] = [
        "function f(x)",
        "for i in 1:3",
        "if true",
        "begin",
        "[1,",
        "x = (",
        '"""abc',
        "#= comment",
    ]
    invalid_code_samples: ClassVar[list[str]] = [
        ")",
        "]",
        "end",
        "1 + 1 end",
        "begin end end",
        "x ==== 2",
        "1 2",
    ]

    code_generate_error = 'error("conformance error")'

    code_execute_result: ClassVar[list[dict[str, Any]]] = [
        {"code": "6*7", "result": "42"},
        {"code": "1//3 + 1//6", "result": "1//2"},
        {"code": '"jutul" * "-" * "jkernel"', "result": '"jutul-jkernel"'},
        {"code": "let s = 0; for i in 1:10; s += i; end; s; end", "result": "55"},
        {"code": 'println("printed first"); 2^10', "result": "1024"},
        {"code": 'HTML("<b>x</b>")', "mime": "text/html", "result": "<b>x</b>"},
        {"code": 'import Markdown; Markdown.parse("**bold**")', "mime": "text/markdown"},
        {"code": SVG_TYPE + "ConformanceSvg()", "mime": "image/svg+xml", "result": SVG},
        {"code": PNG_TYPE + "ConformancePng()", "mime": "image/png", "result": PNG_BASE64},
        {
            "code": JSON_TYPE + "ConformanceJson()",
            "mime": "application/json",
            "result": {"a": [1, 2]},  # an object, as the spec says, not the text Julia wrote
        },
    ]

    code_display_data: ClassVar[list[dict[str, str]]] = [
        {"code": 'display("text/html", HTML("<b>hi</b>"))', "mime": "text/html"},
        {"code": 'display(HTML("<i>rich</i>"))', "mime": "text/html"},
        {"code": SVG_TYPE + 'display("image/svg+xml", ConformanceSvg())', "mime": "image/svg+xml"},
        {"code": PNG_TYPE + 'display("image/png", ConformancePng())', "mime": "image/png"},
        # already-formatted data, as Julia's display documents it: a string, and bytes
        {
            "code": 'display("image/svg+xml", "<svg xmlns=\'http://www.w3.org/2000/svg\'/>")',
            "mime": "image/svg+xml",
        },
        {"code": 'display("image/png", UInt8[0x89, 0x50, 0x4e, 0x47])', "mime": "image/png"},
        {
            "code": 'import Markdown; display("text/markdown", Markdown.parse("*md*"))',
            "mime": "text/markdown",
        },
        {
            # display_data with a display_id, then update_display_data for the same id
            "code": 'd = JKernel.display(HTML("<i>1</i>"); display_id=true)\n'
            'JKernel.update_display(HTML("<i>2</i>"); display_id=d)',
            "mime": "text/html",
        },
    ]

    # Glob, as IPython's history search: matches "6*7" of code_execute_result and nothing else.
    code_history_pattern = "6*7"
    supported_history_operations = ("tail", "range", "search")

    code_inspect_sample = "sum"
    code_clear_output = "JKernel.clear_output()"

    _prefix: ClassVar[str]
    _saved_env: ClassVar[dict[str, str | None]]
    _kernel_pid: ClassVar[int]

    @classmethod
    def setUpClass(cls) -> None:
        cls._prefix = tempfile.mkdtemp(prefix="jutul-jkernel-conformance-")
        env = _jupyter_env(cls._prefix)
        cls._saved_env = {name: os.environ.get(name) for name in env}
        try:
            done = subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "jutul_jkernel.install",
                    "--prefix",
                    cls._prefix,
                    "--name",
                    KERNEL_NAME,
                    "--no-doctor",  # tested in test_doctor.py; seconds per install
                ],
                capture_output=True,
                text=True,
                timeout=INSTALL_TIMEOUT,
                check=False,
            )
            assert done.returncode == 0, f"install failed:\n{done.stdout}\n{done.stderr}"
            os.environ.update(env)  # before start_new_kernel creates the KernelSpecManager
            super().setUpClass()  # start_new_kernel: bounded by its startup_timeout (60 s)
            pid = cls.km.provisioner.pid if cls.km.provisioner else None
            assert pid is not None, "the kernel manager started no process"
            cls._kernel_pid = pid
            SHARED_KERNEL_PIDS.add(pid)
        except BaseException:
            _restore_env(cls._saved_env)
            shutil.rmtree(cls._prefix, ignore_errors=True)
            raise

    @classmethod
    def tearDownClass(cls) -> None:
        julias = _julia_under(cls._kernel_pid)
        try:
            super().tearDownClass()  # stop_channels, shutdown_kernel (bounded by jupyter_client)
        finally:
            SHARED_KERNEL_PIDS.discard(cls._kernel_pid)
            _restore_env(cls._saved_env)
            shutil.rmtree(cls._prefix, ignore_errors=True)
        # Once the kernel is gone its Julia is no descendant of ours: the conftest guard can no
        # longer see it, so check here that the shutdown took it along.
        _, alive = psutil.wait_procs(julias, timeout=REAP_GRACE)
        for p in alive:
            p.kill()
        assert not alive, f"Julia left behind by the kernel's shutdown: {[p.pid for p in alive]}"

    # ---- every wait bounded, and a dead kernel named at once ----

    def get_non_kernel_info_reply(self, timeout: float | None = None) -> dict[str, Any] | None:
        """KernelTests' reply wait, bounded and watching the kernel process.

        test_completion and test_is_complete call this without a timeout, which waits forever
        if the kernel is gone; pytest-timeout does not save them either, since pytest cancels
        the item's timer at the first failed subtest. Here the wait ends after
        ``jupyter_kernel_test.TIMEOUT`` (or the caller's timeout), and at once, with the exit
        status, if the kernel process has exited.
        """
        limit = jupyter_kernel_test.TIMEOUT if timeout is None else timeout
        deadline = time.monotonic() + limit
        while True:
            self._assert_kernel_alive()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no shell reply within {limit} s")
            try:
                reply: dict[str, Any] = self.kc.get_shell_msg(timeout=min(remaining, LIVENESS_POLL))
            except queue.Empty:
                continue
            if reply["header"]["msg_type"] != "kernel_info_reply":
                return reply

    def _assert_kernel_alive(self) -> None:
        proc = getattr(self.km.provisioner, "process", None)
        status = proc.poll() if proc is not None else None
        if status is not None:
            how = f"killed by signal {-status}" if status < 0 else f"exited with status {status}"
            raise AssertionError(f"the kernel process {how}; later tests of this class fail too")

    def _reply_to(self, msg_id: str, timeout: float) -> dict[str, Any]:
        """The shell reply to ``msg_id``, skipping late replies to earlier requests (start-up's
        wait_for_ready may have sent kernel_info more than once)."""
        deadline = time.monotonic() + timeout
        while True:
            self._assert_kernel_alive()
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                raise AssertionError(f"no reply to {msg_id} within {timeout} s")
            try:
                reply: dict[str, Any] = self.kc.get_shell_msg(timeout=min(remaining, LIVENESS_POLL))
            except queue.Empty:
                continue
            if reply["parent_header"].get("msg_id") == msg_id:
                return reply

    # ---- beyond jupyter_kernel_test ----

    def test_pager(self) -> None:
        """`?name` answers with the docstring as the cell's value, not a pager payload.

        That is what IJulia does, and why: a saved notebook keeps an execute_result and
        drops a pager payload, and JupyterLab and the console would show the help twice.
        (jupyter_kernel_test's own test_pager expects the payload, so it is replaced here.)
        """
        self.flush_channels()
        reply, output_msgs = self.execute_helper(code="?sum")
        self.assertEqual(reply["content"]["status"], "ok")
        self.assertEqual(reply["content"]["payload"], [])
        results = [m for m in output_msgs if m["msg_type"] == "execute_result"]
        self.assertEqual(len(results), 1, output_msgs)
        data = results[0]["content"]["data"]
        # `sum(itr)` on Julia 1.5, `sum(itr; [init])` on 1.6 and newer
        self.assertIn("sum(itr", data["text/plain"])
        self.assertIn("sum(itr", data["text/markdown"])

    def test_kernel_info_advertises_subshells_and_no_debugger(self) -> None:
        """Kernel subshells are implemented (tests/test_subshells.py) and advertised; the
        debugger is not, and is not."""
        self.flush_channels()
        msg_id = self.kc.kernel_info()
        reply = self._reply_to(msg_id, jupyter_kernel_test.TIMEOUT)
        validate_message(reply, "kernel_info_reply", msg_id)
        features = reply["content"].get("supported_features", [])
        self.assertNotIn("debugger", features)
        self.assertIn("kernel subshells", features)

    def test_unknown_shell_request_gets_error_reply(self) -> None:
        """A shell request the kernel has no handler for is answered, with status error."""
        self.flush_channels()
        sent = self.kc.session.send(self.kc.shell_channel.socket, "foo_request", {})
        reply = self._reply_to(sent["header"]["msg_id"], UNKNOWN_REPLY_TIMEOUT)
        self.assertEqual(reply["header"]["msg_type"], "foo_reply")
        self.assertEqual(reply["parent_header"]["msg_id"], sent["header"]["msg_id"])
        self.assertEqual(reply["content"]["status"], "error")
        # ... and the kernel goes on answering.
        msg_id = self.kc.kernel_info()
        reply = self._reply_to(msg_id, jupyter_kernel_test.TIMEOUT)
        validate_message(reply, "kernel_info_reply", msg_id)
