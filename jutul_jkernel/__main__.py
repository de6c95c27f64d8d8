"""``python -m jutul_jkernel -f CONNECTION_FILE``: the kernel, as kernel.json starts it.

Julia is spawned first (supervisor/early_launch.py), before the supervisor and ipykernel are
imported: those imports and the app's set-up take a few tenths of a second, during which Julia
boots on the other core. The supervisor, made next, adopts that Julia, and the kernel's start
connects to it. After a shutdown the process ends without Python's finalisation (see
``_exit_now``).
"""

from __future__ import annotations

import atexit
import contextlib
import faulthandler
import os
import signal
import sys
import threading

from jutul_jkernel.supervisor.early_launch import launch_from_env  # light: see its docstring

# typing.TYPE_CHECKING without importing typing before Julia is spawned (mypy takes it as true)
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


def main() -> None:
    # `kill -USR1 <kernel pid>`: every Python thread's stack on stderr (the Jupyter server's
    # log), for a kernel that seems hung (docs/troubleshooting.md); the test of JupyterLab asks
    # for it when a step times out. faulthandler is built in, and writes from the signal handler
    # itself, so a main loop that never returns still gets reported; then, chained, the main
    # loop's tasks and what each awaits (an idle main thread says only that it waits).
    signal.signal(signal.SIGUSR1, _print_main_loop_tasks)
    faulthandler.register(signal.SIGUSR1, all_threads=True, chain=True)
    early = launch_from_env()
    if early is not None:
        # Should ipykernel fail to import or to set up (or print --help and exit), or a SIGTERM
        # come before the kernel's own handler is in place, Julia goes too.
        atexit.register(early.kill_now)
        _end_with(early.kill_now)

    from jutul_jkernel.supervisor.from_env import supervisor_from_env

    supervisor = supervisor_from_env()
    if early is not None:
        supervisor.adopt_early_launch(early)  # the supervisor's now: its kill_now ends it
        atexit.unregister(early.kill_now)
        _end_with(supervisor.kill_now)
    atexit.register(supervisor.kill_now)

    from jutul_jkernel.jupyter.app import JuliaKernelApp
    from jutul_jkernel.jupyter.kernel import JuliaKernel

    JuliaKernel.prepared_supervisor = supervisor
    JuliaKernelApp.launch_instance(**app_options())
    _exit_now()


def _print_main_loop_tasks(signum: int, frame: Any) -> None:
    """SIGUSR1, after faulthandler's stacks: every task of the main thread's asyncio loop,
    with the coroutines it awaits through, on stderr. Runs between two bytecodes of the main
    thread, so a loop that waits in select still answers at once."""
    asyncio = sys.modules.get("asyncio")
    if asyncio is None:
        return
    try:
        loop = asyncio.get_running_loop()
    except RuntimeError:  # the loop is not running (yet, or any more)
        return
    tasks = asyncio.all_tasks(loop)
    lines = [f"[jutul-jkernel] the main loop's {len(tasks)} tasks, each down to what it awaits:"]
    for task in tasks:
        lines.append(f"  {task.get_name()}:")
        # Task.print_stack shows a coroutine's own frame only; the awaits go through cr_await.
        awaited: Any = task.get_coro()
        while hasattr(awaited, "cr_frame") or hasattr(awaited, "gi_frame"):
            frame = getattr(awaited, "cr_frame", None) or getattr(awaited, "gi_frame", None)
            if frame is not None:
                code = frame.f_code
                lines.append(f"    {code.co_filename}:{frame.f_lineno} {code.co_name}")
            awaited = getattr(awaited, "cr_await", None) or getattr(awaited, "gi_yieldfrom", None)
        if awaited is not None:
            lines.append(f"    awaits {awaited!r}"[:300])
    lines.extend(_shell_socket_state())
    print("\n".join(lines), file=sys.stderr, flush=True)


def _shell_socket_state() -> list[str]:
    """Whether requests wait unread in the shell socket (its EVENTS has POLLIN): a stream that
    stopped reading, rather than a request that never came. Reading EVENTS takes the socket's
    commands in, so the stream is then told to look again (jupyter/sockets.py, "Sends past a
    stream"): the report must not make the stall it reports."""
    app_module = sys.modules.get("jutul_jkernel.jupyter.app")
    sockets = sys.modules.get("jutul_jkernel.jupyter.sockets")
    zmq = sys.modules.get("zmq")
    if app_module is None or sockets is None or zmq is None:
        return []
    if not app_module.JuliaKernelApp.initialized():
        return []
    kernel = app_module.JuliaKernelApp.instance().kernel
    stream = getattr(kernel, "shell_stream", None)
    if stream is None or stream.socket is None:
        return []
    events = stream.socket.getsockopt(zmq.EVENTS)
    sockets.look_again(stream)
    return [
        f"[jutul-jkernel] shell socket: requests waiting unread: {bool(events & zmq.POLLIN)}, "
        f"stream receiving: {stream.receiving()}"
    ]


def app_options() -> dict[str, Any]:
    """The IPKernelApp options of this kernel (the bench's late-launch kernelspec uses them too)."""
    from jutul_jkernel.jupyter.kernel import JuliaKernel

    # No OutStream: this process prints nothing a user should see (Julia's output travels
    # over the supervisor's socket), and flushing OutStreams costs two IOPub-thread round
    # trips per cell.
    return {"kernel_class": JuliaKernel, "outstream_class": None}


def _end_with(kill: Callable[[], None]) -> None:
    """Until the kernel installs its own SIGTERM handler: on SIGTERM, ``kill()`` Julia, then die
    by SIGTERM as before (Python's default runs no atexit)."""

    def on_sigterm(signum: int, frame: object) -> None:
        kill()
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        os.kill(os.getpid(), signal.SIGTERM)

    signal.signal(signal.SIGTERM, on_sigterm)


def _exit_now() -> None:
    """End the process once the app has shut down: the exit functions, then ``os._exit``.

    Python's finalisation after them (clearing every module of ipykernel, zmq, tornado and
    the rest, and the garbage they hold) took 0.15-0.25 s of each restart on a loaded machine
    with nothing left to do: Julia is stopped and reaped, and the exit functions, run here,
    close the app's sockets and terminate zmq's context (which sends what was queued), remove
    the connection file and flush the logs. A thread Python would wait for (a worker that
    stops a cell's child processes, say) means the ordinary exit.
    """
    if any(
        t.is_alive() and not t.daemon
        for t in threading.enumerate()
        if t is not threading.main_thread()
    ):
        return
    atexit._run_exitfuncs()
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError, AttributeError):  # closed, or None
            stream.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
