"""`idp keycloak` against real Keycloak, each admin exchange checked against Keycloak's official
admin REST OpenAPI document (marked `contracts`: run by `make test-contracts`).

The unit contract test checks the calls the tool sends to the dev IdP; this one checks the
calls it sends to Keycloak itself and the answers Keycloak really gives, for a realm the tool
creates, in Broker mode with token exchange, twice (creating, then finding everything)."""

from __future__ import annotations

import io

import httpx
import pytest

from contracts import KEYCLOAK, Recorder, require, validate
from keycloak_support import USER_PASSWORD, RealKeycloak
from mcp_oauth_gateway.authorization_server_modes import AuthorizationServerMode
from mcp_oauth_gateway.idp import keycloak
from mcp_oauth_gateway.idp.exchange import ExchangeOptions
from mcp_oauth_gateway.idp.steps import Progress


@pytest.mark.contracts
def test_every_admin_exchange_with_real_keycloak_follows_the_contract(
    real_keycloak: RealKeycloak, tmp_path
):
    require(KEYCLOAK)
    recorder = Recorder()
    options = keycloak.KeycloakOptions(
        url=real_keycloak.url,
        admin_user="admin",
        admin_password=real_keycloak.admin_password,
        resource="http://127.0.0.1:9/mcp",
        users=[("alice", "alice@example.com")],
        user_password=USER_PASSWORD,
        allow_anonymous_dcr=True,
        mode=AuthorizationServerMode.BROKER,
        realm="contract",
        exchange=ExchangeOptions("gateway-exchange", "mcp-backend", tmp_path / "secret"),
    )
    with httpx.Client(event_hooks=recorder.hooks(), timeout=60) as http:
        for _ in range(2):
            progress = Progress("keycloak", len(keycloak.STEPS), io.StringIO())
            keycloak.provision(options, http, progress)
    admin = [(q, r) for q, r in recorder.exchanges if q.url.path.startswith("/admin/")]
    called = {(q.method, q.url.path) for q, _ in admin}
    # The realm was created, then found by the second run.
    assert ("POST", "/admin/realms") in called
    assert ("GET", "/admin/realms/contract") in called
    assert len(admin) >= 30
    assert [p for q, r in admin for p in validate(str(KEYCLOAK), q, r)] == []
