"""Provider adapters: one small object per identity provider, chosen once per policy."""

from __future__ import annotations

from .authentik import AuthentikAdapter
from .base import ProviderAdapter, RegistrationError, RegistrationResult
from .keycloak import KeycloakAdapter


def adapter_for(provider: str | None, client_id: str | None) -> ProviderAdapter | None:
    """The adapter for a validated `mcp.provider` value (None: no provider, no AS facade)."""
    if provider == "ProviderB" and client_id:
        return AuthentikAdapter(client_id)
    if provider == "Keycloak":
        return KeycloakAdapter()
    return None


__all__ = ["ProviderAdapter", "RegistrationError", "RegistrationResult", "adapter_for"]
