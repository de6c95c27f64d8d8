"""The requests Julia answers beside a running cell: complete, inspect, is_complete; and
history, answered from this session's cells (:mod:`.history`).

A query Julia cannot answer (it died, did not start, or did not answer in time) gets an error
reply, or ``unknown`` for is_complete, whose wait is short: clients give up on it quickly.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any

from jutul_jkernel import settings
from jutul_jkernel.jupyter.kernel_state import KernelState
from jutul_jkernel.supervisor.errors import JuliaDiedError, JuliaStartupError

# jupyter console waits 1 s for an is_complete_reply and, on the first miss, stops asking for
# the rest of the session (multi-line input then breaks). Julia answers in milliseconds, but
# not while it compiles (a cold start on a loaded machine): past this we answer "unknown",
# and the console runs the input as typed. A client that waits longer (console's
# kernel_is_complete_timeout) can be matched with JUTUL_JKERNEL_IS_COMPLETE_WAIT (seconds).
_IS_COMPLETE_WAIT = 0.8


def is_complete_wait(log: logging.Logger | Any) -> float:
    """How long is_complete waits for Julia: the setting, or the default if it is bad."""
    try:
        return settings.env_seconds(settings.IS_COMPLETE_WAIT, _IS_COMPLETE_WAIT)
    except ValueError as exc:  # a bad value is logged, not fatal
        log.warning("%s; using %g", exc, _IS_COMPLETE_WAIT)
        return _IS_COMPLETE_WAIT


class QueryRequests(KernelState):
    """complete, inspect, is_complete and history requests."""

    async def do_complete(self, code: str, cursor_pos: int | None) -> dict[str, Any]:
        """Handle a completion request with the REPL's completions."""
        cursor = len(code) if cursor_pos is None else cursor_pos
        try:
            c = await self.supervisor.complete(code, cursor)
        except (JuliaDiedError, JuliaStartupError, TimeoutError) as exc:
            return _query_failed(exc)
        return {
            "status": "ok",
            "matches": c.get("matches", []),
            "cursor_start": c.get("cursor_start", cursor),
            "cursor_end": c.get("cursor_end", cursor),
            "metadata": {},
        }

    async def do_inspect(
        self,
        code: str,
        cursor_pos: int,
        detail_level: int = 0,
        omit_sections: tuple[str, ...] = (),
    ) -> dict[str, Any]:
        """Handle an inspect request with the docstring `?name` would show."""
        try:
            doc = await self.supervisor.inspect(code, cursor_pos)
        except (JuliaDiedError, JuliaStartupError, TimeoutError) as exc:
            return _query_failed(exc)
        found = bool(doc.get("found"))
        return {
            "status": "ok",
            "found": found,
            "data": doc.get("data", {}) if found else {},
            "metadata": {},
        }

    async def do_is_complete(self, code: str) -> dict[str, Any]:
        """Handle an is_complete request by parsing the code in Julia."""
        wait = self._is_complete_wait
        try:
            if self.supervisor.alive:
                # Asked before this handler first waits, so the request's busy leaves while
                # Julia parses (MainLoopIOPub.hold); asyncio.wait_for would run the query in a
                # task of its own, from the loop's next turn, after the busy was sent.
                answer = await self.supervisor.is_complete(code, timeout=wait)
            else:  # the wait bounds Julia's start too
                answer = await asyncio.wait_for(self.supervisor.is_complete(code), wait)
        except (JuliaDiedError, JuliaStartupError, TimeoutError, asyncio.TimeoutError):
            return {"status": "unknown"}
        reply = {"status": answer.get("status", "unknown")}
        if reply["status"] == "incomplete":
            reply["indent"] = answer.get("indent", "")
        return reply

    async def do_history(
        self,
        hist_access_type: str,
        output: bool,
        raw: bool,
        session: int | None = None,
        start: int | None = None,
        stop: int | None = None,
        n: int | None = None,
        pattern: str | None = None,
        unique: bool = False,
        **kwargs: Any,
    ) -> dict[str, Any]:
        """Handle a history request over this session's cells: tail, range or search."""
        return self._history.reply(
            hist_access_type, output, session, start, stop, n, pattern, unique
        )


def _query_failed(exc: Exception) -> dict[str, Any]:
    """The error reply of a completion or inspection that Julia could not answer."""
    return {"status": "error", "ename": type(exc).__name__, "evalue": str(exc), "traceback": []}
