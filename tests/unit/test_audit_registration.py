"""A client registration's audit line names the client registered: its id (the provider's
answer for Keycloak, the preregistered client for provider B) and the name and redirect URIs
it asked for."""

from __future__ import annotations

import orjson
import pytest

from mcp_oauth_gateway import audit
from mcp_oauth_gateway.asgi import AUDIT_KEY
from mcp_oauth_gateway.controlplane.snapshot import CompiledProvider, KeysetSource
from mcp_oauth_gateway.dataplane.oauth_endpoints import OAuthEndpoints
from mcp_oauth_gateway.provider_kinds import ProviderKind
from mcp_oauth_gateway.providers import RegistrationResult, adapter_for
from mcp_oauth_gateway.providers.base import DiscoveryFacade
from unit.stages.harness import Inner, drive
from unit.tokens_support import ISSUER, compiled_mcp

REGISTRATION = "/.well-known/oauth-authorization-server/mcp/client-registration"
REGISTER = orjson.dumps(
    {"redirect_uris": ["http://127.0.0.1:33418/callback"], "client_name": "Inspector"}
)
PROVIDER = CompiledProvider(
    ISSUER,
    frozenset({"mcp-public"}),
    KeysetSource("inline", 0.0),
    "http://idp/.well-known/openid-configuration",
)


class Discovery:
    async def get(self) -> dict[str, object]:
        return {"issuer": ISSUER, "registration_endpoint": "http://idp/register"}


class Keycloak(DiscoveryFacade):
    """Registration at a Keycloak-kind provider, answered without a network."""

    kind = ProviderKind.KEYCLOAK

    async def register(
        self, metadata: object, raw_body: bytes, discovery: object, session: object
    ) -> RegistrationResult:
        return RegistrationResult(201, b'{"client_id": "dyn-1"}', b"application/json")


@pytest.mark.parametrize(
    ("provider", "client_id"), [("Keycloak", "dyn-1"), ("ProviderB", "mcp-public")]
)
async def test_a_registration_line_names_the_client_registered(provider, client_id):
    mcp = compiled_mcp(provider)
    adapter = Keycloak() if provider == "Keycloak" else adapter_for(mcp.provider, mcp.client_id)
    stage = OAuthEndpoints(
        Inner(),
        mcp,
        (PROVIDER,),
        adapter,  # type: ignore[arg-type]
        Discovery(),  # type: ignore[arg-type]
        lambda: None,
    )
    record = audit.AuditRecord()
    response = await drive(stage, "POST", REGISTRATION, body=REGISTER, scope={AUDIT_KEY: record})
    assert response.status == 201
    assert (record.event, record.client_id) == ("client-registered", client_id)
    assert record.reason == (
        "registered client 'Inspector' with redirect URIs http://127.0.0.1:33418/callback"
    )
