"""Several real MCP servers behind one route: two `mcp` SDK servers (one answering with event
streams, one with plain JSON) and the TypeScript SDK server (stateless), a real `mcp` SDK client
listing and calling across them, a rule per target, and one target killed and brought back."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from mcp.shared.exceptions import MCPError

from federation_support import (
    ISSUER,
    Federated,
    config_path,
    kill,
    named_server,
    resources,
    start_gateway,
)
from node_clients import run_ts_bearer_client
from support import (
    INITIALIZE,
    NODE_DIR,
    Process,
    free_port,
    mcp_headers,
    new_key,
    node,
    wait_for_port,
    wait_until,
)

ADMIN = "admin"


@pytest.fixture(scope="module")
def federated(logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federated]:
    ports = {"a": free_port(), "b": free_port(), "ts": free_port()}
    processes = {
        "a": named_server("a", ports["a"], logs),
        "b": named_server("b", ports["b"], logs, json_answers=True),
        "ts": Process(
            "fed-ts",
            [node(), str(NODE_DIR / "ts_backend.mjs")],
            logs,
            env={"PORT": str(ports["ts"])},
        ),
    }
    wait_for_port(ports["ts"], processes["ts"])
    key = new_key("federation-key")
    port = free_port()
    directory = tmp_path_factory.mktemp("federation")
    audit = directory / "audit.jsonl"
    gateway = start_gateway(directory, logs, port, ports, key, args=("--audit-log", str(audit)))
    stack = Federated(f"http://127.0.0.1:{port}/mcp", key, logs, ports, processes)
    stack.config = config_path(directory)
    stack.gateway_port = port
    stack.audit = audit
    try:
        yield stack
    finally:
        gateway.stop()
        for process in stack.processes.values():
            process.stop()


def text(result) -> str:
    return result.content[0].text


async def tool_names(session) -> list[str]:
    return sorted(tool.name for tool in (await session.list_tools()).tools)


A_TOOLS = ["a_add", "a_count", "a_whoami"]
B_TOOLS = ["b_add", "b_count", "b_whoami"]
TS_TOOLS = ["ts_add", "ts_admin"]  # ts_delete_all: hidden by a rule on the tool


async def test_one_session_lists_and_calls_every_target(federated):
    async with federated.session(ADMIN) as session:
        assert await tool_names(session) == sorted(A_TOOLS + B_TOOLS + TS_TOOLS)
        assert text(await session.call_tool("a_whoami", {})) == "a"
        assert text(await session.call_tool("b_whoami", {})) == "b"
        assert text(await session.call_tool("b_add", {"a": 2, "b": 3})) == "5"
        assert text(await session.call_tool("ts_add", {})) == "add ran"
        ran = httpx.get(f"http://127.0.0.1:{federated.ports['ts']}/debug/ran").json()
        assert {"tool": "add", "args": {}} in ran


async def test_progress_inside_a_call_reaches_the_client(federated):
    seen: list[float] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append(done)

    async with federated.session(ADMIN) as session:
        result = await session.call_tool("a_count", {"n": 3}, progress_callback=progress)
        assert text(result) == "a counted to 3"
        assert seen == [1, 2, 3]


async def test_prompts_and_resources_carry_their_target(federated):
    async with federated.session(ADMIN) as session:
        prompts = sorted(p.name for p in (await session.list_prompts()).prompts)
        assert prompts == ["a_greet", "b_greet"]
        greeting = await session.get_prompt("b_greet", {"who": "x"})
        assert greeting.messages[0].content.text == "b greets x"
        uris = sorted(str(r.uri) for r in (await session.list_resources()).resources)
        assert uris == ["mcp+gw://a/note://a", "mcp+gw://b/note://b"]
        templates = (await session.list_resource_templates()).resource_templates
        assert sorted(t.uri_template for t in templates) == [
            "mcp+gw://a/note://topics/{topic}",
            "mcp+gw://b/note://topics/{topic}",
        ]
        read = await session.read_resource("mcp+gw://b/note://topics/cats")
        assert read.contents[0].text == "b on cats"
        assert str(read.contents[0].uri) == "mcp+gw://b/note://topics/cats"


async def test_a_rule_on_the_target_hides_its_tools(federated):
    async with federated.session("users") as session:
        assert await tool_names(session) == sorted(A_TOOLS + TS_TOOLS)
        with pytest.raises(MCPError, match="Unknown tool: b_whoami"):
            await session.call_tool("b_whoami", {})
        assert text(await session.call_tool("a_whoami", {})) == "a"


def audited(federated: Federated, sub: str) -> list[dict]:
    """The whole audit lines written so far about `sub`'s calls."""
    text = federated.audit.read_text() if federated.audit.exists() else ""
    lines = [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]
    return [
        line
        for line in lines
        if (line["caller"] or {}).get("sub") == sub and (line["mcp"] or {}).get("tool")
    ]


async def test_the_audit_trail_says_who_called_which_target_s_tool_and_why(federated):
    """Line by line: the target and tool of each call, who called, and the rule that allowed
    it or that none held."""
    async with federated.session("users", sub="carol") as session:
        assert text(await session.call_tool("a_whoami", {})) == "a"
        with pytest.raises(MCPError, match="Unknown tool: b_whoami"):
            await session.call_tool("b_whoami", {})
        with pytest.raises(MCPError, match="Unknown tool: ts_delete_all"):
            await session.call_tool("ts_delete_all", {})

    def three() -> bool:
        return len(audited(federated, "carol")) >= 3

    wait_until(three, 30, "carol's three calls in the audit trail")
    lines = {line["mcp"]["tool"]: line for line in audited(federated, "carol")}
    allowed = lines["a_whoami"]
    # The last stage it passed: the federation stage, which answers a federated route.
    assert (allowed["decision"], allowed["stage"], allowed["mcp"]["target"]) == (
        "allow",
        "federation",
        "a",
    )
    assert allowed["caller"]["iss"] == ISSUER
    assert 'Allow rule `mcp.target == "a"` holds' in allowed["reason"]
    for tool, target in (("b_whoami", "b"), ("ts_delete_all", "ts")):
        denied = lines[tool]
        assert (denied["decision"], denied["stage"], denied["mcp"]["target"]) == (
            "deny",
            "mcp-authorization",
            target,
        )
        assert denied["reason"].startswith(f"tool '{tool}': no Allow rule holds")


def raw_call(federated: Federated, headers: dict[str, str], name: str) -> httpx.Response:
    body = {"jsonrpc": "2.0", "id": 5, "method": "tools/call", "params": {"name": name}}
    return httpx.post(federated.url, headers=headers, json=body, timeout=30)


async def test_a_killed_target_drops_out_and_comes_back(federated):
    headers = mcp_headers(federated.token(ADMIN))
    init = httpx.post(federated.url, headers=headers, json=INITIALIZE, timeout=30)
    assert init.status_code == 200, init.text
    headers["Mcp-Session-Id"] = init.headers["mcp-session-id"]
    async with federated.session(ADMIN) as session:
        kill(federated.processes["b"])
        assert await tool_names(session) == sorted(A_TOOLS + TS_TOOLS)
        with pytest.raises(MCPError, match="'b' behind this route is unavailable"):
            await session.call_tool("b_whoami", {})
        down = raw_call(federated, headers, "b_whoami")
        assert down.status_code == 200
        assert down.json()["error"]["code"] == -32603
        assert text(await session.call_tool("a_whoami", {})) == "a"

        port = federated.ports["b"]
        federated.processes["b"] = named_server("b", port, federated.logs, json_answers=True)
        assert await tool_names(session) == sorted(A_TOOLS + B_TOOLS + TS_TOOLS)
        assert text(await session.call_tool("b_whoami", {})) == "b"
        up = raw_call(federated, headers, "b_whoami")
        assert up.json()["result"]["content"][0]["text"] == "b"


def test_the_client_session_is_the_gateways(federated):
    headers = mcp_headers(federated.token(ADMIN))
    init = httpx.post(federated.url, headers=headers, json=INITIALIZE, timeout=30)
    session_id = init.headers["mcp-session-id"]
    assert len(session_id) >= 40
    result = init.json()["result"]
    assert result["serverInfo"]["name"] == "mcp-oauth-gateway"
    assert result["protocolVersion"] == "2025-11-25"
    listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    # Another caller's token does not open this session; nor does an unknown id.
    other = mcp_headers(federated.token(ADMIN, sub="mallory"), **{"Mcp-Session-Id": session_id})
    assert httpx.post(federated.url, headers=other, json=listed).status_code == 404
    assert httpx.post(federated.url, headers=headers, json=listed).status_code == 400
    own = {**headers, "Mcp-Session-Id": session_id}
    # The targets that offer a GET stream (the `mcp` SDK servers) make the client's.
    with httpx.stream("GET", federated.url, headers=own, timeout=30) as stream:
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
    assert httpx.delete(federated.url, headers=own).status_code == 204
    assert httpx.post(federated.url, headers=own, json=listed).status_code == 404


def test_the_typescript_client_lists_and_calls_across_targets(federated):
    report = run_ts_bearer_client(federated.url, federated.token(ADMIN), "b_whoami")
    assert report["server"]["name"] == "mcp-oauth-gateway"
    assert sorted(report["tools"]) == sorted(A_TOOLS + B_TOOLS + TS_TOOLS)
    assert report["called"] == [{"type": "text", "text": "b"}]


def test_a_session_outlives_a_reload_that_keeps_the_targets(federated):
    headers = mcp_headers(federated.token("users"))
    init = httpx.post(federated.url, headers=headers, json=INITIALIZE, timeout=30)
    headers["Mcp-Session-Id"] = init.headers["mcp-session-id"]
    listed = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    origin = "https://app.example"

    def names() -> list[str]:
        response = httpx.post(federated.url, headers=headers, json=listed, timeout=30)
        assert response.status_code == 200, response.text  # the session is still known
        return sorted(t["name"] for t in response.json()["result"]["tools"])

    def cors_allowed() -> bool:
        preflight = {"Origin": origin, "Access-Control-Request-Method": "POST"}
        answer = httpx.options(federated.url, headers=preflight, timeout=30)
        return answer.headers.get("access-control-allow-origin") == origin

    def write(cors: str | None) -> None:
        text = resources(federated.gateway_port, federated.ports, federated.key, cors_origin=cors)
        federated.config.write_text(text)

    assert names() == sorted(A_TOOLS + TS_TOOLS)
    assert not cors_allowed()
    # A reload of the same targets (a route's CORS filter: a reload may not widen who gets in,
    # so the change is one the gateway applies both ways).
    try:
        write(origin)
        wait_until(cors_allowed, what="the reload")
        assert names() == sorted(A_TOOLS + TS_TOOLS)
    finally:
        write(None)
        wait_until(lambda: not cors_allowed(), what="the reload back")
    assert names() == sorted(A_TOOLS + TS_TOOLS)


def listen_request(
    federated: Federated,
    groups: tuple[str, ...],
    uris: list[str],
    field: str = "resourceSubscriptions",
):
    """A `subscriptions/listen` on the 2026-07-28 wire (its URIs under `field`), as its
    stream's first event (or the JSON answer when there is no stream)."""
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 9,
        "method": "subscriptions/listen",
        "params": {"_meta": meta, "notifications": {field: uris}},
    }
    headers = {
        "Authorization": f"Bearer {federated.token(*groups)}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "subscriptions/listen",
    }
    with httpx.stream("POST", federated.url, json=body, headers=headers, timeout=30) as answer:
        if not answer.headers["content-type"].startswith("text/event-stream"):
            answer.read()
            return answer.status_code, answer.json()
        for line in answer.iter_lines():
            if line.startswith("data:"):
                return answer.status_code, json.loads(line[5:])
    raise AssertionError("the stream ended without an event")


def test_a_listen_stream_on_a_resource_the_rules_deny_is_refused(federated):
    """With the real SDK 2.x servers as targets: a user may listen to target a's resource
    (the stream opens with the gateway's acknowledgement) but not to b's, which only admins
    may use; the refusal names the resource as unknown, as for a read."""
    status, first = listen_request(federated, ("users",), ["mcp+gw://a/note://a"])
    assert status == 200
    assert first["method"] == "notifications/subscriptions/acknowledged"
    assert first["params"]["notifications"]["resourceSubscriptions"] == ["mcp+gw://a/note://a"]
    uris = ["mcp+gw://a/note://a", "mcp+gw://b/note://b"]
    status, refused = listen_request(federated, ("users",), uris)
    assert status == 200
    assert refused["error"] == {"code": -32602, "message": "Unknown resource: mcp+gw://b/note://b"}
    status, admin = listen_request(federated, (ADMIN,), uris)
    assert admin["method"] == "notifications/subscriptions/acknowledged"


@pytest.mark.parametrize("field", ["resource_subscriptions", "RESOURCESUBSCRIPTIONS"])
def test_a_listen_filter_under_another_spelling_is_refused(federated, field):
    """The SDK 2.x servers' models read `resource_subscriptions` as `resourceSubscriptions`
    (pydantic's populate_by_name): a user naming b's resource under that spelling, unprefixed,
    would have been judged as subscribing to nothing and subscribed at b. Refused as a filter
    the gateway cannot read exactly, before any target is asked."""
    status, refused = listen_request(federated, ("users",), ["note://b"], field)
    assert status == 400
    assert refused["error"]["code"] == -32600
