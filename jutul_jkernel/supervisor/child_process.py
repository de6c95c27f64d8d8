"""Julia's process as the supervisor awaits it: pid, returncode, ``await wait()``.

Julia is spawned with plain Popen (supervisor/spawn.py) so that it can be spawned before any
event loop runs and before asyncio is imported (supervisor/early_launch.py). A thread waits for
its exit, as asyncio's own ThreadedChildWatcher does for ``create_subprocess_exec``; it starts
when the process is adopted, on the loop that awaits it.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import threading


class ChildProcess:
    """A ``subprocess.Popen`` as the supervisor awaits it; its reaper thread starts here."""

    def __init__(self, popen: subprocess.Popen[bytes]) -> None:
        self._popen = popen
        self.pid = popen.pid
        loop = asyncio.get_running_loop()
        self._exited: asyncio.Future[int] = loop.create_future()
        threading.Thread(
            target=self._reap, args=(loop,), name=f"reap-julia-{self.pid}", daemon=True
        ).start()

    def _reap(self, loop: asyncio.AbstractEventLoop) -> None:
        code = self._popen.wait()
        with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits any more
            loop.call_soon_threadsafe(_set_result, self._exited, code)

    @property
    def returncode(self) -> int | None:
        return self._popen.returncode

    async def wait(self) -> int:
        return await asyncio.shield(self._exited)

    def kill(self) -> None:
        self._popen.kill()  # a no-op once reaped: never signals a reused pid

    def terminate(self) -> None:
        self._popen.terminate()


def _set_result(future: asyncio.Future[int], code: int) -> None:
    if not future.done():
        future.set_result(code)
