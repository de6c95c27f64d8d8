"""`python -m jutul_jkernel.mcp`: the MCP server, :mod:`jutul_jkernel.agents.mcp`."""

from jutul_jkernel.agents.mcp import main

if __name__ == "__main__":
    raise SystemExit(main())
