"""Provider B (authentik): no Dynamic Client Registration, so the gateway answers it itself with
the pre-registered public client `mcp.clientId`. Registration is never forwarded."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

import orjson

from ..provider_kinds import ProviderKind
from .base import DiscoveryFacade, RegistrationResult

if TYPE_CHECKING:
    import aiohttp


class AuthentikAdapter(DiscoveryFacade):
    kind = ProviderKind.AUTHENTIK

    def __init__(self, client_id: str):
        self.client_id = client_id

    async def register(
        self,
        metadata: dict[str, object],
        raw_body: bytes,
        discovery: dict[str, object] | None,
        session: aiohttp.ClientSession | None,
    ) -> RegistrationResult:
        """RFC 7591 response naming the pre-registered public client."""
        response = {
            "client_id": self.client_id,
            "client_id_issued_at": int(time.time()),
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "redirect_uris": metadata.get("redirect_uris", []),
        }
        for field in ("client_name", "scope", "application_type"):
            if isinstance(metadata.get(field), str):
                response[field] = metadata[field]
        return RegistrationResult(201, orjson.dumps(response))
