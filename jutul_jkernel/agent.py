"""`python -m jutul_jkernel.agent`: the agent front, :mod:`jutul_jkernel.agents.agent`."""

from jutul_jkernel.agents.agent import main

if __name__ == "__main__":
    raise SystemExit(main())
