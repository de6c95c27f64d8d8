"""`python -m jutul_jkernel.doctor`: the doctor, :mod:`jutul_jkernel.tools.doctor`."""

from jutul_jkernel.tools.doctor import main

if __name__ == "__main__":
    raise SystemExit(main())
