"""``engram mcp``: Engram as an MCP server over stdio (``server``), on the official ``mcp`` SDK."""
