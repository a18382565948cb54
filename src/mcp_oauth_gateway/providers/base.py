"""What a provider adapter answers: how to build AS metadata and how to handle registration."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from ..provider_kinds import ProviderKind

if TYPE_CHECKING:  # annotations only: the package stays importable without network code
    import aiohttp


@dataclass(frozen=True, slots=True)
class RegistrationResult:
    status: int
    body: bytes
    content_type: bytes = b"application/json"


class RegistrationError(Exception):
    """Registration cannot be completed; carries an RFC 7591 error code and a description."""

    def __init__(self, status: int, error: str, description: str):
        super().__init__(description)
        self.status = status
        self.error = error
        self.description = description


class ProviderAdapter(Protocol):
    kind: ProviderKind

    def authorization_server_metadata(
        self, discovery: dict[str, object], registration_endpoint: str
    ) -> dict[str, object]:
        """The AS metadata document served to MCP clients."""
        ...

    async def register(
        self,
        metadata: dict[str, object],
        raw_body: bytes,
        discovery: dict[str, object] | None,
        session: aiohttp.ClientSession | None,
    ) -> RegistrationResult:
        """Answer a validated registration request."""
        ...


class DiscoveryFacade:
    """AS metadata = the provider's discovery document with the gateway's registration endpoint
    (injected when the provider has none, replaced when it has one) and S256 PKCE advertised."""

    def authorization_server_metadata(
        self, discovery: dict[str, object], registration_endpoint: str
    ) -> dict[str, object]:
        """The AS metadata document served to MCP clients."""
        out = dict(discovery)
        out["registration_endpoint"] = registration_endpoint
        out.setdefault("code_challenge_methods_supported", ["S256"])
        return out
