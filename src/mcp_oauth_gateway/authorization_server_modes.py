"""Who MCP clients see as their authorization server, as a type: the provider itself (`Facade`)
or the gateway (`Broker`). The resources, the control plane, the data plane and the provisioning
tools all name the mode by this type; the values are configuration's spelling, so the CRDs, the
reference docs and `/config` show the same words."""

from __future__ import annotations

from enum import StrEnum


class AuthorizationServerMode(StrEnum):
    """`authorizationServerMode` of a policy's `mcp` block."""

    # Clients get the provider's own metadata (with the gateway's registration endpoint) and
    # sign in at the provider.
    FACADE = "Facade"
    # The gateway is the authorization server clients see, and signs users in at the provider.
    BROKER = "Broker"
