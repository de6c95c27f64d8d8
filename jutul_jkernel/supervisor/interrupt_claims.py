"""The claims directory, where the INT frame and the SIGINT race for each interrupt request, so
that one request is delivered once.

The INT frame and the SIGINT that follows it are two ways to deliver one request, and either
alone may be late: the listener reads the frame only when the cell yields, perhaps long after
the SIGINT (a cell that catches the interrupt and prints a report), or just as the silence
runs out, so that its ACK and our SIGINT cross. A round trip (the listener asks, we answer
"deliver" or "drop") only moves the race: the answer too is read only when the cell next
yields. So the two sides race for the request on an atomic primitive both have, mkdir of
``<claims>/<request>`` (POSIX mkdir(2), Windows CreateDirectoryW; Julia's ``mkdir`` is
uv_fs_mkdir, JuliaLang/julia release-1.10, release-1.12 and master base/file.jl): the listener
delivers the frame only if it made the directory (``claim_interrupt`` in interrupts.jl), we
send the SIGINT only if we did. A listener that finds it made already answers ACK all the
same: it runs, so the SIGINT, sent as we claimed, lands at its next safepoint.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
from pathlib import Path

from jutul_jkernel.supervisor.spawn import new_claims_dir

log = logging.getLogger(__name__)


class Claims:
    """The directory where the INT frame and the SIGINT race for each interrupt request; one
    per supervisor, so request ids never repeat in it."""

    def __init__(self) -> None:
        self.path: Path | None = None

    def make(self, beside: Path) -> Path | None:
        """Make it (once) in ``beside``; None if it cannot be. Without it neither side claims:
        the listener delivers every INT frame and we send every SIGINT, so a request may be
        delivered twice, but none is lost."""
        if self.path is None:
            try:
                self.path = new_claims_dir(beside)
            except OSError as exc:
                log.warning("no interrupt claims directory in %s: %s", beside, exc)
        return self.path

    def take(self, path: Path) -> bool:
        """Use ``path``, made by new_claims_dir for a Julia spawned early; False if this
        supervisor has a directory already."""
        if self.path is not None:
            return False
        self.path = path
        return True

    def claim(self, request: int) -> bool:
        """Claim ``request`` for a SIGINT; False if Julia's listener claimed it for the INT
        frame. Signal at once after a True: no await between."""
        if self.path is None:
            return True
        try:
            (self.path / str(request)).mkdir()
        except FileExistsError:
            return False
        except OSError as exc:
            log.warning("could not claim interrupt %s (%s); signalling anyway", request, exc)
        return True

    def settle(self, requests: list[int]) -> None:
        """Julia claims only for the running evaluation (or one not started): once it ended,
        its claims are settled, in a worker thread: an rmdir took 2-5 ms here (ext4), which
        the interrupted cell's reply waited for. Request ids are never used again, so nothing
        depends on when they go."""
        if self.path is None or not requests:
            return
        path, requests = self.path, list(requests)

        def remove() -> None:
            for request in requests:
                with contextlib.suppress(OSError):
                    (path / str(request)).rmdir()

        try:
            asyncio.get_running_loop().run_in_executor(None, remove)
        except RuntimeError:  # no loop runs: there is nothing to hold up
            remove()

    def remove(self) -> None:
        path, self.path = self.path, None
        if path is not None:
            shutil.rmtree(path, ignore_errors=True)
