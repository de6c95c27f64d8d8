"""Benchmarks of "Julia (supervised)" against ipykernel and bare Julia: ``python -m bench``.

Every figure is a median (and a max where it matters) over repeated runs on a noisy 2-core
machine, and is reported as a ratio against a baseline measured in the same run: ipykernel's
own python3 kernel from this venv, or Julia without the kernel. Kernels are driven through
jupyter_client with messages collected by hand, from a private Jupyter prefix, so the user's own
kernelspecs and settings take no part. Nothing here edits the package or ``julia/server.jl``:
the start-up and round-trip breakdowns run an instrumented *copy* of the server from a temporary
directory (:mod:`bench.trace`), and the Python profiles attach py-spy to the kernel process.
"""
