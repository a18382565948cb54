"""`mcp-oauth-gateway demo`: dev identity provider + provisioning + demo MCP server + gateway."""
