"""What the parts of :class:`~jutul_jkernel.jupyter.kernel.JuliaKernel` share.

The kernel's handlers are split by concern into parts (control.py, shell_routing.py,
comm_requests.py, execution.py, queries.py), each an ipykernel ``Kernel`` subclass that
``JuliaKernel`` inherits: :class:`KernelState` is the base they all stand on. It declares the
kernel's fields, each with what it holds, in one place (as IJulia keeps its state in one
``Kernel`` struct, IJulia #1145); ``JuliaKernel.__init__`` sets them. It also holds the helpers
more than one part calls. Nothing here handles a message.
"""

from __future__ import annotations

import asyncio
from contextvars import ContextVar
from typing import Any

from ipykernel.kernelbase import Kernel
from jupyter_client.session import Session

from jutul_jkernel.jupyter.comms import CommRouter
from jutul_jkernel.jupyter.history import History
from jutul_jkernel.jupyter.publish import Parent, Publisher
from jutul_jkernel.jupyter.subshells import Subshell, Subshells
from jutul_jkernel.jupyter.threads import ControlBacklog, MainLoop
from jutul_jkernel.supervisor.julia_supervisor import JuliaSupervisor

# A request that needs Julia (kernel_info_request for its version, a cell, a comm message)
# waits this long for Julia's start to be over.
JULIA_READY_WAIT = 10.0
# Whether the shell message being handled is one ipykernel 7 dispatches beside the request
# that holds the shell (a comm message arriving while a cell runs): see CommRouter.received.
# Set by the shell's dispatch (shell_routing.py), read by comm_requests.py.
BESIDE_ANOTHER: ContextVar[bool] = ContextVar("jutul_jkernel_beside_another", default=False)


class KernelState(Kernel):
    """The fields and shared helpers of JuliaKernel's parts (set in ``JuliaKernel.__init__``)."""

    supervisor: JuliaSupervisor  # the one Julia; the kernel never touches its pid or socket
    _main_loop: MainLoop  # see jupyter/threads.py: which thread runs what
    _control_backlog: ControlBacklog  # control requests received but not yet started
    _iopub: Publisher  # everything published on IOPub
    _comms: CommRouter  # comm messages both ways, and the comms open
    _history: History  # the cells history_request answers from
    _subshells: Subshells  # jupyter/subshells.py
    _julia_start: asyncio.Task[None] | None  # Julia's start, once the main loop runs
    _stored: int  # executions that stored history: see execution_count
    _last_parent: Parent | None  # the main shell's last cell: output between cells goes there
    _is_complete_wait: float  # see queries.py

    @property
    def _sess(self) -> Session:
        assert self.session is not None, "the kernel app sets a session before any message"
        return self.session

    async def _julia_ready(self, timeout: float) -> None:
        """Wait (bounded) until Julia started or failed to; callable from any thread's loop."""
        start = self._julia_start
        # Once started, no hop through the main loop (~46 us a cell). done() only reads the
        # task's state, which is safe from the control thread.
        if start is not None and not start.done():
            await self._main_loop.run(lambda: asyncio.shield(start), timeout)

    def _reply_unsupported(self, stream: Any, ident: Any, parent: Parent) -> None:
        """Answer a request this kernel does not support with a NotImplementedError reply."""
        msg_type = parent["header"]["msg_type"]
        reply_type = msg_type.rsplit("_", 1)[0] + "_reply"
        content = {
            "status": "error",
            "ename": "NotImplementedError",
            "evalue": f"jutul-jkernel does not support {msg_type}",
            "traceback": [],
        }
        self._sess.send(stream, reply_type, content, parent, ident=ident)

    def _subshell_for(self, msg: Parent) -> Subshell | None:
        """The subshell a (deserialized) message names, or None for the main shell."""
        subshell_id = msg.get("header", {}).get("subshell_id")
        return None if subshell_id is None else self._subshells.get(subshell_id)
