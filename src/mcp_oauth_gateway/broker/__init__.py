"""Broker mode: the gateway fronts the identity provider as the MCP authorization server."""
