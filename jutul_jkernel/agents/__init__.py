"""The fronts for agents: ``jutul-jkernel-agent`` (lines over stdin and stdout,
:mod:`~jutul_jkernel.agents.agent`) and ``jutul-jkernel-mcp`` (the Model Context Protocol,
:mod:`~jutul_jkernel.agents.mcp`, with its sessions and calls in
:mod:`~jutul_jkernel.agents.mcp_sessions`). Both drive the supervisor and import nothing of
Jupyter.
"""
