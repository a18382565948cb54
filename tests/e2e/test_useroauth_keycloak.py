"""The gateway as a confidential OAuth client of real Keycloak (`useroauth`): discovery of a
realm's issuer, the client secret sent by HTTP Basic as the realm's metadata allows (and in the
form when that is all a server lists), a wrong secret refused as such (neither a lost grant nor
a passing failure), refresh, and a revoked refresh token answered `invalid_grant`."""

from __future__ import annotations

import dataclasses
import secrets

import pytest

from keycloak_support import USER_PASSWORD, RealKeycloak
from mcp_oauth_gateway import pkce
from mcp_oauth_gateway.useroauth.discovery import discover
from mcp_oauth_gateway.useroauth.metadata import AuthServer
from mcp_oauth_gateway.useroauth.oauth_client import (
    TokenAnswer,
    UpstreamOAuthError,
    authorization_url,
    check_iss,
    exchange_code,
    refresh,
    revoke,
)
from support import unverified_claims
from useroauth_support import REDIRECT, new_session, user_signs_in

REALM = "useroauth"
CLIENT = "gateway-upstream"
SECRET = "s3cret:with/odd+chars é"  # form-urlencoded before Basic (RFC 6749 §2.3.1)
USER = "carol"


@pytest.fixture(scope="module")
def keycloak(real_keycloak: RealKeycloak) -> RealKeycloak:
    """A realm of its own with a confidential client and a user."""
    if REALM not in real_keycloak.realms:
        real_keycloak.new_realm(REALM)
        created = real_keycloak.admin(
            "POST",
            "/clients",
            REALM,
            json={
                "clientId": CLIENT,
                "publicClient": False,
                "clientAuthenticatorType": "client-secret",
                "secret": SECRET,
                "standardFlowEnabled": True,
                "redirectUris": [REDIRECT],
                "attributes": {"pkce.code.challenge.method": "S256"},
            },
        )
        assert created.status_code == 201, created.text
        real_keycloak.add_user(USER, REALM)
    return real_keycloak


async def discovered(keycloak: RealKeycloak) -> AuthServer:
    async with new_session() as session:
        return await discover(
            session, "http://127.0.0.1:9/unused", issuer=keycloak.issuer(REALM), explicit=None
        )


async def connected(server: AuthServer, secret: str = SECRET) -> TokenAnswer:
    verifier, state = pkce.new_verifier(), secrets.token_urlsafe(16)
    url = authorization_url(server, CLIENT, REDIRECT, state, pkce.s256(verifier), ["openid"], None)
    back = await user_signs_in(url, USER, USER_PASSWORD)
    assert back.get("state") == state, back
    check_iss(server, back.get("iss"))
    async with new_session() as session:
        return await exchange_code(
            session, server, CLIENT, secret, back["code"], REDIRECT, verifier, None
        )


async def test_a_realm_is_discovered_by_its_issuer(keycloak):
    server = await discovered(keycloak)
    issuer = keycloak.issuer(REALM)
    assert server.issuer == issuer
    assert server.token_endpoint == f"{issuer}/protocol/openid-connect/token"
    assert server.revocation_endpoint == f"{issuer}/protocol/openid-connect/revoke"
    assert server.iss_parameter_supported is True
    assert "client_secret_basic" in server.token_endpoint_auth_methods


async def test_basic_then_refresh_then_revocation(keycloak):
    server = await discovered(keycloak)
    answer = await connected(server)
    assert unverified_claims(answer.access_token)["azp"] == CLIENT
    assert answer.refresh_token is not None
    async with new_session() as session:
        again = await refresh(session, server, CLIENT, SECRET, answer.refresh_token, None, None)
        assert unverified_claims(again.access_token)["preferred_username"] == USER
        kept = again.refresh_token or answer.refresh_token  # no rotation: keep the old one
        assert await revoke(session, server, CLIENT, SECRET, kept, "refresh_token")
        with pytest.raises(UpstreamOAuthError) as refused:
            await refresh(session, server, CLIENT, SECRET, kept, None, None)
    assert refused.value.invalid_grant
    assert not refused.value.temporary


async def test_the_secret_in_the_form_where_only_that_is_listed(keycloak):
    server = dataclasses.replace(
        await discovered(keycloak), token_endpoint_auth_methods=("client_secret_post",)
    )
    answer = await connected(server)
    assert unverified_claims(answer.access_token)["azp"] == CLIENT


async def test_a_wrong_secret_is_invalid_client_and_never_shown(keycloak):
    server = await discovered(keycloak)
    with pytest.raises(UpstreamOAuthError) as refused:
        await connected(server, secret="not-the-secret")
    # Keycloak's word for a bad secret (RFC 6749 would say invalid_client): not the grant's
    # fault, not temporary, so the gateway asks no user again and says the secret is wrong.
    assert (refused.value.error, refused.value.status) == ("unauthorized_client", 401)
    assert not refused.value.invalid_grant
    assert not refused.value.temporary
    assert "not-the-secret" not in str(refused.value)
