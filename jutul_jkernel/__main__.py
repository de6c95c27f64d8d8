"""``python -m jutul_jkernel -f CONNECTION_FILE``: the kernel, as kernel.json starts it.

Julia is launched before ipykernel is imported: those imports and the app's set-up take a few
tenths of a second, during which Julia boots on the other core. The supervisor module imports
nothing of Jupyter, so launching costs only its own import (asyncio, mostly, which ipykernel
would import anyway).
"""

from __future__ import annotations

import atexit
from typing import Any

from jutul_jkernel.supervisor.from_env import (
    supervisor_from_env,  # imports nothing of Jupyter, nor Xvfb
)


def main() -> None:
    supervisor = supervisor_from_env()
    supervisor.launch()
    # Should ipykernel fail to import or to set up (or print --help and exit), Julia goes too.
    atexit.register(supervisor.kill_now)

    from jutul_jkernel.jupyter.app import JuliaKernelApp
    from jutul_jkernel.jupyter.kernel import JuliaKernel

    JuliaKernel.prepared_supervisor = supervisor
    JuliaKernelApp.launch_instance(**app_options())


def app_options() -> dict[str, Any]:
    """The IPKernelApp options of this kernel (the bench's late-launch kernelspec uses them too)."""
    from jutul_jkernel.jupyter.kernel import JuliaKernel

    # No OutStream: this process prints nothing a user should see (Julia's output travels
    # over the supervisor's socket), and flushing OutStreams costs two IOPub-thread round
    # trips per cell.
    return {"kernel_class": JuliaKernel, "outstream_class": None}


if __name__ == "__main__":
    main()
