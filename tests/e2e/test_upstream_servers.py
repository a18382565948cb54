"""The third-party MCP servers and authorization servers that the tests of users' own sign-in
(`userOAuth`) put behind the gateway are real and enforce their own OAuth, without the gateway:
401 and RFC 9728 metadata without a token; the user of a token obtained at their AS (authorization
code + PKCE on its own pages) seen by both SDKs' clients; refresh tokens rotated; revocation and
expiry refused. Each server with each kind of AS (`upstream_servers_support.upstream`)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from support import wait_until
from upstream_servers_support import (
    Upstream,
    authorize,
    code_flow,
    initialize,
    introspect,
    py_whoami,
    refresh,
    revoke,
    ts_whoami,
    upstream,
)
from xdist_scheduling import KEYCLOAK

# (server, authorization server, oidc-provider's token format, its issuer's path): the two
# pairs of the tests, an AS issuing opaque tokens (introspected), both swapped, the
# oidc-provider one with an issuer that has a path.
PAIRS = [
    ("fastmcp", "oidc-provider", "jwt", ""),
    ("ts", "keycloak", "jwt", ""),
    ("fastmcp", "oidc-provider", "opaque", ""),
    ("ts", "oidc-provider", "jwt", "/tenant-a"),
    ("fastmcp", "keycloak", "jwt", ""),
]


# Real Keycloak's pairs carry its xdist group: the fixture reaches it by name.
@pytest.fixture(
    scope="module",
    params=[
        pytest.param(p, id="-".join(p[:3]), marks=[KEYCLOAK] if p[1] == "keycloak" else [])
        for p in PAIRS
    ],
)
def pair(
    request: pytest.FixtureRequest, logs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Upstream]:
    server, auth, token_format, issuer_path = request.param
    keycloak = request.getfixturevalue("real_keycloak") if auth == "keycloak" else None
    directory = tmp_path_factory.mktemp("upstream")
    options = {"token_format": token_format, "issuer_path": issuer_path}
    with upstream(logs, directory, server, auth, keycloak=keycloak, **options) as started:
        yield started


def challenge(response: httpx.Response) -> dict[str, str]:
    """The parameters of a `WWW-Authenticate: Bearer …` challenge."""
    header = response.headers.get("www-authenticate", "")
    assert header.startswith("Bearer "), header
    return dict(re.findall(r'(\w+)="([^"]*)"', header))


def test_without_a_token_401_names_the_metadata_which_names_the_as(pair: Upstream) -> None:
    answer = initialize(pair.server.url)
    assert answer.status_code == 401, answer.text
    params = challenge(answer)
    assert params["resource_metadata"] == pair.server.resource_metadata_url
    metadata = httpx.get(params["resource_metadata"], timeout=10).json()
    assert metadata["resource"] == pair.server.url
    assert metadata["authorization_servers"] == [pair.auth.issuer]
    assert "mcp:read" in metadata["scopes_supported"]
    issuer = httpx.get(f"{pair.auth.issuer}/.well-known/openid-configuration", timeout=10)
    assert issuer.json()["issuer"] == pair.auth.issuer
    assert issuer.json()["authorization_response_iss_parameter_supported"] is True


@pytest.mark.parametrize("token", ["garbage", "eyJhbGciOiJub25lIn0.eyJzdWIiOiJhbGljZSJ9."])
def test_a_token_not_from_its_as_is_refused(pair: Upstream, token: str) -> None:
    answer = initialize(pair.server.url, token)
    assert answer.status_code == 401, answer.text
    params = challenge(answer)
    assert params["error"] == "invalid_token"
    assert params["resource_metadata"] == pair.server.resource_metadata_url


async def test_both_sdk_clients_see_the_user_of_the_token(pair: Upstream) -> None:
    auth = pair.auth
    alice = code_flow(auth, auth.confidential, "alice", pair.server.url)
    bob = code_flow(auth, auth.public, "bob", pair.server.url)
    opened = initialize(pair.server.url, alice["access_token"])
    assert opened.status_code == 200, opened.text
    assert opened.headers.get("mcp-session-id"), "the server keeps stateful sessions"

    seen = await py_whoami(pair.server.url, alice["access_token"])
    assert seen["sub"] == auth.subject("alice")
    assert seen["client_id"] == auth.confidential.client_id
    assert "mcp:read" in seen["scopes"]
    seen = ts_whoami(pair.server.url, bob["access_token"])
    assert seen["sub"] == auth.subject("bob")
    assert seen["client_id"] == auth.public.client_id
    received = pair.server.tokens_received()
    assert alice["access_token"] in received
    assert bob["access_token"] in received


def test_a_wrong_password_or_a_refusal_gets_no_code(pair: Upstream) -> None:
    auth = pair.auth
    page, _, _ = authorize(auth, auth.public, "alice", pair.server.url, password="wrong")
    assert page.status == 200, page
    assert "code" not in page.query
    page, _, _ = authorize(auth, auth.public, "carol", pair.server.url, say_yes=False)
    assert page.status == 0, page
    assert page.query.get("error") == "access_denied", page.query
    assert page.query.get("iss") == auth.issuer


def test_refresh_tokens_rotate_and_a_used_one_is_refused(pair: Upstream) -> None:
    auth = pair.auth
    for client in (auth.confidential, auth.public):
        tokens = code_flow(auth, client, "alice", pair.server.url)
        first = tokens["refresh_token"]
        renewed = refresh(auth, client, first, pair.server.url)
        assert renewed.status_code == 200, renewed.text
        second = renewed.json()["refresh_token"]
        assert second != first
        assert initialize(pair.server.url, renewed.json()["access_token"]).status_code == 200
        again = refresh(auth, client, first, pair.server.url)
        assert again.status_code == 400, again.text
        assert again.json()["error"] == "invalid_grant"
    assert any(r["ok"] for r in auth.refreshes())
    assert any(not r["ok"] for r in auth.refreshes())


def test_revocation_ends_the_grant(pair: Upstream) -> None:
    auth, url = pair.auth, pair.server.url
    tokens = code_flow(auth, auth.confidential, "alice", url)
    assert initialize(url, tokens["access_token"]).status_code == 200
    revoked = revoke(auth, auth.confidential, tokens["refresh_token"], "refresh_token")
    assert revoked.status_code == 200, revoked.text
    after = refresh(auth, auth.confidential, tokens["refresh_token"], url)
    assert after.status_code == 400, after.text
    assert after.json()["error"] == "invalid_grant"
    answer = initialize(url, tokens["access_token"])
    if "introspection" in pair.server.verify:
        assert introspect(auth, tokens["access_token"])["active"] is False
        assert answer.status_code == 401, answer.text
        assert challenge(answer)["error"] == "invalid_token"
    else:
        # A self-contained token is good until it expires: only its refresh is gone.
        assert answer.status_code == 200, answer.text


def test_the_user_revoked_at_the_as_loses_every_grant(pair: Upstream) -> None:
    auth, url = pair.auth, pair.server.url
    tokens = code_flow(auth, auth.public, "bob", url)
    other = code_flow(auth, auth.public, "alice", url)
    auth.revoke_user("bob")
    assert refresh(auth, auth.public, tokens["refresh_token"], url).status_code == 400
    if "introspection" in pair.server.verify:
        assert initialize(url, tokens["access_token"]).status_code == 401
    renewed = refresh(auth, auth.public, other["refresh_token"], url)
    assert renewed.status_code == 200, "alice's grant is not bob's"


def test_an_expired_access_token_is_refused(pair: Upstream) -> None:
    auth, url = pair.auth, pair.server.url
    usual = auth.access_token_ttl
    auth.set_access_token_ttl(2)
    try:
        tokens = code_flow(auth, auth.confidential, "alice", url)
    finally:
        auth.set_access_token_ttl(usual)
    assert tokens["expires_in"] <= 2

    def refused() -> bool:
        return initialize(url, tokens["access_token"]).status_code == 401

    wait_until(refused, 60, "the server to refuse the expired access token")
    renewed = refresh(auth, auth.confidential, tokens["refresh_token"], url)
    assert renewed.status_code == 200, renewed.text
    assert renewed.json()["expires_in"] > 2, "a refresh after the change lives the usual time"
    assert initialize(url, renewed.json()["access_token"]).status_code == 200


def test_upstreams_start_any_server_with_any_as_for_given_redirects(upstreams) -> None:
    gateway_callback = "http://127.0.0.1:47124/mcp/connect/callback"
    started = upstreams(
        "ts",
        "oidc-provider",
        redirect_uris=[gateway_callback],
        confidential_auth="client_secret_post",
    )
    auth = started.auth
    assert gateway_callback in auth.redirect_uris
    tokens = code_flow(auth, auth.confidential, "alice", started.server.url, gateway_callback)
    assert initialize(started.server.url, tokens["access_token"]).status_code == 200
    page, _, _ = authorize(
        auth, auth.confidential, "bob", started.server.url, "http://127.0.0.1:47124/elsewhere"
    )
    assert page.status == 400, "a redirect URI not given is refused"
