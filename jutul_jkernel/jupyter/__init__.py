"""The Jupyter front: "Julia (supervised)", an ipykernel kernel that maps Jupyter messages onto
the supervisor (:mod:`jutul_jkernel.supervisor`) and publishes what Julia sends on IOPub.

Nothing here is imported before ipykernel is: ``python -m jutul_jkernel`` launches Julia first
(:mod:`jutul_jkernel.supervisor.from_env`), then imports :mod:`~jutul_jkernel.jupyter.kernel`.
"""
