"""Who MCP clients see as their authorization server, as a type: the provider itself (`Facade`)
or the gateway (`Broker`). The resources, the control plane, the data plane and the provisioning
tools all name the mode by this type; the values are configuration's spelling, so the CRDs, the
reference docs and `/config` show the same words."""

from __future__ import annotations

from enum import StrEnum

# Facade mode hands clients the provider's own metadata, whose issuer is not the URL they
# discovered it at: only clients without the RFC 8414 §3.3 check sign in through it.
FACADE_CLIENTS = (
    "clients without the RFC 8414 issuer check (the TypeScript SDK 1.x); MCP Inspector, "
    "mcp-remote, FastMCP, Python mcp and the TypeScript client 2.x refuse it"
)


class AuthorizationServerMode(StrEnum):
    """`authorizationServerMode` of a policy's `mcp` block."""

    # Clients get the provider's own metadata (with the gateway's registration endpoint) and
    # sign in at the provider.
    FACADE = "Facade"
    # The gateway is the authorization server clients see, and signs users in at the provider.
    BROKER = "Broker"
