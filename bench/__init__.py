"""Benchmarks of "Julia (supervised)" against ipykernel and bare Julia: ``python -m bench``.

Every figure is a median (or a p90 or max where it says so) over repeated runs on a noisy
2-core machine, and is reported as a ratio against a baseline measured in the same run:
ipykernel's own python3 kernel from this venv, or Julia without the kernel. Kernels are driven
through jupyter_client with messages collected by hand, from a private Jupyter prefix, so the
user's own kernelspecs and settings take no part. What is measured, and which rows the table
shows, is data at the top of :mod:`bench.cases`. Nothing here edits the package.
"""
