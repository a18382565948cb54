"""Provider A (Keycloak): it has DCR but no CORS on it, so registration is forwarded through the
gateway (which adds CORS) to the provider's own registration endpoint.

The forwarded request carries the client's metadata without its `scope`: Keycloak gives a client
registered with a `scope` exactly those as optional scopes and none of the realm's default
scopes, so the TypeScript SDK's `"scope": "openid profile"` left its tokens without the default
`mcp` scope's audience and groups (every call 401). Without it, the client gets the realm's
defaults, which is where `idp keycloak` puts what the gateway checks; the scopes a client asks
for at sign-in still reach it when they are default or optional scopes of the realm."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson

from ..controlplane.fetch import failure_text, read_at_most
from ..provider_kinds import ProviderKind
from ..urls import shown_url
from .base import DiscoveryFacade, RegistrationError, RegistrationResult

FORWARD_TIMEOUT = 15.0
MAX_RESPONSE = 256 * 1024


class KeycloakAdapter(DiscoveryFacade):
    kind = ProviderKind.KEYCLOAK

    async def register(
        self,
        metadata: dict[str, object],
        raw_body: bytes,
        discovery: dict[str, object] | None,
        session: aiohttp.ClientSession | None,
    ) -> RegistrationResult:
        """POST the client's metadata (without `scope`, see the module docstring) to the
        provider's registration endpoint and relay the answer."""
        target = (discovery or {}).get("registration_endpoint")
        if not isinstance(target, str) or session is None:
            raise RegistrationError(
                502,
                "server_error",
                "the provider's discovery document has no "
                "registration_endpoint to forward registration to",
            )
        try:
            async with asyncio.timeout(FORWARD_TIMEOUT):
                async with session.post(
                    target,
                    data=forwarded_registration(metadata),
                    allow_redirects=False,
                    headers={"Content-Type": "application/json", "Accept": "application/json"},
                ) as response:
                    body = await read_at_most(response.content, MAX_RESPONSE)
                    if len(body) > MAX_RESPONSE:
                        raise RegistrationError(
                            502,
                            "server_error",
                            f"the provider's registration answer is larger "
                            f"than {MAX_RESPONSE} bytes",
                        )
                    content_type = response.headers.get("Content-Type", "application/json")
                    return RegistrationResult(response.status, body, content_type.encode())
        except TimeoutError as exc:
            raise RegistrationError(
                504,
                "server_error",
                f"the provider's registration endpoint {shown_url(target)} did not "
                f"answer within {FORWARD_TIMEOUT:g}s",
            ) from exc
        except aiohttp.ClientError as exc:
            raise RegistrationError(
                502,
                "server_error",
                f"the provider's registration endpoint {shown_url(target)} is unreachable: "
                f"{failure_text(exc)}",
            ) from exc


def forwarded_registration(metadata: dict[str, object]) -> bytes:
    """The registration body sent to Keycloak: the validated metadata without `scope`."""
    return orjson.dumps({name: value for name, value in metadata.items() if name != "scope"})
