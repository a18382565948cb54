"""mcp-oauth-gateway: protects MCP servers with OAuth 2.0 (JWT validation, CEL authorization,
MCP OAuth discovery endpoints) in front of a streaming reverse proxy."""

__version__ = "0.1.0"
