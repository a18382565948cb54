"""A federated route on the 2026-07-28 wire, in process, over targets played in memory that
speak that wire (as the `mcp` SDK 2.x server answers it: JSON-RPC errors under 400/404, a
`subscriptions/listen` stream that starts with its acknowledgement), or only the session era
(a `legacy` target answers every request without a session 400, as servers of that era do).

What is checked: the requests the gateway refuses itself, as a server of the wire must, and
before any target is asked; `server/discover` and lists merged; calls sent to their target under
its own name in the body and in `Mcp-Name`, the target's HTTP status passed on; a route with a
session-era target steering the client to `initialize`; the merged subscription stream."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

import orjson
import pytest

from mcp_oauth_gateway.asgi import CLAIMS_KEY, Headers
from mcp_oauth_gateway.controlplane.snapshot import CompiledTarget
from mcp_oauth_gateway.proxy.federation.stage import Federation
from mcp_oauth_gateway.proxy.federation.stateless import caller_key
from mcp_oauth_gateway.proxy.federation.target import TargetLink
from mcp_oauth_gateway.proxy.federation.wire import SESSION_VERSIONS
from mcp_oauth_gateway.proxy.upstream import UpstreamError

from .federation_targets import events
from .harness import MemoryResponse, drive

V = "2026-07-28"
META = {
    "io.modelcontextprotocol/protocolVersion": V,
    "io.modelcontextprotocol/clientCapabilities": {},
}
PORTS = {9101: "a", 9102: "b"}
JSON = [(b"content-type", b"application/json")]
SSE = [(b"content-type", b"text/event-stream")]


def reply(message: dict, status: int = 200, **fields: object) -> MemoryResponse:
    body = orjson.dumps({"jsonrpc": "2.0", "id": message["id"], **fields})
    return MemoryResponse(status, JSON, body)


def sse(*messages: dict) -> list[bytes]:
    return [b"data: " + orjson.dumps(m) + b"\n\n" for m in messages]


@dataclass
class WireTargets:
    """Targets of the stateless wire, as an `Upstream`; each records what it was sent."""

    legacy: set[str] = field(default_factory=set)
    down: set[str] = field(default_factory=set)
    seen: list[tuple[str, Headers, dict]] = field(default_factory=list)

    async def request(
        self,
        method: str,
        url: str,
        headers: Headers,
        body: bytes | AsyncIterator[bytes],
        _: float,
        tls: object = None,
    ) -> MemoryResponse:
        assert isinstance(body, bytes)
        name = PORTS[int(url.split(":")[2].split("/")[0])]
        if name in self.down:
            raise UpstreamError("connection refused")
        message = orjson.loads(body)
        self.seen.append((name, headers, message))
        if name in self.legacy:
            error = {"code": -32000, "message": "Bad Request: No valid session ID provided"}
            return MemoryResponse(
                400, JSON, orjson.dumps({"jsonrpc": "2.0", "id": None, "error": error})
            )
        return self.answer(name, message)

    def answer(self, name: str, message: dict) -> MemoryResponse:
        method = message["method"]
        params = message.get("params", {})
        if method == "server/discover":
            caps = {"tools": {"listChanged": True}} if name == "a" else {"prompts": {}}
            result = {
                "supportedVersions": [V],
                "capabilities": caps,
                "instructions": f"I am {name}",
            }
            return reply(message, result=result)
        if method == "tools/list":
            return reply(message, result={"tools": [{"name": f"{name}1"}], "ttlMs": 60000})
        if method == "tools/call" and params["name"] == "needs_sampling":
            error = {
                "code": -32021,
                "message": "sampling",
                "data": {"requiredCapabilities": {"sampling": {}}},
            }
            return reply(message, 400, error=error)
        if method == "tools/call":
            return reply(
                message, result={"content": [{"type": "text", "text": f"{name}:{params['name']}"}]}
            )
        if method == "subscriptions/listen":
            wanted = params["notifications"]
            return MemoryResponse(200, SSE, None, self.listen(name, message, wanted))
        return reply(message, 404, error={"code": -32601, "message": "Method not found"})

    def listen(self, name: str, message: dict, wanted: dict) -> list[bytes]:
        own = {"_meta": {"io.modelcontextprotocol/subscriptionId": message["id"]}}
        ack = {
            "method": "notifications/subscriptions/acknowledged",
            "params": {**own, "notifications": wanted},
        }
        sent = [{"jsonrpc": "2.0", **ack}]
        sent.append({"jsonrpc": "2.0", "method": "notifications/tools/list_changed", "params": own})
        for uri in wanted.get("resourceSubscriptions", []):
            sent.append(
                {
                    "jsonrpc": "2.0",
                    "method": "notifications/resources/updated",
                    "params": {**own, "uri": uri},
                }
            )
        # Progress under the listen's own id and another's: no call is in flight on this stream.
        for token in (message["id"], 1):
            params = {**own, "progressToken": token, "progress": 1}
            sent.append({"jsonrpc": "2.0", "method": "notifications/progress", "params": params})
        sent.append({"jsonrpc": "2.0", "id": message["id"], "result": own})
        return sse(*sent)

    async def close(self) -> None:
        """Nothing to close."""

    def asked(self) -> list[str]:
        return [name for name, _, _ in self.seen]


def app_over(targets: WireTargets) -> Federation:
    compiled = tuple(CompiledTarget("127.0.0.1", port, "/mcp", n) for port, n in PORTS.items())
    return Federation(compiled, TargetLink(targets, 5.0, False), 1 << 20)


def request(method: str, request_id: object = 1, meta: object = META, **params: object) -> bytes:
    body: dict[str, object] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    body["params"] = {**params, **({"_meta": meta} if meta is not None else {})}
    return orjson.dumps(body)


def routing(method: str, name: str | None = None, version: str = V) -> list[tuple[bytes, bytes]]:
    headers = [(b"mcp-protocol-version", version.encode()), (b"mcp-method", method.encode())]
    return headers + ([(b"mcp-name", name.encode())] if name is not None else [])


async def post(app: Federation, method: str, *, headers=None, caller="alice", **kw):
    """POST `method` with body params `kw`, and the routing headers a client sends for it
    (`Mcp-Name` mirroring the item it names) unless `headers` are given."""
    body = request(method, **kw)
    scope = {CLAIMS_KEY: {"iss": "https://idp.test", "sub": caller}}
    named = kw.get("name") if method in ("tools/call", "prompts/get") else None
    chosen = routing(method, named) if headers is None else headers
    return await drive(app, "POST", headers=chosen, body=body, scope=scope)


async def test_discover_merges_the_targets_and_names_the_gateway():
    targets = WireTargets()
    response = await post(app_over(targets), "server/discover")
    assert response.status == 200
    result = response.json()["result"]
    assert result["supportedVersions"] == [V]
    assert result["capabilities"] == {"tools": {"listChanged": True}, "prompts": {}}
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"]["name"] == "mcp-oauth-gateway"
    assert result["instructions"] == "a: I am a\n\nb: I am b"
    assert (result["cacheScope"], result["ttlMs"], result["resultType"]) == (
        "private",
        0,
        "complete",
    )
    for _, sent, message in targets.seen:
        values = dict(sent)
        assert values[b"mcp-protocol-version"] == V.encode()
        assert values[b"mcp-method"] == b"server/discover"
        assert b"mcp-session-id" not in values
        assert message["params"]["_meta"] == META


async def test_a_session_era_target_steers_the_client_to_initialize():
    """The `mcp` SDK client falls back to `initialize` on -32022 naming session-era versions."""
    targets = WireTargets(legacy={"b"})
    response = await post(app_over(targets), "server/discover")
    assert response.status == 400
    error = response.json()["error"]
    assert error["code"] == -32022
    assert error["data"] == {"supported": sorted(SESSION_VERSIONS), "requested": V}
    assert "b" in error["message"]


async def test_a_target_down_leaves_discover_to_the_others():
    response = await post(app_over(WireTargets(down={"b"})), "server/discover")
    assert response.status == 200
    assert response.json()["result"]["capabilities"] == {"tools": {"listChanged": True}}


CHECKS = [
    # (what is wrong, headers, body params, HTTP status, JSON-RPC code)
    ("no _meta", routing("tools/list"), {"meta": None}, 400, -32602),
    (
        "_meta without version",
        routing("tools/list"),
        {"meta": {"io.modelcontextprotocol/clientCapabilities": {}}},
        400,
        -32602,
    ),
    ("header version differs", routing("tools/list", version="2026-08-01"), {}, 400, -32020),
    (
        "Mcp-Method differs",
        [*routing("prompts/list")[:1], (b"mcp-method", b"prompts/list")],
        {},
        400,
        -32020,
    ),
    ("Mcp-Method missing", routing("tools/list")[:1], {}, 400, -32020),
    ("Mcp-Method in capitals", routing("TOOLS/LIST"), {}, 400, -32020),
    ("Mcp-Method twice", [*routing("tools/list"), (b"mcp-method", b"tools/list")], {}, 400, -32020),
]


@pytest.mark.parametrize(
    ("why", "headers", "params", "status", "code"), CHECKS, ids=[c[0] for c in CHECKS]
)
async def test_what_the_wire_refuses_is_refused_before_any_target_is_asked(
    why, headers, params, status, code
):
    targets = WireTargets()
    response = await post(app_over(targets), "tools/list", headers=headers, request_id=7, **params)
    assert (response.status, response.json()["error"]["code"]) == (status, code), why
    assert response.json()["id"] == 7
    assert targets.seen == []


async def test_an_unsupported_version_names_the_supported_ones():
    targets = WireTargets()
    meta = {**META, "io.modelcontextprotocol/protocolVersion": "v999.0.0"}
    headers = routing("server/discover", version="v999.0.0")
    response = await post(app_over(targets), "server/discover", headers=headers, meta=meta)
    assert response.status == 400
    assert response.json()["error"]["data"] == {"supported": [V], "requested": "v999.0.0"}
    assert targets.seen == []


@pytest.mark.parametrize(
    "method", ["initialize", "ping", "logging/setLevel", "resources/subscribe", "unknown/thing"]
)
async def test_methods_this_wire_removed_or_never_had_are_not_found(method):
    targets = WireTargets()
    response = await post(app_over(targets), method, uri="mcp+gw://a/x")
    assert (response.status, response.json()["error"]["code"]) == (404, -32601)
    assert targets.seen == []


async def test_lists_are_merged_and_marked_uncacheable():
    response = await post(app_over(WireTargets()), "tools/list")
    result = response.json()["result"]
    assert [t["name"] for t in result["tools"]] == ["a_a1", "b_b1"]
    # A target's own ttlMs is not passed on: the merged list depends on who asks.
    assert (result["cacheScope"], result["ttlMs"], result["resultType"]) == (
        "private",
        0,
        "complete",
    )


async def test_a_call_reaches_its_target_under_its_own_name_in_body_and_header():
    targets = WireTargets()
    response = await post(app_over(targets), "tools/call", name="b_echo", arguments={})
    assert response.status == 200
    assert response.json()["result"]["content"][0]["text"] == "b:echo"
    [(name, sent, message)] = targets.seen
    assert name == "b"
    assert message["params"]["name"] == "echo"
    assert dict(sent)[b"mcp-name"] == b"echo"
    assert dict(sent)[b"mcp-method"] == b"tools/call"


async def test_a_name_outside_plain_ascii_travels_base64_wrapped_both_ways():
    targets = WireTargets()
    wrapped = b"=?base64?" + base64.b64encode("b_café".encode()) + b"?="
    headers = [*routing("tools/call"), (b"mcp-name", wrapped)]
    response = await post(
        app_over(targets), "tools/call", headers=headers, name="b_café", arguments={}
    )
    assert response.status == 200, response.body
    [(_, sent, _)] = targets.seen
    assert dict(sent)[b"mcp-name"] == b"=?base64?" + base64.b64encode("café".encode()) + b"?="


@pytest.mark.parametrize("header", [b"b_other", b"echo", None])
async def test_an_mcp_name_that_is_not_the_body_s_is_refused(header):
    targets = WireTargets()
    headers = routing("tools/call") + ([(b"mcp-name", header)] if header else [])
    response = await post(
        app_over(targets), "tools/call", headers=headers, name="b_echo", arguments={}
    )
    assert (response.status, response.json()["error"]["code"]) == (400, -32020)
    assert targets.seen == []


async def test_a_target_s_refusal_keeps_its_http_status():
    response = await post(
        app_over(WireTargets()), "tools/call", name="a_needs_sampling", arguments={}
    )
    assert response.status == 400
    assert response.json()["error"]["code"] == -32021


async def test_a_call_to_a_target_that_is_down_is_an_error_the_client_can_read():
    response = await post(app_over(WireTargets(down={"a"})), "tools/call", name="a_x", arguments={})
    assert response.status == 200
    assert response.json()["error"]["code"] == -32603
    assert "'a'" in response.json()["error"]["message"]


async def test_a_cursor_is_bound_to_its_caller():
    app = app_over(WireTargets())
    cursors = app.stateless.cursors
    cursor = cursors.issue(caller_key(("https://idp.test", "alice")), "tools/list", {"a": "2"})
    assert cursor is not None
    mine = await post(app, "tools/list", cursor=cursor)
    theirs = await post(app, "tools/list", cursor=cursor, caller="mallory")
    assert mine.status == 200
    assert "result" in mine.json()
    assert (theirs.status, theirs.json()["error"]["code"]) == (400, -32602)


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_only_post_is_served_on_this_wire(method):
    response = await drive(app_over(WireTargets()), method, headers=routing("tools/list"))
    assert response.status == 405
    assert response.header(b"allow") == b"POST"


async def test_a_notification_is_taken_and_goes_nowhere():
    targets = WireTargets()
    body = orjson.dumps(
        {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 1}}
    )
    response = await drive(
        app_over(targets), "POST", headers=routing("notifications/cancelled"), body=body
    )
    assert response.status == 202
    assert targets.seen == []


async def test_an_answer_from_the_client_is_refused():
    body = orjson.dumps({"jsonrpc": "2.0", "id": 3, "result": {}})
    response = await drive(app_over(WireTargets()), "POST", headers=routing("x"), body=body)
    assert (response.status, response.json()["error"]["code"]) == (400, -32600)


async def test_a_subscription_is_one_stream_under_the_client_s_id():
    targets = WireTargets()
    wanted = {
        "toolsListChanged": True,
        "resourceSubscriptions": ["mcp+gw://a/file:///x", "mcp+gw://b/y", "z"],
    }
    response = await asyncio.wait_for(
        post(app_over(targets), "subscriptions/listen", request_id="sub-1", notifications=wanted), 5
    )
    assert response.status == 200
    sent = events(response.body)
    first = sent[0]
    assert first["method"] == "notifications/subscriptions/acknowledged"
    assert first["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "sub-1"
    assert first["params"]["notifications"] == {
        "toolsListChanged": True,
        "resourceSubscriptions": ["mcp+gw://a/file:///x", "mcp+gw://b/y"],
    }
    # Each target was given only its own URIs, under its own names.
    given = {name: m["params"]["notifications"] for name, _, m in targets.seen}
    assert given["a"]["resourceSubscriptions"] == ["file:///x"]
    assert given["b"]["resourceSubscriptions"] == ["y"]
    notifications = [m for m in sent[1:] if "method" in m]
    # The targets' progress is dropped: no call of the client's is in flight on this stream.
    assert sorted(m["method"] for m in notifications) == [
        "notifications/resources/updated",
        "notifications/resources/updated",
        "notifications/tools/list_changed",
        "notifications/tools/list_changed",
    ]
    assert all(
        m["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "sub-1"
        for m in notifications
    )
    updated = sorted(m["params"]["uri"] for m in notifications if "uri" in m["params"])
    assert updated == ["mcp+gw://a/file:///x", "mcp+gw://b/y"]
    assert (
        sum(1 for m in sent if m.get("method") == "notifications/subscriptions/acknowledged") == 1
    )
    # Once every target's stream ended, the client's ends with the listen's result.
    assert sent[-1] == {
        "jsonrpc": "2.0",
        "id": "sub-1",
        "result": {
            "_meta": {"io.modelcontextprotocol/subscriptionId": "sub-1"},
            "resultType": "complete",
        },
    }


async def test_a_subscription_no_target_offers_is_their_refusal():
    class NoListen(WireTargets):
        def listen(self, name: str, message: dict, wanted: dict) -> list[bytes]:
            raise AssertionError("not asked")

        def answer(self, name: str, message: dict) -> MemoryResponse:
            if message["method"] == "subscriptions/listen":
                return reply(message, 404, error={"code": -32601, "message": "Method not found"})
            return super().answer(name, message)

    response = await post(app_over(NoListen()), "subscriptions/listen", notifications={})
    assert (response.status, response.json()["error"]["code"]) == (404, -32601)


async def test_a_list_no_target_has_is_not_found():
    response = await post(app_over(WireTargets()), "prompts/list")
    assert (response.status, response.json()["error"]["code"]) == (404, -32601)


async def test_a_list_one_target_has_is_that_target_s():
    class PromptsAtB(WireTargets):
        def answer(self, name: str, message: dict) -> MemoryResponse:
            if message["method"] == "prompts/list" and name == "b":
                return reply(message, result={"prompts": [{"name": "p"}]})
            return super().answer(name, message)

    response = await post(app_over(PromptsAtB()), "prompts/list")
    assert response.status == 200
    assert response.json()["result"]["prompts"] == [{"name": "b_p"}]
