"""Set-up and checks around a kernel: the kernelspec installer (``jutul-jkernel-install``), the
doctor (``jutul-jkernel-doctor``), and running a Julia once to check it and compile JKernel.
"""
