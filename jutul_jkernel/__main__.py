from typing import Any

from ipykernel.kernelapp import IPKernelApp

from .kernel import JuliaKernel

# No OutStream: this process prints nothing a user should see (Julia's output travels over the
# supervisor's socket), and flushing OutStreams costs two IOPub-thread round trips per cell.
# bench/probe_kernel.py starts the kernel with these same options.
APP_OPTIONS: dict[str, Any] = {"kernel_class": JuliaKernel, "outstream_class": None}

if __name__ == "__main__":
    IPKernelApp.launch_instance(**APP_OPTIONS)
