"""Provider adapters: one small object per identity provider, chosen once per policy.

`access_tokens` (which verified JWTs are access tokens) is pure; the Keycloak adapter, which
forwards registration over the network, is imported only when a policy asks for it.
"""

from __future__ import annotations

from .access_tokens import AccessTokenRule, access_token_rule
from .authentik import AuthentikAdapter
from .base import ProviderAdapter, RegistrationError, RegistrationResult


def adapter_for(provider: str | None, client_id: str | None) -> ProviderAdapter | None:
    """The adapter for a validated `mcp.provider` value (None: no provider, no AS facade)."""
    if provider == "ProviderB" and client_id:
        return AuthentikAdapter(client_id)
    if provider == "Keycloak":
        from .keycloak import KeycloakAdapter  # here: keeps aiohttp out of package imports

        return KeycloakAdapter()
    return None


__all__ = [
    "AccessTokenRule",
    "ProviderAdapter",
    "RegistrationError",
    "RegistrationResult",
    "access_token_rule",
    "adapter_for",
]
