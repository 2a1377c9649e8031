"""ragstep as an MCP server: its search and answers as tools for agents (``ragstep mcp`` over stdio, ``/mcp`` over
Streamable HTTP). :mod:`~ragstep.entry.mcp.tools` holds the tools, :mod:`~ragstep.entry.mcp.server` puts them on the
MCP SDK, :mod:`~ragstep.entry.mcp.http` and :mod:`ragstep.entry.cli.mcp` are the two transports."""
