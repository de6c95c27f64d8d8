"""The Jupyter kernel "Julia (supervised)": Jupyter messages in, supervisor calls out.

:class:`JuliaKernel` is an ipykernel ``Kernel`` subclass that never touches pids or sockets
itself: it maps Jupyter's requests onto a :class:`~jutul_jkernel.supervisor.JuliaSupervisor`
and publishes what comes back on IOPub with the request as parent
(:mod:`jutul_jkernel.jupyter.publish`). This module holds what the kernel is (its name,
``kernel_info``, language and banner), its state (``__init__``) and its start; the handlers
are in parts, one concern each, that the class inherits:

- :mod:`.control`: interrupt_request, shutdown, SIGINT and SIGTERM (the control thread);
- :mod:`.shell_routing`: each shell message to the main shell or a subshell's task, and the
  subshells' create, delete and list requests;
- :mod:`.comm_requests`: comm_open, comm_msg, comm_close, comm_info_request;
- :mod:`.execution`: execute_request, its output and reply;
- :mod:`.queries`: complete, inspect, is_complete, history;
- :mod:`.kernel_state`: the fields they share, declared once, and their common helpers.

Why parts the class inherits, and not objects the kernel owns and delegates to: ipykernel
finds a handler by its name on the kernel (``Kernel.__init__`` registers
``getattr(self, msg_type)`` for every shell and control message type) and calls ``self.do_*``,
and what these handlers do is the Kernel's own work (``set_parent``, ``_publish_status``,
``should_handle``, abort and unknown-subshell replies, ``super().shell_main``). An owned object
would need the kernel back as well as a forwarding method on it per handler. ipykernel's
kernelbase.py keeps its handlers on the class, and owns objects only for what has a state and
a life of its own (its SubshellManager, CommManager, Debugger), as this kernel does
(CommRouter, Publisher, Subshells, History, MainLoop); IJulia splits its handlers by file over
one ``Kernel`` struct (handlers.jl, execute_request.jl, comm_manager.jl), the Julia form of the
same split.
"""

from __future__ import annotations

import atexit
import signal
from typing import Any, ClassVar

from ipykernel._version import kernel_protocol_version
from traitlets import Any as AnyTrait
from traitlets import Dict as DictTrait

from jutul_jkernel import __version__
from jutul_jkernel.jupyter.comm_requests import CommRequests
from jutul_jkernel.jupyter.comms import CommRouter
from jutul_jkernel.jupyter.control import UNSUPPORTED_CONTROL, ControlRequests
from jutul_jkernel.jupyter.execution import CellExecution
from jutul_jkernel.jupyter.history import History
from jutul_jkernel.jupyter.kernel_state import JULIA_READY_WAIT
from jutul_jkernel.jupyter.publish import Parent, Publisher
from jutul_jkernel.jupyter.queries import QueryRequests, is_complete_wait
from jutul_jkernel.jupyter.shell_routing import ShellRouting
from jutul_jkernel.jupyter.subshells import Subshells
from jutul_jkernel.jupyter.threads import ControlBacklog, MainLoop
from jutul_jkernel.supervisor.errors import JuliaStartupError
from jutul_jkernel.supervisor.from_env import supervisor_from_env
from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor
from jutul_jkernel.supervisor.output_sink import OutputSink


class JuliaKernel(ControlRequests, ShellRouting, CommRequests, CellExecution, QueryRequests):
    """Jupyter kernel that runs cells in a supervised Julia process."""

    implementation = "jutul-jkernel"
    implementation_version = __version__
    language = "julia"
    help_links = [  # noqa: RUF012 - ipykernel reads this class attribute
        {"text": "Julia documentation", "url": "https://docs.julialang.org/"},
        {"text": "Julia discourse", "url": "https://discourse.julialang.org/"},
    ]
    # IPKernelApp passes these to every kernel; declared so traitlets accepts them.
    user_ns = DictTrait(allow_none=True)
    debugpy_stream = AnyTrait(allow_none=True)
    # `python -m jutul_jkernel` builds the supervisor, and launches Julia, before it imports
    # ipykernel: Julia boots during those imports. The next kernel made takes it from here.
    prepared_supervisor: ClassVar[JuliaSupervisor | None] = None

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        supervisor, JuliaKernel.prepared_supervisor = JuliaKernel.prepared_supervisor, None
        # A private Xvfb comes with Julia when the kernelspec asks for one (install --xvfb).
        self.supervisor = supervisor or supervisor_from_env()
        self._main_loop = MainLoop()
        self._control_backlog = ControlBacklog()
        self._iopub = Publisher(self.session, self.iopub_socket, self._topic, self.log)
        self._comms = CommRouter(
            self.supervisor,
            self._iopub,
            self._sink,
            self._main_loop,
            lambda: self._julia_ready(JULIA_READY_WAIT),
            self.log,
        )
        self.supervisor.route_stray_output(
            OutputSink(
                stream=self._stray_output,
                display=self._stray_display,
                backpressure=self._iopub.backpressure,
                comm=lambda sent: self._comms.publish(sent, self._last_parent),
                julia_ended=lambda: self._comms.close_all(self._last_parent),
            )
        )
        self._is_complete_wait = is_complete_wait(self.log)
        self._julia_start = None
        self._history = History()
        self._stored = 0
        self._last_parent = None
        self._subshells = Subshells()
        for msg_type in UNSUPPORTED_CONTROL:
            self.control_handlers[msg_type] = self._unsupported_request

    # ---- start ----

    def start(self) -> None:
        """Register handlers, then start Julia in the background on the main loop.

        Julia's start is a task from here on, before the loop has run anything: a request
        that needs Julia waits for it (``_julia_ready``). Started from a callback instead, it
        became a task a turn of the loop after a request already waiting on the shell socket
        was handled, and a client that connected quickly got a kernel_info_reply without
        Julia's version ("unknown") or banner."""
        super().start()
        self.read_shell_in_one_task()
        loop = self.io_loop.asyncio_loop  # type: ignore[attr-defined]
        self._main_loop.bind(loop)
        self._julia_start = loop.create_task(self._start_quietly())
        signal.signal(signal.SIGINT, self._on_sigint)
        signal.signal(signal.SIGTERM, self._on_sigterm)
        atexit.register(self.supervisor.kill_now)

    async def _start_quietly(self) -> None:
        try:
            await self.supervisor.start()
        except JuliaStartupError as exc:
            if self.supervisor.shut_down:  # a shutdown or restart came first: nothing failed
                self.log.debug("Julia's start ended by the shutdown: %s", exc)
                return
            # Reported to the user by the first cell, which tries again.
            self.log.error("Julia did not start: %s", exc)

    # ---- kernel_info ----

    @property
    def language_info(self) -> dict[str, Any]:  # type: ignore[override]
        return {
            "name": "julia",
            "version": self.supervisor.julia_version or "unknown",
            "mimetype": "application/julia",
            "file_extension": ".jl",
            "pygments_lexer": "julia",
            "codemirror_mode": "julia",
        }

    @property
    def banner(self) -> str:  # type: ignore[override]
        version = self.supervisor.julia_version or "(not started)"
        # The binary Julia reports, not the command the spec names: with juliaup's launcher
        # (`julia +1.10`) this says which Julia the channel chose.
        path = self.supervisor.julia_path
        where = f" ({path})" if path else ""
        return (
            f"Julia {version}{where}, supervised by jutul-jkernel {__version__}.\n"
            "Interrupts keep your variables; if Julia crashes the cell says why and the next "
            "cell starts a fresh Julia."
        )

    @property
    def kernel_info(self) -> dict[str, Any]:
        # Built here rather than by ipykernel, whose version imports its debugger (50-140 ms at
        # start-up) to list features this kernel would then have to remove: the debugger is
        # not implemented.
        return {
            "protocol_version": kernel_protocol_version,
            "implementation": self.implementation,
            "implementation_version": self.implementation_version,
            "language_info": self.language_info,
            "banner": self.banner,
            "help_links": self.help_links,
            "supported_features": ["kernel subshells"],
        }

    async def kernel_info_request(self, stream: Any, ident: Any, parent: Parent) -> None:
        """Answer once Julia has reported its version (or could not start)."""
        await self._julia_ready(JULIA_READY_WAIT)
        await super().kernel_info_request(stream, ident, parent)
