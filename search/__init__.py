"""Search, its service layer and its front ends (the CLI, the MCP server)."""

__version__ = "0.1.0"  # the package's version (pyproject.toml reads it from here)
