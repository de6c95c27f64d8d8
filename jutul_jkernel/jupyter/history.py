"""The cells of this session that history_request answers from: tail, range or search.

Only cells that store history are kept, with their execution count, and the most recent
``_HISTORY_LIMIT`` of them: what jupyter console asks for (tail, n=1000). Unbounded, a
long-running kernel's memory would grow with every cell.
"""

from __future__ import annotations

import fnmatch
import sys
from collections import deque
from typing import Any

from jutul_jkernel.supervisor.results import ExecutionResult

_HISTORY_LIMIT = 1000
_HISTORY_OUTPUT_CHARS = 4096

# (session, execution count, code, the result's text/plain or None)
_Entry = tuple[int, int, str, str | None]


class History:
    """The session's stored cells, oldest first."""

    def __init__(self) -> None:
        self._entries: deque[_Entry] = deque(maxlen=_HISTORY_LIMIT)

    def add(self, count: int, code: str, result: ExecutionResult) -> None:
        """Keep a cell that stored history, with the start of its result if it succeeded."""
        shown = result.text[:_HISTORY_OUTPUT_CHARS] if result.status == "ok" else None
        self._entries.append((1, count, code, shown))

    def reply(
        self,
        hist_access_type: str,
        output: bool,
        session: int | None,
        start: int | None,
        stop: int | None,
        n: int | None,
        pattern: str | None,
        unique: bool,
    ) -> dict[str, Any]:
        """The history_reply content for a request's arguments (messaging spec)."""
        entries = list(self._entries)
        if hist_access_type == "tail":
            selected = entries[-n:] if n else entries
        elif hist_access_type == "range":
            lo = start or 0
            hi = stop if stop is not None else sys.maxsize
            selected = [e for e in entries if session in (None, 0, e[0]) and lo <= e[1] < hi]
        elif hist_access_type == "search":
            matcher = pattern or "*"
            selected = [e for e in entries if fnmatch.fnmatchcase(e[2], matcher)]
            if unique:
                seen: set[str] = set()
                deduped = []
                for e in reversed(selected):
                    if e[2] not in seen:
                        seen.add(e[2])
                        deduped.append(e)
                selected = list(reversed(deduped))
            if n:
                selected = selected[-n:]
        else:
            return {
                "status": "error",
                "ename": "ValueError",
                "evalue": f"unknown hist_access_type {hist_access_type!r}",
                "traceback": [],
                "history": [],
            }
        history = [(s, line, (code, out) if output else code) for s, line, code, out in selected]
        return {"status": "ok", "history": history}
