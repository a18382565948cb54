"""The gateway as a user's OAuth client at a third-party MCP server's own authorization server
(`useroauth.discovery`, `useroauth.oauth_client`), against real servers: a real MCP server that
enforces OAuth itself (the `mcp` SDK's bearer middleware and RFC 9728 metadata,
tests/peers/mcp_backend_auth.py) and the npm `oidc-provider` as its authorization server.

Discovery follows the backend's 401 to its metadata and its issuer's; a user signs in on the
provider's pages; the code is redeemed (PKCE, RFC 8707 resource) for a token the backend itself
accepts; refresh rotates; a reused, rotated-away or revoked refresh token is `invalid_grant`."""

from __future__ import annotations

import dataclasses
import secrets
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from joserfc.jwk import RSAKey

from exchange_support import call_whoami
from mcp_oauth_gateway import pkce
from mcp_oauth_gateway.useroauth.discovery import DiscoveryError, discover, resource_metadata_url
from mcp_oauth_gateway.useroauth.metadata import AuthServer, Endpoints
from mcp_oauth_gateway.useroauth.oauth_client import (
    IssuerMismatch,
    TokenAnswer,
    UpstreamOAuthError,
    authorization_url,
    check_iss,
    exchange_code,
    refresh,
    revoke,
)
from support import free_port, mcp_headers, unverified_claims
from useroauth_support import (
    CLIENT_ID,
    REDIRECT,
    Upstream,
    guarded_backend,
    new_session,
    oidc_provider,
    user_signs_in,
)

SCOPES = ["openid", "offline_access"]
PING = {"jsonrpc": "2.0", "id": 1, "method": "ping"}


@pytest.fixture(scope="module")
def upstream(logs: Path, idp_key: tuple[RSAKey, Path]) -> Iterator[Upstream]:
    with guarded_backend(logs, idp_key[1]) as started:
        yield started


@pytest.fixture(scope="module")
def slash_issuer(logs: Path, idp_key: tuple[RSAKey, Path]) -> Iterator[Upstream]:
    """An issuer with a path that ends in a slash (authentik's layout)."""
    with oidc_provider(
        logs, idp_key[1], "authentik", "http://127.0.0.1/mcp", "useroauth-idp-slash"
    ) as started:
        yield started


async def discovered(upstream: Upstream) -> AuthServer:
    assert upstream.backend is not None
    async with new_session() as session:
        return await discover(session, upstream.backend, issuer=None, explicit=None)


async def connected(server: AuthServer, resource: str | None) -> TokenAnswer:
    """A user's whole connection: sign-in at the upstream, the response checked, the code
    redeemed."""
    verifier, state = pkce.new_verifier(), secrets.token_urlsafe(16)
    url = authorization_url(
        server, CLIENT_ID, REDIRECT, state, pkce.s256(verifier), SCOPES, resource
    )
    back = await user_signs_in(url)
    assert back.get("state") == state, back
    check_iss(server, back.get("iss"))
    async with new_session() as session:
        return await exchange_code(
            session, server, CLIENT_ID, None, back["code"], REDIRECT, verifier, resource
        )


async def test_discovery_follows_the_backends_401_to_its_authorization_server(upstream):
    challenge = httpx.post(upstream.backend, json=PING, headers=mcp_headers())
    assert challenge.status_code == 401
    prm = f"{upstream.backend_base}/.well-known/oauth-protected-resource/mcp"
    # The SDK's challenge names its metadata: the one URL the gateway then reads.
    assert resource_metadata_url(challenge.headers["www-authenticate"], upstream.backend) == [prm]
    config = httpx.get(f"{upstream.issuer}/.well-known/openid-configuration").json()
    server = await discovered(upstream)
    assert server.issuer == upstream.issuer
    assert server.authorization_endpoint == config["authorization_endpoint"]
    assert server.token_endpoint == config["token_endpoint"]
    assert server.revocation_endpoint == config["revocation_endpoint"]
    assert server.iss_parameter_supported is True
    assert "S256" in server.code_challenge_methods
    assert server.resource == upstream.backend


async def test_a_backend_path_without_metadata_fails_naming_every_url_tried(upstream):
    other = f"{upstream.backend_base}/other"
    async with new_session() as session:
        with pytest.raises(DiscoveryError) as failed:
            await discover(session, other, issuer=None, explicit=None)
    message = str(failed.value)
    assert message.startswith("step 2 (protected resource metadata, RFC 9728)")
    assert (
        f"{upstream.backend_base}/.well-known/oauth-protected-resource/other: HTTP 404" in message
    )
    assert f"{upstream.backend_base}/.well-known/oauth-protected-resource: HTTP 404" in message
    assert "set userOAuth.issuer" in message


async def test_the_users_token_is_one_the_backend_accepts_as_theirs(upstream):
    server = await discovered(upstream)
    answer = await connected(server, server.resource)
    assert answer.token_type == "Bearer"
    assert answer.refresh_token is not None
    claims = unverified_claims(answer.access_token)
    assert claims["aud"] == upstream.backend
    seen = await call_whoami(upstream.backend_base, answer.access_token)
    assert seen["sub"] == "alice"
    refused = httpx.post(upstream.backend, json={}, headers=mcp_headers("not-a-token"))
    assert refused.status_code == 401


async def test_a_response_from_another_issuer_is_refused(upstream):
    server = await discovered(upstream)
    verifier = pkce.new_verifier()
    url = authorization_url(
        server, CLIENT_ID, REDIRECT, "s", pkce.s256(verifier), SCOPES, server.resource
    )
    back = await user_signs_in(url)
    assert back["iss"] == upstream.issuer  # the real server sends it (RFC 9207)
    with pytest.raises(IssuerMismatch):
        check_iss(server, upstream.issuer + "/")
    with pytest.raises(IssuerMismatch):
        check_iss(server, None)


async def test_refresh_rotates_and_the_old_refresh_token_is_then_invalid_grant(upstream):
    server = await discovered(upstream)
    first = await connected(server, server.resource)
    assert first.refresh_token is not None
    async with new_session() as session:
        second = await refresh(
            session, server, CLIENT_ID, None, first.refresh_token, server.resource, None
        )
        assert second.access_token != first.access_token
        assert second.refresh_token not in (None, first.refresh_token)
        seen = await call_whoami(upstream.backend_base, second.access_token)
        assert seen["sub"] == "alice"
        with pytest.raises(UpstreamOAuthError) as reused:
            await refresh(
                session, server, CLIENT_ID, None, first.refresh_token, server.resource, None
            )
    assert reused.value.invalid_grant
    assert reused.value.status == 400
    assert not reused.value.temporary


async def test_a_revoked_refresh_token_is_invalid_grant(upstream):
    server = await discovered(upstream)
    answer = await connected(server, server.resource)
    assert answer.refresh_token is not None
    async with new_session() as session:
        assert await revoke(session, server, CLIENT_ID, None, answer.refresh_token, "refresh_token")
        with pytest.raises(UpstreamOAuthError) as refused:
            await refresh(
                session, server, CLIENT_ID, None, answer.refresh_token, server.resource, None
            )
    assert refused.value.invalid_grant
    assert answer.refresh_token not in str(refused.value)


async def test_a_wrong_verifier_is_refused_and_says_why(upstream):
    server = await discovered(upstream)
    verifier = pkce.new_verifier()
    url = authorization_url(
        server, CLIENT_ID, REDIRECT, "s", pkce.s256(verifier), SCOPES, server.resource
    )
    back = await user_signs_in(url)
    async with new_session() as session:
        with pytest.raises(UpstreamOAuthError) as refused:
            await exchange_code(
                session,
                server,
                CLIENT_ID,
                None,
                back["code"],
                REDIRECT,
                pkce.new_verifier(),
                server.resource,
            )
    assert refused.value.invalid_grant
    assert back["code"] not in str(refused.value)


async def test_an_unreachable_token_endpoint_is_temporary(upstream):
    server = await discovered(upstream)
    gone = f"http://127.0.0.1:{free_port()}/token"  # nothing listens there
    async with new_session() as session:
        with pytest.raises(UpstreamOAuthError) as failed:
            await refresh(
                session,
                dataclasses.replace(server, token_endpoint=gone),
                CLIENT_ID,
                None,
                "rt",
                None,
                None,
            )
    assert failed.value.temporary
    assert failed.value.status is None
    assert failed.value.error == "temporarily_unavailable"


async def test_discovery_by_a_configured_issuer_with_a_trailing_slash(slash_issuer):
    async with new_session() as session:
        server = await discover(
            session, "http://127.0.0.1:9/unused", issuer=slash_issuer.issuer, explicit=None
        )
    assert server.issuer == slash_issuer.issuer
    assert server.token_endpoint == f"{slash_issuer.issuer}token/"
    assert server.resource is None
    answer = await connected(server, None)
    assert unverified_claims(answer.access_token)["aud"] == CLIENT_ID


async def test_an_issuer_the_metadata_does_not_name_is_refused(slash_issuer):
    """Without its trailing slash the issuer's metadata URLs are the same, but the document
    names the issuer with it: RFC 8414 §3.3 says not to use it."""
    wrong = slash_issuer.issuer.rstrip("/")
    async with new_session() as session:
        with pytest.raises(DiscoveryError) as refused:
            await discover(session, "http://127.0.0.1:9/unused", issuer=wrong, explicit=None)
    message = str(refused.value)
    assert message.startswith("step 3 (authorization server metadata")
    assert f"its `issuer` is {slash_issuer.issuer!r}, not {wrong!r}" in message
    assert f"GET {wrong}/.well-known/openid-configuration" in message
    assert "userOAuth.issuer" in message


async def test_explicit_endpoints_need_no_discovery(slash_issuer):
    """As for GitHub: no metadata, the endpoints named; no request before the user's."""
    explicit = Endpoints(
        f"{slash_issuer.issuer}authorize/",
        f"{slash_issuer.issuer}token/",
        f"{slash_issuer.issuer}revoke/",
    )
    async with new_session() as session:
        server = await discover(
            session, "http://127.0.0.1:9/unused", issuer=None, explicit=explicit
        )
        assert server.issuer is None
        answer = await connected(server, None)
        assert answer.refresh_token is not None
        assert await revoke(session, server, CLIENT_ID, None, answer.refresh_token, None)
        with pytest.raises(UpstreamOAuthError) as refused:
            await refresh(session, server, CLIENT_ID, None, answer.refresh_token, None, None)
    assert refused.value.invalid_grant
