from ipykernel.kernelapp import IPKernelApp

from .kernel import JuliaKernel

# No OutStream: this process prints nothing a user should see (Julia's output travels over the
# supervisor's socket), and flushing OutStreams costs two IOPub-thread round trips per cell.
IPKernelApp.launch_instance(kernel_class=JuliaKernel, outstream_class=None)
