"""Users' own sign-in to a third-party MCP server (issue 36), end to end with real parts: the
FastMCP server that trusts only its own oidc-provider, the gateway in front of it with
`userOAuth`, the route's own IdP (oidc-provider), the Python `mcp` client on both wires and a
browser (connect_flow) that follows the link the client was given."""

from __future__ import annotations

import json
import sqlite3
from collections.abc import Iterator

import httpx
import httpx2
import pytest
from mcp import MCPError, types
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from connect_flow import Jar, browse, drive_connect, drive_connect_async
from support import free_port, unverified_claims
from user_oauth_gateway_support import (
    UserOAuthGateway,
    call_tool,
    callback_url,
    route_idp,
    user_oauth_gateway,
)


@pytest.fixture(scope="module")
def setup(logs, tmp_path_factory, idp_key, upstreams) -> Iterator[UserOAuthGateway]:
    port = free_port()
    upstream = upstreams(server="fastmcp", auth="oidc-provider", redirect_uris=[callback_url(port)])
    directory = tmp_path_factory.mktemp("user-oauth")
    with (
        route_idp(logs, idp_key[1], port) as idp,
        user_oauth_gateway(logs, directory, idp_key, upstream, port, idp=idp) as running,
    ):
        yield running


def _link(error: MCPError) -> str:
    data = error.error.data
    assert isinstance(data, dict), error
    (elicitation,) = data["elicitations"]
    assert elicitation["mode"] == "url"
    return str(elicitation["url"])


async def _whoami(setup: UserOAuthGateway, token: str, mode: str) -> dict:
    return (await call_tool(setup.mcp, token, "whoami", mode))[1]


async def test_a_user_connects_once_through_the_link_and_then_calls_with_their_own_token(setup):
    token = setup.token("alice")
    with pytest.raises(MCPError) as asked:
        await _whoami(setup, token, "legacy")
    assert asked.value.error.code == -32042
    link = _link(asked.value)
    assert link.startswith(f"{setup.mcp}/connect?id=")
    alice = (setup.route_login("alice"), setup.upstream_login("alice"))
    page = drive_connect(link, *alice, setup.jar("alice"))
    assert "connected" in page
    me = await _whoami(setup, token, "legacy")
    assert me["sub"] == setup.upstream.auth.subject("alice")
    received = setup.upstream.server.tokens_received()
    assert received
    assert token not in received
    assert all(unverified_claims(t).get("iss") == setup.upstream.auth.issuer for t in received)


async def test_a_link_opened_by_another_user_connects_nothing(setup):
    token = setup.token("carol")
    with pytest.raises(MCPError) as asked:
        await _whoami(setup, token, "legacy")
    page = browse(_link(asked.value), [setup.route_login("bob"), setup.upstream_login("bob")])
    assert page.status == 403
    assert "another user" in page.text
    with pytest.raises(MCPError) as again:
        await _whoami(setup, token, "legacy")
    assert again.value.error.code == -32042


@pytest.fixture(scope="module")
def federated(logs, tmp_path_factory, idp_key, upstreams, backend) -> Iterator[UserOAuthGateway]:
    """A federated backend: the third-party server (userOAuth) beside a plain MCP server."""
    port = free_port()
    upstream = upstreams(server="fastmcp", auth="oidc-provider", redirect_uris=[callback_url(port)])
    directory = tmp_path_factory.mktemp("user-oauth-federated")
    with (
        route_idp(logs, idp_key[1], port) as idp,
        user_oauth_gateway(
            logs, directory, idp_key, upstream, port, idp=idp, local=backend, name="gateway-fed-uo"
        ) as running,
    ):
        yield running


async def _federated_call(setup: UserOAuthGateway, token: str, tool: str) -> tuple[list[str], dict]:
    return await call_tool(setup.mcp, token, tool, listed=True)


async def test_a_federated_target_of_a_third_party_is_connected_before_the_session_opens(federated):
    setup = federated
    token = setup.token("alice")
    whoami = f"{setup.upstream.name}_whoami"
    with pytest.raises(MCPError) as asked:
        await _federated_call(setup, token, whoami)
    assert asked.value.error.code == -32042
    link = _link(asked.value)
    alice = (setup.route_login("alice"), setup.upstream_login("alice"))
    assert "connected" in drive_connect(link, *alice, setup.jar("alice"))
    tools, me = await _federated_call(setup, token, whoami)
    assert whoami in tools
    assert any(name.startswith("local_") for name in tools)
    assert me["sub"] == setup.upstream.auth.subject("alice")
    assert token not in setup.upstream.server.tokens_received()


async def test_on_the_stateless_wire_the_federated_call_asks_and_completes_once_connected(
    federated,
):
    """2026-07-28: the call answers `input_required`; the SDK opens the link through its
    elicitation callback (this test's browser) and retries with the request state."""
    setup = federated
    token = setup.token("dave")
    opened: list[str] = []

    async def open_link(context: object, params: types.ElicitRequestParams) -> types.ElicitResult:
        assert params.mode == "url"
        opened.append(params.url)
        dave = (setup.route_login("dave"), setup.upstream_login("alice"))
        await drive_connect_async(params.url, *dave, setup.jar("dave"))
        return types.ElicitResult(action="accept")

    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    transport = streamable_http_client(setup.mcp, http_client=http)
    async with http, Client(transport, mode="auto", elicitation_callback=open_link) as client:
        result = await client.call_tool(f"{setup.upstream.name}_whoami", {})
    assert len(opened) == 1
    assert opened[0].startswith(f"{setup.mcp}/connect?id=")
    me = json.loads(result.content[0].text)  # type: ignore[union-attr]
    assert me["sub"] == setup.upstream.auth.subject("alice")


async def test_a_flow_sent_on_to_another_browser_connects_nothing(setup):
    """The attacker starts a flow for their own caller, stops at the upstream's sign-in, and
    gets a victim to finish it: the victim's browser lacks the flow's cookie, so the victim's
    upstream account is never connected to the attacker's grant."""
    attacker = "mallory"
    with pytest.raises(MCPError) as asked:
        await _whoami(setup, setup.token(attacker), "legacy")
    at_upstream = browse(
        _link(asked.value),
        [setup.route_login(attacker)],
        stop_at=setup.upstream.auth.endpoint("authorization"),
        jar=setup.jar(attacker),
    )
    assert at_upstream.status == 0, at_upstream.text  # stopped at the upstream's sign-in
    victim = browse(at_upstream.url, [setup.upstream_login("bob")], jar=Jar())
    assert victim.status == 403
    assert "another browser" in victim.text
    with pytest.raises(MCPError) as again:
        await _whoami(setup, setup.token(attacker), "legacy")
    assert again.value.error.code == -32042


def test_naming_sessions_never_multiplies_a_callers_links(setup):
    """A caller's requests without a grant get one link per backend, whatever session ids they
    name: the gateway keeps one pending connection, never one per session a client invents."""
    links = set()
    for n in range(5):
        headers = {
            "Authorization": f"Bearer {setup.token('erin')}",
            "Accept": "application/json, text/event-stream",
            "Content-Type": "application/json",
            "MCP-Protocol-Version": "2025-11-25",
            "Mcp-Session-Id": f"made-up-{n}",
        }
        body = {"jsonrpc": "2.0", "id": n, "method": "tools/call", "params": {"name": "whoami"}}
        answer = httpx.post(setup.mcp, headers=headers, json=body, timeout=30)
        assert answer.status_code == 200, answer.text
        error = answer.json()["error"]
        assert error["code"] == -32042
        links.add(error["data"]["elicitations"][0]["url"])
    assert len(links) == 1


def test_pages_opened_by_anyone_keep_nothing_on_the_gateway(setup):
    """The connections page is open to any browser: starting its sign-in (or a sign-in coming
    back with nothing this browser started) writes nothing to the store; the flow lives in the
    browser's sealed cookie until the user signed in."""
    database = setup.store.removeprefix("sqlite://")

    def pending() -> int:
        with sqlite3.connect(database) as db:
            return int(db.execute("SELECT count(*) FROM pending").fetchone()[0])

    before = pending()
    for _ in range(20):
        started = httpx.get(f"{setup.mcp}/connections", timeout=30)
        assert started.status_code == 302
        assert started.headers["location"].startswith(setup.idp)
    forged = httpx.get(
        f"{setup.mcp}/connect/signed-in",
        params={"code": "x", "state": "y"},
        headers={"Accept": "text/html"},
        timeout=30,
    )
    assert forged.status_code == 403
    assert pending() == before


async def test_declining_the_link_on_the_stateless_wire_ends_the_call(setup):
    """2026-07-28: a retry saying the user declined gets a final answer, not the question
    again (a client would ask the user round after round)."""
    headers = {
        "Authorization": f"Bearer {setup.token('declining-user')}",
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "whoami",
    }
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"url": {}}},
    }
    call = {"name": "whoami", "arguments": {}, "_meta": meta}
    first = httpx.post(
        setup.mcp,
        headers=headers,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call},
        timeout=30,
    )
    asked = first.json()["result"]
    assert asked["resultType"] == "input_required", first.text
    (key,) = asked["inputRequests"]
    retry = {
        **call,
        "inputResponses": {key: {"action": "decline"}},
        "requestState": asked["requestState"],
    }
    second = httpx.post(
        setup.mcp,
        headers=headers,
        json={"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": retry},
        timeout=30,
    )
    assert second.status_code == 200, second.text
    result = second.json()["result"]
    assert result["isError"] is True
    assert "declined" in result["content"][0]["text"]
    assert "resultType" not in result or result["resultType"] != "input_required"
