"""Kernel subshells (Jupyter messaging 5.5, JEP 91): a record each, no thread, no socket.

ipykernel 7 gives each subshell a thread with an event loop and socket pairs of its own, fed
by a shell-channel thread. This kernel reads the shell socket on the main loop (jupyter/app.py),
and every request ends in Julia, whose supervisor lives there too, so a subshell is a small
record (:class:`Subshell`) and its requests run as tasks on the main loop: in order within the
subshell (its lock), beside the main shell and every other subshell (the kernel's
``_subshell_main``). A burst of subshells costs no thread and no file descriptor.

:class:`Subshells` holds them. The control thread creates, deletes and lists them (the three
control requests), the main loop looks them up for each shell message: both under one lock.
Errors of the control requests carry an ``ename`` and an empty ``traceback`` (the messaging
spec's error reply; ipykernel's carry only ``evalue``).
"""

from __future__ import annotations

import asyncio
import itertools
import threading
import uuid
from dataclasses import dataclass, field
from typing import Any

from ipykernel.subshell_manager import UnknownSubshellError

# Subshells that may exist at once (JupyterLab makes one per subshell console and one per
# widget target; each is a small record here).
MAX_SUBSHELLS = 256


class TooManySubshellsError(RuntimeError):
    """A create_subshell_request beyond :data:`MAX_SUBSHELLS`."""

    ename = "TooManySubshells"


@dataclass(eq=False)
class Subshell:
    """One subshell: its id, its route in the supervisor, and its requests' order."""

    id: str
    number: int  # its route: JuliaSupervisor.execute_beside(..., shell=number)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)  # its requests one at a time
    received: int = 0  # messages received for it so far (the main loop numbers them)
    # stop_on_error: an error reply aborts the execute requests received before it
    abort_up_to: int = 0
    deleted: bool = False
    last_parent: dict[str, Any] | None = None  # what its late output is published under
    routed: bool = False  # its stray sink is registered with the supervisor


class Subshells:
    """The kernel's subshells, by id (the control thread's and the main loop's)."""

    def __init__(self, limit: int = MAX_SUBSHELLS) -> None:
        self._limit = limit
        self._lock = threading.Lock()
        self._live: dict[str, Subshell] = {}
        self._numbers = itertools.count(1)

    def create(self) -> Subshell:
        with self._lock:
            if len(self._live) >= self._limit:
                msg = (
                    f"this kernel has {self._limit} subshells already, the most it keeps; "
                    "delete one first"
                )
                raise TooManySubshellsError(msg)
            subshell = Subshell(str(uuid.uuid4()), next(self._numbers))
            self._live[subshell.id] = subshell
        return subshell

    def delete(self, subshell_id: str) -> Subshell:
        """Forget a subshell; the caller ends what it runs. Raises UnknownSubshellError."""
        with self._lock:
            subshell = self._live.pop(subshell_id, None)
            if subshell is None:
                raise UnknownSubshellError(subshell_id)
            subshell.deleted = True
        return subshell

    def get(self, subshell_id: str) -> Subshell | None:
        with self._lock:
            return self._live.get(subshell_id)

    def ids(self) -> list[str]:
        with self._lock:
            return list(self._live)


def error_reply(err: Exception) -> dict[str, Any]:
    """A control request's error reply: ipykernel's ``evalue``, with a name and a traceback."""
    return {
        "status": "error",
        "ename": getattr(err, "ename", type(err).__name__),
        "evalue": str(err),
        "traceback": [],
    }
