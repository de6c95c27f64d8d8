from ipykernel.kernelapp import IPKernelApp

from .kernel import JuliaKernel

IPKernelApp.launch_instance(kernel_class=JuliaKernel)
