"""`python -m jutul_jkernel.install`: the installer, :mod:`jutul_jkernel.tools.install`."""

from jutul_jkernel.tools.install import main

if __name__ == "__main__":
    raise SystemExit(main())
