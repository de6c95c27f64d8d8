"""The comm messages' handlers: comm_open, comm_msg, comm_close and comm_info_request.

Each hands the message to :class:`~jutul_jkernel.jupyter.comms.CommRouter`, which runs it in
Julia in order (docs/comms.md), with whether it came beside another request
(``BESIDE_ANOTHER``) and on which subshell.
"""

from __future__ import annotations

from typing import Any

from ipykernel.kernelbase import Kernel

from jutul_jkernel.jupyter.kernel_state import BESIDE_ANOTHER, KernelState
from jutul_jkernel.jupyter.publish import Parent


class CommRequests(KernelState):
    """The frontend's comm messages, to Julia through the CommRouter."""

    # Comm messages have no reply, so ipykernel's base class registers no handler for them and
    # drops them; these three get one each.
    msg_types = [*Kernel.msg_types, "comm_open", "comm_msg", "comm_close"]  # noqa: RUF012

    async def comm_open(self, stream: Any, ident: Any, parent: Parent) -> None:
        """A frontend opens a comm: Julia's ``register_comm`` for the target accepts it, or
        Julia closes it (a target nobody registered), as ipykernel does."""
        await self._comm_received(parent)

    async def comm_msg(self, stream: Any, ident: Any, parent: Parent) -> None:
        """A message to an open comm: its ``on_msg`` runs in Julia."""
        await self._comm_received(parent)

    async def comm_close(self, stream: Any, ident: Any, parent: Parent) -> None:
        """The frontend closes a comm: its ``on_close`` runs in Julia."""
        await self._comm_received(parent)

    async def _comm_received(self, msg: Parent) -> None:
        subshell = self._subshell_for(msg)
        await self._comms.received(
            msg,
            beside_another=BESIDE_ANOTHER.get(),
            shell=subshell.number if subshell is not None else 0,
        )

    async def comm_info_request(self, stream: Any, ident: Any, parent: Parent) -> None:
        """The comms open now, those of one target if the request names it."""
        comms = self._comms.info(parent.get("content", {}).get("target_name"))
        self._sess.send(
            stream, "comm_info_reply", {"status": "ok", "comms": comms}, parent, ident=ident
        )
