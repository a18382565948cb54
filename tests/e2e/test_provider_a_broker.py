"""Broker mode in front of provider A, with the provider's real tokens: the gateway set up by the
product's own `idp keycloak --mode Broker` against real Keycloak 26 (in a realm of this module's
own, `broker`, so the master realm of the shared server stays test_provider_a.py's) and against
the dev IdP's Keycloak flavour (master realm), one parametrised module.

Each client signs in on the provider's own login page and calls a tool: the Python `mcp` SDK
2.x, the TypeScript `@modelcontextprotocol/client` 2.x and MCP Inspector's web UI in Chromium.
The gateway checks the provider's RFC 9207 `iss` on its callback (and passes on the error of a
consent refused at Keycloak); it refreshes through the provider while rotating its own refresh
tokens (with Keycloak's rotation on, too), passing Keycloak's refusals on; and a token revoked
at the gateway is revoked at Keycloak's revocation endpoint.

The gateway keeps its Broker state in Redis here, so that a test can read the provider's
refresh token behind a gateway refresh token and present it to the provider directly.

Where the dev IdP differs from Keycloak, the test is parametrised over real Keycloak only and
the difference is named next to it.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.async_api import Page, expect

from broker_flow import REDIRECT, BrokerClient, deny_at_provider, provider_refresh_token
from browser_support import ARTIFACTS
from inspector_support import (
    STEP_TIMEOUT_MS,
    asked_to_connect_again,
    call_add,
    chromium_page,
    expect_connected,
    running_inspector,
    watch_gateway,
)
from keycloak_support import (
    FLAVOURS,
    KEYCLOAK_ONLY,
    USER_PASSWORD,
    Provider,
    either_provider,
    idp_keycloak,
)
from node_clients import run_ts_client
from provider_a_broker_support import (
    GATEWAY_CLIENT,
    Broker,
    assert_providers_token,
    audit_lines,
    python_sdk_signs_in,
)
from support import (
    Process,
    free_port,
    gateway_cmd,
    unverified_claims,
    wait_for_port,
    wait_until,
)

REALM = {"keycloak": "broker", "dev-idp": "master"}  # the dev IdP serves master only


provider = pytest.fixture(scope="module", params=FLAVOURS, name="provider")(either_provider)


@pytest.fixture(scope="module")
def broker(
    provider: Provider,
    backend: str,
    redis_url: str,
    logs: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Broker]:
    realm = REALM[provider.name]
    out = tmp_path_factory.mktemp(f"broker-{provider.name}") / "out"
    port = free_port()
    gateway = f"http://127.0.0.1:{port}"
    done = idp_keycloak(
        provider,
        *("--realm", realm, "--mode", "Broker"),
        *("--resource", f"{gateway}/mcp", "--user", "alice:alice@example.com"),
        *("--backend", f"http://{backend}/mcp", "--output-dir", str(out)),
    )
    assert done.returncode == 0, done.stderr
    assert f"created public client '{GATEWAY_CLIENT}'" in done.stderr, done.stderr
    audit = out.parent / "audit.jsonl"
    process = Process(
        f"gateway-broker-{provider.name}",
        [*gateway_cmd(out), "--audit-log", str(audit)],
        logs,
        env={"MCP_OAUTH_GATEWAY_REDIS_URL": redis_url},
    )
    try:
        wait_for_port(port, process)
        yield Broker(provider, realm, gateway, process, redis_url, audit)
    finally:
        process.stop()


# --- clients signing in on the provider's own pages -----------------------------------------


def test_python_sdk_2_signs_in_and_calls_a_tool(broker):
    before = broker.callbacks()
    report = python_sdk_signs_in(broker)
    assert report["ok"], report
    assert report["sdk"].startswith("mcp 2."), report
    assert report["authorize"] == f"{broker.mcp}/oauth/authorize"
    assert report["tools"] == ["add", "count"]
    assert report["result"] == "5"
    # It signed in at the provider, which sent it back through the gateway's callback.
    wait_until(lambda: broker.callbacks() == before + 1, 10, "the callback in the access log")


def test_the_audit_trail_names_the_provider_s_user_line_by_line(broker):
    """Who called what, with the provider's own tokens: the audit lines of a sign-in and a call
    name the provider's issuer and its id for the user (Keycloak's is a UUID, not the
    username), the Broker's events in order, and never a token or code."""
    assert python_sdk_signs_in(broker)["ok"]
    user = broker.provider.admin("GET", "/users", broker.realm, params={"username": "alice"})
    alice = user.json()[0]["id"]

    def call_lines() -> list[dict[str, Any]]:
        # The route has no tool rules, so the MCP method is not read: the calls are the
        # POSTs to /mcp that reached the server.
        return [
            line
            for line in audit_lines(broker)
            if (line["method"], line["path"], line["stage"]) == ("POST", "/mcp", "reverse-proxy")
        ]

    wait_until(lambda: len(call_lines()) >= 3, 30, "the client's calls in the audit trail")
    for call in call_lines():
        assert (call["decision"], call["status"]) == ("allow", 200)
        assert call["caller"]["iss"] == broker.issuer
        assert call["caller"]["sub"] == alice
    lines = audit_lines(broker)
    events = [line["event"] for line in lines if line["event"]]
    for event in ("client-registered", "consent-given", "code-issued", "token-issued"):
        assert event in events, events
    # The provider sent alice back (its sign-in done): the gateway issued its code then.
    back = [line for line in lines if line["path"] == "/mcp/oauth/callback"]
    assert [line["event"] for line in back][-1] == "code-issued"
    # Never a token: the provider's tokens are JWTs (a JSON header, then a JSON payload), and
    # none is in the file (the Broker's client ids are signed too, but their first part is
    # `mcpgw`: they are no secret, and shown).
    jwt = re.compile(r"eyJ[A-Za-z0-9_-]+\.eyJ[A-Za-z0-9_-]+\.")
    assert not jwt.search(broker.audit.read_text())


def test_typescript_client_2_signs_in_and_calls_a_tool(broker):
    before = broker.callbacks()
    report = run_ts_client(broker.mcp, "alice", USER_PASSWORD, "client2")
    assert report["ok"], report
    assert report["sdk"] == "@modelcontextprotocol/client 2"
    assert report["authorizationUrl"].startswith(f"{broker.mcp}/oauth/authorize?")
    assert report["callback"]["iss"] == broker.mcp  # the gateway's iss, checked by the client
    assert report["add"]["structuredContent"] == {"result": 5}
    assert report["count"]["content"][0]["text"] == "counted to 3"  # streamed over SSE
    assert_providers_token(broker, report["accessToken"])
    wait_until(lambda: broker.callbacks() == before + 1, 10, "the callback in the access log")


async def provider_pages(page: Page, provider: Provider) -> None:
    """The provider's login form (Keycloak: username, password, #kc-login; the dev IdP: login,
    password, submit), then its consent page if one follows."""
    await page.wait_for_url(f"{provider.url}/**")
    await page.locator("input[name=username], input[name=login]").fill("alice")
    await page.fill("input[name=password]", USER_PASSWORD)
    await page.locator("#kc-login, button[type=submit]").first.click()
    connected = page.get_by_text("Connected", exact=True)
    consent = page.locator(
        "input[name=accept], form:has(input[name=prompt][value=consent]) button[value=allow]"
    )
    shown = connected.or_(consent).or_(asked_to_connect_again(page))
    await expect(shown.first).to_be_visible(timeout=STEP_TIMEOUT_MS)
    if await consent.count():
        await consent.first.click()
    await expect_connected(page)


async def test_inspector_signs_in_and_calls_a_tool(broker, logs):
    ARTIFACTS.mkdir(exist_ok=True)
    name = f"inspector-broker-{broker.provider.name}.png"
    with running_inspector("1.0.3", logs) as inspector:
        async with chromium_page() as page:
            from_browser = watch_gateway(page, broker.gateway)
            navigations: list[str] = []
            page.on("framenavigated", lambda frame: navigations.append(frame.url))
            try:
                await page.goto(inspector.page_url(broker.mcp))
                await page.get_by_role("button", name="Connect", exact=True).click()
                await page.wait_for_url(f"{broker.mcp}/oauth/authorize?*")
                assert "MCP Inspector" in await page.inner_text("body")
                await page.click("button[name=decision][value=allow]")
                await provider_pages(page, broker.provider)
                await call_add(page)
            finally:  # printed by pytest when the test fails
                print("page:", page.url)
                print("navigations:", *navigations, sep="\n  ")
                print("from the browser:", *from_browser, sep="\n  ")
                await page.screenshot(path=str(ARTIFACTS / name))
    # The browser went through the provider's own pages, and back through the gateway.
    assert any(url.startswith(f"{broker.issuer}/") for url in navigations), navigations
    callbacks = [url for url in navigations if url.startswith(f"{inspector.ui}/oauth/callback?")]
    assert callbacks, navigations
    assert "code=" in callbacks[0], callbacks


# --- RFC 9207: the provider's iss on the gateway's callback ---------------------------------


async def test_the_providers_iss_is_checked_on_the_callback(broker):
    assert broker.discovery()["authorization_response_iss_parameter_supported"] is True
    client = broker.client()
    genuine = await client.provider_redirect("alice", USER_PASSWORD)
    assert genuine["iss"] == broker.issuer, genuine
    assert set(genuine) >= {"code", "state", "iss"}
    # Another issuer's iss (a mix-up): refused, and the sign-in is used up.
    forged = client.deliver({**genuine, "iss": f"{broker.provider.url}/realms/elsewhere"})
    assert forged.status_code == 400, forged.text
    assert "RFC 9207 mix-up defence" in forged.text
    assert "is not the provider issuer" in forged.text
    again = client.deliver(genuine)
    assert again.status_code == 400
    assert "already used state" in again.text
    # No iss from a provider that says it sends one: refused too.
    second = await client.provider_redirect("alice", USER_PASSWORD)
    stripped = client.deliver({k: v for k, v in second.items() if k != "iss"})
    assert stripped.status_code == 400, stripped.text
    assert "RFC 9207 mix-up defence" in stripped.text
    # The provider's own iss: accepted; the client gets the gateway's code and iss.
    third = await client.provider_redirect("alice", USER_PASSWORD)
    accepted = client.deliver(third)
    assert accepted.status_code == 302, accepted.text
    location = httpx.URL(accepted.headers["location"])
    assert str(location).startswith(f"{REDIRECT}?")
    assert location.params["iss"] == broker.mcp
    assert location.params["state"] == "client-state"
    redeemed = client.redeem(location.params["code"])
    assert redeemed.status_code == 200, redeemed.text
    assert_providers_token(broker, redeemed.json()["access_token"])


@contextmanager
def consent_required(broker: Broker) -> Iterator[None]:
    """Keycloak asks alice to consent to the gateway's client, for the duration."""
    provider, realm = broker.provider, broker.realm
    found = provider.admin("GET", "/clients", realm, params={"clientId": GATEWAY_CLIENT}).json()
    path = f"/clients/{found[0]['id']}"
    changed = provider.admin("PUT", path, realm, json={**found[0], "consentRequired": True})
    assert changed.status_code == 204, changed.text
    try:
        yield
    finally:
        back = provider.admin("PUT", path, realm, json={**found[0], "consentRequired": False})
        assert back.status_code == 204, back.text


# Real Keycloak only: the dev IdP's consent page has decision=allow/deny buttons, not Keycloak's
# accept/cancel (docs/dev-idp.md).
@KEYCLOAK_ONLY
async def test_consent_refused_at_keycloak_reaches_the_client_as_access_denied(broker):
    client = broker.client()
    with consent_required(broker):
        refused = await deny_at_provider(
            client.authorize_url(), "alice", USER_PASSWORD, client.callback
        )
    # Keycloak's error redirect carries its iss too (RFC 9207 §2), so the gateway passes the
    # error on instead of suspecting a mix-up.
    assert refused["iss"] == broker.issuer, refused
    assert refused["error"] == "access_denied", refused
    answered = client.deliver(refused)
    assert answered.status_code == 302, answered.text
    location = httpx.URL(answered.headers["location"])
    assert str(location).startswith(f"{REDIRECT}?")
    assert location.params["error"] == "access_denied"
    assert location.params["state"] == "client-state"
    assert location.params["iss"] == broker.mcp
    assert "code" not in location.params


# --- refresh ---------------------------------------------------------------------------------


def refreshed(client: BrokerClient, token: str) -> dict[str, str]:
    response = client.refresh(token)
    assert response.status_code == 200, response.text
    tokens: dict[str, str] = response.json()
    return tokens


async def test_a_refresh_token_used_twice_at_the_gateway_is_refused(broker):
    client = broker.client()
    first = await client.tokens("alice", USER_PASSWORD)
    second = refreshed(client, first["refresh_token"])
    assert second["refresh_token"] != first["refresh_token"]
    assert second["access_token"] != first["access_token"]
    assert_providers_token(broker, second["access_token"])
    replayed = client.refresh(first["refresh_token"])
    assert replayed.status_code == 400
    assert replayed.json()["error"] == "invalid_grant"
    assert "already exchanged once" in replayed.json()["error_description"]
    # The replay revoked the sign-in: the newer token is gone too.
    after = client.refresh(second["refresh_token"])
    assert (after.status_code, after.json()["error"]) == (400, "invalid_grant")


@contextmanager
def rotation(provider: Provider, realm: str) -> Iterator[None]:
    """The realm revokes a refresh token once used (Keycloak's "Revoke Refresh Token", no
    reuse), back off afterwards."""
    on = {"revokeRefreshToken": True, "refreshTokenMaxReuse": 0}
    assert provider.admin("PUT", "", realm, json=on).status_code == 204
    settings = provider.admin("GET", "", realm).json()
    assert (settings["revokeRefreshToken"], settings["refreshTokenMaxReuse"]) == (True, 0)
    try:
        yield
    finally:
        off = {"revokeRefreshToken": False}
        assert provider.admin("PUT", "", realm, json=off).status_code == 204


def at_provider(broker: Broker, refresh_token: str) -> httpx.Response:
    """The provider's refresh token presented to the provider itself, as the gateway does."""
    return httpx.post(
        broker.provider.token_endpoint(broker.realm),
        data={
            "grant_type": "refresh_token",
            "refresh_token": refresh_token,
            "client_id": GATEWAY_CLIENT,
        },
    )


async def test_refresh_with_keycloaks_rotation(broker):
    with rotation(broker.provider, broker.realm):
        client = broker.client()
        first = await client.tokens("alice", USER_PASSWORD)
        behind_first = provider_refresh_token(broker.redis_url, first["refresh_token"])
        second = refreshed(client, first["refresh_token"])
        behind_second = provider_refresh_token(broker.redis_url, second["refresh_token"])
        assert second["refresh_token"] != first["refresh_token"]
        assert behind_second != behind_first  # Keycloak rotated its own
        # Keycloak takes each of its refresh tokens once, so this refresh shows the gateway
        # kept the one Keycloak rotated to; that one is now used up at Keycloak.
        third = refreshed(client, second["refresh_token"])
        assert_providers_token(broker, third["access_token"])
        used = at_provider(broker, behind_second)
        assert used.status_code == 400, used.text
        assert used.json() == {
            "error": "invalid_grant",
            "error_description": "Maximum allowed refresh token reuse exceeded",
        }
        # Keycloak ended the sign-in on that reuse: the gateway passes its refusal on.
        ended = client.refresh(third["refresh_token"])
        assert ended.status_code == 400, ended.text
        assert ended.json() == {
            "error": "invalid_grant",
            "error_description": "Session doesn't have required client",
        }
        # The client's old token replayed at the gateway: a clear OAuth error.
        replayed = client.refresh(second["refresh_token"])
        assert replayed.status_code == 400
        assert replayed.headers["content-type"].startswith("application/json")
        assert replayed.json()["error"] == "invalid_grant"
        assert replayed.json()["error_description"] == (
            "this refresh token was already exchanged once; using it again revokes the "
            "sign-in (sign in again)"
        )


async def test_a_scope_keycloak_refuses_on_refresh_leaves_the_refresh_token_valid(broker):
    client = broker.client()
    tokens = await client.tokens("alice", USER_PASSWORD)
    refused = client.refresh(tokens["refresh_token"], scope="openid unheard-of")
    assert refused.status_code == 400, refused.text
    assert refused.json() == {
        "error": "invalid_scope",
        "error_description": "Invalid scopes: openid unheard-of",
    }
    # Not the token's fault: it still works, at the gateway and behind it.
    again = refreshed(client, tokens["refresh_token"])
    assert_providers_token(broker, again["access_token"])


async def test_a_sign_in_ended_at_keycloak_ends_the_gateway_refresh_token(broker):
    client = broker.client()
    tokens = await client.tokens("alice", USER_PASSWORD)
    alice = unverified_claims(tokens["access_token"])["sub"]
    assert broker.provider.admin("POST", f"/users/{alice}/logout", broker.realm).status_code == 204
    ended = client.refresh(tokens["refresh_token"])
    assert ended.status_code == 400, ended.text
    assert ended.json() == {"error": "invalid_grant", "error_description": "Session not active"}
    # Keycloak's invalid_grant means its token is gone: so is the gateway's.
    after = client.refresh(tokens["refresh_token"])
    assert after.json()["error_description"].startswith("unknown, expired or revoked refresh token")


# --- revocation ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("scope", "kind", "gone"),
    [
        ("openid profile", "Refresh", "Session not active"),
        # An offline token: Keycloak says refresh_expires_in 0 (no end); the gateway's lasts.
        ("openid profile offline_access", "Offline", "Offline user session not found"),
    ],
)
async def test_revoking_at_the_gateway_revokes_the_refresh_token_at_keycloak(
    broker, scope, kind, gone
):
    gateway_metadata = httpx.get(
        f"{broker.gateway}/.well-known/oauth-authorization-server/mcp"
    ).json()
    assert gateway_metadata["revocation_endpoint"] == f"{broker.mcp}/oauth/revoke"
    revocation = f"{broker.issuer}/protocol/openid-connect/revoke"
    assert broker.discovery()["revocation_endpoint"] == revocation
    client = broker.client()
    tokens = await client.tokens("alice", USER_PASSWORD, scope)
    tokens = refreshed(client, tokens["refresh_token"])  # the chain works until revoked
    behind = provider_refresh_token(broker.redis_url, tokens["refresh_token"])
    assert unverified_claims(behind)["typ"] == kind
    done = client.revoke(tokens["refresh_token"], "refresh_token")
    assert done.status_code == 200, done.text
    at_keycloak = at_provider(broker, behind)
    assert at_keycloak.status_code == 400, at_keycloak.text
    assert at_keycloak.json() == {"error": "invalid_grant", "error_description": gone}
    at_gateway = client.refresh(tokens["refresh_token"])
    assert (at_gateway.status_code, at_gateway.json()["error"]) == (400, "invalid_grant")


async def test_revoking_an_access_token_at_the_gateway_revokes_it_at_keycloak(broker):
    client = broker.client()
    tokens = await client.tokens("alice", USER_PASSWORD)
    userinfo = f"{broker.issuer}/protocol/openid-connect/userinfo"
    bearer = {"Authorization": f"Bearer {tokens['access_token']}"}
    assert httpx.get(userinfo, headers=bearer).status_code == 200
    done = client.revoke(tokens["access_token"], "access_token")
    assert done.status_code == 200, done.text
    assert httpx.get(userinfo, headers=bearer).status_code == 401
