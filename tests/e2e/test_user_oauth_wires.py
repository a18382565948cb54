"""What each MCP wire carries when a caller has no upstream grant yet (issue 36), with real
clients of both SDKs in front of the gateway and the third-party FastMCP server that trusts only
its own oidc-provider behind it:

- Python `mcp` 2.3 in `auto` mode (2026-07-28): the `input_required` result goes to its
  elicitation callback, which follows the link; the SDK's retry with the `requestState`
  gets the result, made with the user's own upstream token. `mcp` 1.x (2025-11-25): `-32042`,
  which the SDK's own `UrlElicitationRequiredError.from_error` reads.
- TypeScript SDK 1.x: `UrlElicitationRequiredError` until the user connected; a connected
  client whose grant is removed gets `-32042` again and, on its open GET stream,
  `notifications/elicitation/complete` once the user followed the new link. TypeScript
  client 2.x (`versionNegotiation: auto`, 2026-07-28): its `elicitation/create` handler gets
  the URL, and the SDK completes the call.
- The 2026-07-28 wire raw, for what SDKs hide: `server/discover` and lists before connecting;
  a `requestState` replayed by another user, on another request, or forged, refused before
  the upstream; the retry's own fields never reach the upstream.
- Two users, each reaching the upstream as their own account there, never with a route token.

Route users (the gateway's callers) and upstream accounts have different names, so an upstream
`sub` in a tool's answer can only have come from the user's own upstream token."""

from __future__ import annotations

import base64
import json
import re
import secrets
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import httpx
import httpx2
import mcp.types as types
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from connect_flow import drive_connect, drive_connect_async
from mcp_oauth_gateway.useroauth.elicitation import STATE_PREFIX
from support import mcp_headers, unverified_claims, wait_until
from user_oauth_gateway_support import UserOAuthGateway
from user_oauth_wires_support import (
    MODERN,
    STEP,
    EventStream,
    audit_records,
    fastmcp_gateway,
    mcp1_call,
    modern_request,
    remove_grants,
    rpc_answer,
    ts_client,
    upstream_messages,
)

RETRY_FIELDS = {"requestState", "inputResponses"}
ACCEPTED = {"connect": {"action": "accept"}}


@pytest.fixture(scope="module")
def setup(logs, tmp_path_factory, idp_key, upstreams) -> Iterator[UserOAuthGateway]:
    directory = tmp_path_factory.mktemp("user-oauth-wires")
    with fastmcp_gateway(logs, directory, idp_key, upstreams) as running:
        yield running


def _link_id(setup: UserOAuthGateway, url: str) -> str:
    """The id of a connect link, which must be the gateway's own page."""
    prefix = f"{setup.mcp}/connect?id="
    assert url.startswith(prefix), url
    return url.removeprefix(prefix)


def _connect(setup: UserOAuthGateway, url: str, user: str, account: str) -> None:
    """`user` (at the route) follows the link and signs in upstream as `account`."""
    page = drive_connect(
        url, setup.route_login(user), setup.upstream_login(account), setup.jar(user)
    )
    assert "connected" in page


def _sub(text: str) -> str:
    sub: str = json.loads(text)["sub"]
    return sub


def _tools_calls(messages: list) -> list[dict]:
    return [m for m in messages if isinstance(m, dict) and m.get("method") == "tools/call"]


class _Connector:
    """An elicitation callback that follows a URL as `user`, signing in upstream as `account`
    (and says yes to a form: {"ok": true})."""

    def __init__(self, setup: UserOAuthGateway, user: str, account: str):
        self.setup, self.user, self.account = setup, user, account
        self.asked: list[types.ElicitRequestURLParams] = []
        self.forms: list[types.ElicitRequestFormParams] = []

    async def __call__(
        self, context: object, params: types.ElicitRequestParams
    ) -> types.ElicitResult:
        if isinstance(params, types.ElicitRequestFormParams):
            self.forms.append(params)
            return types.ElicitResult(action="accept", content={"ok": True})
        self.asked.append(params)
        logins = (self.setup.route_login(self.user), self.setup.upstream_login(self.account))
        page = await drive_connect_async(params.url, *logins, self.setup.jar(self.user))
        assert "connected" in page
        return types.ElicitResult(action="accept")


async def _call(
    setup: UserOAuthGateway, token: str, tool: str, elicit: _Connector
) -> tuple[types.CallToolResult, str | None]:
    """`tool` through the Python `mcp` 2.3 client in `auto` mode; its result and wire."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60)
    transport = streamable_http_client(setup.mcp, http_client=http)
    async with http, Client(transport, mode="auto", elicitation_callback=elicit) as client:
        result = await client.call_tool(tool, {})
        return result, client.protocol_version


def _text(result: types.CallToolResult) -> str:
    first = result.content[0]
    assert isinstance(first, types.TextContent), result
    return first.text


# 1. Python clients


async def test_python_auto_client_answers_input_required_and_its_retry_uses_the_users_token(setup):
    user, account = "py-auto", "carol"
    token = setup.token(user)
    connector = _Connector(setup, user, account)
    seen, sent = len(setup.upstream.server.tokens_received()), len(upstream_messages(setup))
    result, wire = await _call(setup, token, "whoami", connector)
    assert wire == MODERN
    (asked,) = connector.asked  # one input_required, its elicitation handed to the callback
    assert asked.mode == "url"
    assert asked.elicitation_id is None  # 2026-07-28 has no ids
    _link_id(setup, asked.url)
    assert _sub(_text(result)) == setup.upstream.auth.subject(account)
    used = setup.upstream.server.tokens_received()[seen:]
    assert used
    assert token not in used
    assert {unverified_claims(t)["sub"] for t in used} == {setup.upstream.auth.subject(account)}
    # The first try was answered by the gateway; only the retry went on, without its own fields.
    (call,) = _tools_calls(upstream_messages(setup)[sent:])
    assert not RETRY_FIELDS & set(call["params"])


def test_python_1x_client_reads_minus_32042_with_from_error_and_works_once_connected(setup):
    user, account = "py-one", "bob"
    token = setup.token(user)
    asked = mcp1_call(setup.mcp, token, "whoami")
    assert asked["ok"] is False, asked
    assert (asked["code"], asked["class"]) == (-32042, "UrlElicitationRequiredError")
    (elicitation,) = asked["elicitations"]
    assert elicitation["mode"] == "url"
    assert _link_id(setup, elicitation["url"]) == elicitation["elicitationId"]
    _connect(setup, elicitation["url"], user, account)
    done = mcp1_call(setup.mcp, token, "whoami")
    assert done["ok"] is True, done
    assert _sub(done["text"]) == setup.upstream.auth.subject(account)


# 2. TypeScript clients


def test_ts_v1_client_gets_url_elicitation_required_until_connected(setup, logs):
    user, account = "ts-one", "alice"
    with ts_client(logs, setup.mcp, setup.token(user), "v1", "ts-v1-connect") as client:
        refused = client.run("connect")
        assert (refused["ok"], refused["name"], refused["code"]) == (
            False,
            "UrlElicitationRequiredError",
            -32042,
        ), refused
        (elicitation,) = refused["elicitations"]
        assert _link_id(setup, elicitation["url"]) == elicitation["elicitationId"]
        _connect(setup, elicitation["url"], user, account)
        connected = client.run("connect")
        assert connected["ok"], connected
        assert connected["protocolVersion"] == "2025-11-25"
        called = client.run("call", tool="whoami")
        assert called["ok"], called
        assert _sub(called["text"]) == setup.upstream.auth.subject(account)


def _get_stream_open(setup: UserOAuthGateway, user: str, decision: str = "allow") -> bool:
    """Whether `user`'s GET stream was answered: proxied to the upstream ("allow") or held by
    the gateway while not connected ("deny"); the audit line is written as the answer starts."""
    return any(
        r["method"] == "GET"
        and r["path"] == "/mcp"
        and r["status"] == 200
        and r["decision"] == decision
        and (r.get("caller") or {}).get("sub") == user
        for r in audit_records(setup)
    )


def test_ts_v1_connected_client_is_told_on_its_get_stream_when_the_new_link_is_done(setup, logs):
    user, account = "ts-mid", "carol"
    with ts_client(logs, setup.mcp, setup.token(user), "v1", "ts-v1-mid") as client:
        _connect(setup, client.run("connect")["elicitations"][0]["url"], user, account)
        assert client.run("connect")["ok"]
        assert client.run("call", tool="whoami")["ok"]
        wait_until(lambda: _get_stream_open(setup, user), what="the client's GET stream")
        assert "removed 1 grant" in remove_grants(setup, user)
        again = client.run("call", tool="whoami")
        assert (again["ok"], again["name"], again["code"]) == (
            False,
            "UrlElicitationRequiredError",
            -32042,
        ), again
        (elicitation,) = again["elicitations"]
        assert client.events("elicitation-complete") == []
        _connect(setup, elicitation["url"], user, account)
        told = client.event("elicitation-complete")
        assert told["params"] == {"elicitationId": elicitation["elicitationId"]}
        retried = client.run("call", tool="whoami")
        assert retried["ok"], retried
        assert _sub(retried["text"]) == setup.upstream.auth.subject(account)


def test_a_get_stream_opened_before_connecting_is_held_told_and_ended(setup):
    user, account = "raw-held", "bob"
    session = secrets.token_hex(16)
    headers = mcp_headers(
        setup.token(user), **{"MCP-Protocol-Version": "2025-11-25", "Mcp-Session-Id": session}
    )
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "whoami"}}
    asked = httpx.post(setup.mcp, headers=headers, json=call, timeout=30)
    assert asked.status_code == 200, asked.text
    (elicitation,) = asked.json()["error"]["data"]["elicitations"]
    stream = EventStream(setup.mcp, headers)
    wait_until(lambda: _get_stream_open(setup, user, "deny"), what="the held GET stream")
    assert not stream.ended.is_set()
    _connect(setup, elicitation["url"], user, account)
    assert stream.ended.wait(STEP), "the held stream did not end once the user connected"
    assert stream.failure is None, stream.failure
    assert stream.status == 200
    assert stream.messages == [
        {
            "jsonrpc": "2.0",
            "method": "notifications/elicitation/complete",
            "params": {"elicitationId": elicitation["elicitationId"]},
        }
    ]


def test_ts_v2_client_handler_gets_the_url_and_the_sdk_completes_the_call(setup, logs):
    user, account = "ts-two", "bob"
    with ts_client(logs, setup.mcp, setup.token(user), "v2", "ts-v2") as client:
        connected = client.run("connect")
        assert connected["ok"], connected
        assert connected["protocolVersion"] == MODERN
        sent = len(upstream_messages(setup))
        client.send(op="call", tool="whoami")
        asked = client.event("elicitation")["params"]
        assert asked["mode"] == "url"
        assert "elicitationId" not in asked
        _connect(setup, asked["url"], user, account)
        assert client.run("answer", action="accept")["ok"]
        called = client.wait_for(lambda line: line.get("op") == "call", "the call's outcome")
        assert called["ok"], called
        assert _sub(called["text"]) == setup.upstream.auth.subject(account)
    (call,) = _tools_calls(upstream_messages(setup)[sent:])
    assert not RETRY_FIELDS & set(call["params"])


# 3. The 2026-07-28 wire, raw


def test_discover_before_connecting_is_answered_by_the_gateway_with_the_link(setup):
    token = setup.token("raw-discover")
    sent = len(upstream_messages(setup))
    response = modern_request(setup.mcp, token, "server/discover", {})
    assert response.status_code == 200, response.text
    result = rpc_answer(response)["result"]
    assert MODERN in result["supportedVersions"]
    assert "tools" in result["capabilities"]
    link = re.search(r"http://[^\s()]+/connect\?id=[\w-]+", result["instructions"])
    assert link is not None, result
    _link_id(setup, link.group())
    # The same caller's list is refused with the same link, in an error this wire can carry.
    listed = modern_request(setup.mcp, token, "tools/list", {})
    assert listed.status_code == 200, listed.text
    error = rpc_answer(listed)["error"]
    assert error["code"] == -32050
    (elicitation,) = error["data"]["elicitations"]
    assert elicitation["mode"] == "url"
    assert "elicitationId" not in elicitation
    assert elicitation["url"] == link.group()
    assert len(upstream_messages(setup)) == sent


@dataclass(frozen=True)
class Issued:
    """A requestState the gateway gave raw-alice for one call, before she connected."""

    token: str
    params: dict
    state: str


def _asked_raw(setup: UserOAuthGateway, token: str, params: dict) -> dict:
    response = modern_request(setup.mcp, token, "tools/call", params)
    assert response.status_code == 200, response.text
    result: dict = rpc_answer(response)["result"]
    assert result["resultType"] == "input_required", result
    (request,) = result["inputRequests"].values()
    assert request["method"] == "elicitation/create"
    assert request["params"]["mode"] == "url"
    return result


@pytest.fixture(scope="module")
def issued(setup) -> Issued:
    """raw-alice asked (her requestState kept), then connected as upstream alice."""
    token, params = setup.token("raw-alice"), {"name": "echo", "arguments": {"text": "mine"}}
    result = _asked_raw(setup, token, params)
    (request,) = result["inputRequests"].values()
    _connect(setup, request["params"]["url"], "raw-alice", "alice")
    return Issued(token, params, result["requestState"])


@pytest.fixture(scope="module")
def bob(setup) -> str:
    """raw-bob's route token, connected as upstream bob."""
    token = setup.token("raw-bob")
    (request,) = _asked_raw(setup, token, {"name": "whoami", "arguments": {}})[
        "inputRequests"
    ].values()
    _connect(setup, request["params"]["url"], "raw-bob", "bob")
    return token


def _retry(setup: UserOAuthGateway, token: str, method: str, params: dict, state: object):
    params = {**params, "inputResponses": ACCEPTED, "requestState": state}
    return modern_request(setup.mcp, token, method, params, message_id=2)


def _refused_before_the_upstream(setup: UserOAuthGateway, attempt: Callable[[], httpx.Response]):
    seen, sent = len(setup.upstream.server.tokens_received()), len(upstream_messages(setup))
    response = attempt()
    assert response.status_code == 400, response.text
    error = response.json()["error"]
    assert error["code"] == -32602, error
    assert len(setup.upstream.server.tokens_received()) == seen
    assert len(upstream_messages(setup)) == sent
    return error


def test_the_retry_reaches_the_upstream_without_the_retry_fields(setup, issued):
    sent = len(upstream_messages(setup))
    response = _retry(setup, issued.token, "tools/call", issued.params, issued.state)
    assert response.status_code == 200, response.text
    result = rpc_answer(response)["result"]
    assert result["content"][0]["text"] == "mine"
    (call,) = _tools_calls(upstream_messages(setup)[sent:])
    assert call["params"]["arguments"] == {"text": "mine"}
    assert not RETRY_FIELDS & set(call["params"])


def test_alices_state_replayed_by_bob_is_refused_before_the_upstream(setup, issued, bob):
    error = _refused_before_the_upstream(
        setup, lambda: _retry(setup, bob, "tools/call", issued.params, issued.state)
    )
    assert "another user" in error["message"]


@pytest.mark.parametrize(
    ("method", "params"),
    [
        ("tools/call", {"name": "whoami", "arguments": {}}),
        ("tools/call", {"name": "echo", "arguments": {"text": "theirs"}}),
        ("tools/call", {"name": "echo", "arguments": {"text": "mine", "more": "x"}}),
        ("prompts/get", {"name": "echo", "arguments": {"text": "mine"}}),
    ],
    ids=["another-tool", "other-arguments", "more-arguments", "another-method"],
)
def test_alices_state_on_another_request_is_refused_before_the_upstream(
    setup, issued, method, params
):
    error = _refused_before_the_upstream(
        setup, lambda: _retry(setup, issued.token, method, params, issued.state)
    )
    assert "another request" in error["message"]


def _flipped(state: str) -> str:
    raw = bytearray(base64.urlsafe_b64decode(state.removeprefix(STATE_PREFIX)))
    raw[len(raw) // 2] ^= 1
    return STATE_PREFIX + base64.urlsafe_b64encode(bytes(raw)).decode()


# States that say they are the gateway's (its prefix) and are not.
FORGED: dict[str, Callable[[str], object]] = {
    "garbage": lambda state: STATE_PREFIX + "garbage",
    "prefix-only": lambda state: STATE_PREFIX,
    "random-bytes": lambda state: STATE_PREFIX + base64.urlsafe_b64encode(bytes(96)).decode(),
    "one-bit-flipped": _flipped,
    "truncated": lambda state: state[:-8],
    "too-long": lambda state: state * 50,
}


@pytest.mark.parametrize("forge", FORGED.values(), ids=FORGED.keys())
def test_a_forged_state_is_refused_before_the_upstream(setup, issued, forge):
    state = forge(issued.state)
    _refused_before_the_upstream(
        setup, lambda: _retry(setup, issued.token, "tools/call", issued.params, state)
    )


async def test_the_upstreams_own_input_required_round_goes_on_untouched(setup):
    """One call, two rounds: the gateway's (connect), then the FastMCP tool's own (a form),
    whose requestState and answers the gateway passes on as they are."""
    user, account = "mrtr", "alice"
    connector = _Connector(setup, user, account)
    sent = len(upstream_messages(setup))
    result, wire = await _call(setup, setup.token(user), "confirm", connector)
    assert wire == MODERN
    assert (len(connector.asked), len(connector.forms)) == (1, 1)
    assert json.loads(_text(result)) == {"state": "upstream-round-1", "content": {"ok": True}}
    first, second = _tools_calls(upstream_messages(setup)[sent:])
    assert not RETRY_FIELDS & set(first["params"])  # the gateway's round: its fields removed
    assert second["params"]["inputResponses"] == {
        "confirm": {"action": "accept", "content": {"ok": True}}
    }
    assert not second["params"]["requestState"].startswith(STATE_PREFIX)


# 4. Two users


async def test_two_users_reach_the_upstream_each_as_their_own_account(setup):
    accounts = {"two-ann": "carol", "two-ben": "bob"}
    tokens = {user: setup.token(user) for user in accounts}
    used: dict[str, set[str]] = {user: set() for user in accounts}
    for _ in range(2):  # each connects on the first round; the second uses the kept grant
        for user, account in accounts.items():
            before = len(setup.upstream.server.tokens_received())
            connector = _Connector(setup, user, account)
            result, _ = await _call(setup, tokens[user], "whoami", connector)
            assert _sub(_text(result)) == setup.upstream.auth.subject(account)
            used[user] |= set(setup.upstream.server.tokens_received()[before:])
    for user, account in accounts.items():
        assert {unverified_claims(t)["sub"] for t in used[user]} == {account}
    assert not used["two-ann"] & used["two-ben"]
    # No route token ever reached the upstream, in this module's every test.
    received = setup.upstream.server.tokens_received()
    assert received
    assert not set(tokens.values()) & set(received)
    assert {unverified_claims(t)["iss"] for t in received} == {setup.upstream.auth.issuer}
    # Nor did any upstream token go into the gateway's log or audit trail.
    written = setup.process.log() + (setup.config.parent / "audit.jsonl").read_text()
    for token in received:
        assert token.rsplit(".", 1)[1] not in written
