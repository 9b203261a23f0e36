"""prefcall: personalised tool selection for MCP hosts, powered by a local GGUF model."""

__version__ = "0.1.0"
