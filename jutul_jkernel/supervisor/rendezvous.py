"""Where a starting Julia connects to its supervisor: a listening socket that takes no TCP port.

On POSIX the listener is a Unix socket in a fresh directory that only this user can enter
(``mkdtemp`` makes it 0700); Julia connects to the path with ``Sockets.connect(path)``. Windows
keeps a loopback TCP port, where ``AF_UNIX`` and Julia's named pipes would need other code.

Why not a loopback TCP port everywhere: a Jupyter kernel manager picks a kernel's five ports by
binding port 0 and releasing it, writes them into the connection file, and the kernel binds
them a second or so later (jupyter_client#487, still open). Any socket bound to port 0 in that
window, on the whole machine, can take one of them, and that kernel then dies with "Address
already in use" before it ever answers. Our listener was such a socket, bound at the very start
of every kernel (the early launch, ``__main__.py``), so ten kernels starting together
(``tests/test_many_kernels.py``) took each other's ports now and then.

The one-time token of the handshake stays: it is what tells Julia's connection from any other
process of the same user's.
"""

from __future__ import annotations

import os
import shutil
import socket
import sys
import tempfile
from pathlib import Path

_IS_WINDOWS = sys.platform == "win32"
# sun_path holds 108 bytes on Linux and 104 on macOS, with the terminating NUL.
_UNIX_PATH_MAX = 100
_SOCKET_NAME = "julia.sock"


class Rendezvous:
    """A listening socket for one Julia; ``address`` is what Julia's command line gets."""

    def __init__(self) -> None:
        self.directory: Path | None = None
        if _IS_WINDOWS or not hasattr(socket, "AF_UNIX"):
            self.socket = _loopback_listener()
            self.address = str(self.socket.getsockname()[1])
            return
        # A long TMPDIR (macOS: /var/folders/…/T/) must not make the path too long to bind.
        parent = tempfile.gettempdir()
        if len(os.fsencode(parent)) > _UNIX_PATH_MAX - 32:
            parent = "/tmp"
        self.directory = Path(tempfile.mkdtemp(prefix="jutul-jkernel-socket-", dir=parent))
        path = str(self.directory / _SOCKET_NAME)
        try:
            self.socket = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self.socket.bind(path)
                self.socket.listen(1)
            except OSError:
                self.socket.close()
                raise
        except OSError:
            shutil.rmtree(self.directory, ignore_errors=True)
            raise
        self.socket.setblocking(False)
        self.address = path

    @property
    def is_tcp(self) -> bool:
        return self.socket.family != getattr(socket, "AF_UNIX", None)

    def describe(self, peer: object) -> str:
        """Who connected, for a log line: a TCP peer's address, or the socket's path."""
        return str(peer) if self.is_tcp else self.address

    def close(self) -> None:
        """Stop listening: nothing can connect any more, and the directory is gone."""
        self.socket.close()
        self.remove_directory()

    def remove_directory(self) -> None:
        """Remove the socket's directory, still listening: for a kernel about to end while a
        handshake waits on this socket, which would close it only after the process is gone
        (a shutdown or SIGTERM while Julia starts left the directory behind)."""
        if self.directory is not None:
            shutil.rmtree(self.directory, ignore_errors=True)
            self.directory = None


def _loopback_listener() -> socket.socket:
    listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(1)
    except OSError:
        listener.close()
        raise
    listener.setblocking(False)
    return listener
