"""Provider adapters: one small object per identity provider, chosen once per policy.

`access_tokens` (which verified JWTs are access tokens) is pure; the Keycloak adapter, which
forwards registration over the network, is imported only when a policy asks for it.
"""

from __future__ import annotations

from collections.abc import Callable

from ..provider_kinds import ProviderKind
from .access_tokens import AccessTokenRule, access_token_rule
from .authentik import AuthentikAdapter
from .base import ProviderAdapter, RegistrationError, RegistrationResult


def _authentik(client_id: str | None) -> ProviderAdapter | None:
    # Without its pre-registered client the policy is refused at load time.
    return AuthentikAdapter(client_id) if client_id else None


def _keycloak(client_id: str | None) -> ProviderAdapter | None:
    from .keycloak import KeycloakAdapter  # here: keeps aiohttp out of package imports

    return KeycloakAdapter()


ADAPTERS: dict[ProviderKind, Callable[[str | None], ProviderAdapter | None]] = {
    ProviderKind.KEYCLOAK: _keycloak,
    ProviderKind.AUTHENTIK: _authentik,
}


def adapter_for(kind: ProviderKind | None, client_id: str | None) -> ProviderAdapter | None:
    """The adapter of `mcp.provider`'s kind (None: no provider, no AS facade)."""
    return ADAPTERS[kind](client_id) if kind is not None else None


__all__ = [
    "AccessTokenRule",
    "ProviderAdapter",
    "RegistrationError",
    "RegistrationResult",
    "access_token_rule",
    "adapter_for",
]
