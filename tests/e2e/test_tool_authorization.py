"""Tool-level authorization against the real MCP backend: lists filtered (SSE), denied calls
answered by the gateway and never forwarded (the backend's ledger shows it), headers checked
against the body on the 2026-07-28 wire."""

from __future__ import annotations

import json
import uuid

import httpx

ACCEPT = "application/json, text/event-stream"


def messages(response: httpx.Response) -> list[dict]:
    if response.headers["content-type"].startswith("application/json"):
        return [response.json()]
    return [json.loads(line[5:]) for line in response.text.splitlines() if line.startswith("data:")]


def session(stack, token: str, http: httpx.Client) -> dict[str, str]:
    headers = {"Authorization": f"Bearer {token}", "Accept": ACCEPT}
    init = http.post(
        stack.mcp,
        headers=headers,
        json={
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "t", "version": "1"},
            },
        },
    )
    assert init.status_code == 200, init.text
    headers = {
        **headers,
        "Mcp-Session-Id": init.headers["mcp-session-id"],
        "MCP-Protocol-Version": "2025-11-25",
    }
    http.post(
        stack.mcp, headers=headers, json={"jsonrpc": "2.0", "method": "notifications/initialized"}
    )
    return headers


def tool_names(stack, headers, http) -> list[str]:
    listed = http.post(
        stack.mcp, headers=headers, json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    )
    assert listed.status_code == 200
    return sorted(t["name"] for t in messages(listed)[-1]["result"]["tools"])


def reached_backend(stack, probe: str) -> bool:
    ledger = httpx.get(f"http://{stack.backend}/debug/requests", timeout=5).json()
    return any(dict(r["headers"]).get("x-probe") == probe for r in ledger)


def test_lists_are_filtered_per_caller(stack_tools):
    with httpx.Client(timeout=10) as http:
        user = session(stack_tools, stack_tools.token(), http)
        admin = session(stack_tools, stack_tools.token(groups=["mcp-agent", "admin"]), http)
        assert tool_names(stack_tools, user, http) == ["add"]
        assert tool_names(stack_tools, admin, http) == ["add", "count"]


def test_a_denied_call_never_reaches_the_backend(stack_tools):
    with httpx.Client(timeout=10) as http:
        headers = session(stack_tools, stack_tools.token(), http)
        probe = uuid.uuid4().hex
        call = http.post(
            stack_tools.mcp,
            headers={**headers, "X-Probe": probe},
            json={
                "jsonrpc": "2.0",
                "id": 9,
                "method": "tools/call",
                "params": {"name": "count", "arguments": {"n": 2}},
            },
        )
        assert call.status_code == 200
        assert call.json() == {
            "jsonrpc": "2.0",
            "id": 9,
            "error": {"code": -32602, "message": "Unknown tool: count"},
        }
        assert not reached_backend(stack_tools, probe)
        allowed_probe = uuid.uuid4().hex
        added = http.post(
            stack_tools.mcp,
            headers={**headers, "X-Probe": allowed_probe},
            json={
                "jsonrpc": "2.0",
                "id": 10,
                "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": 2, "b": 3}},
            },
        )
        assert messages(added)[-1]["result"]["structuredContent"] == {"result": 5}
        assert reached_backend(stack_tools, allowed_probe)


def test_headers_must_match_the_body_on_the_new_wire(stack_tools):
    probe = uuid.uuid4().hex
    mismatch = httpx.post(
        stack_tools.mcp,
        headers={
            "Authorization": f"Bearer {stack_tools.token()}",
            "Accept": ACCEPT,
            "X-Probe": probe,
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "tools/call",
            "Mcp-Name": "add",
        },
        json={
            "jsonrpc": "2.0",
            "id": 4,
            "method": "tools/call",
            "params": {"name": "count", "arguments": {"n": 1}},
        },
        timeout=10,
    )
    assert mismatch.status_code == 400
    assert mismatch.json()["error"]["code"] == -32020
    assert not reached_backend(stack_tools, probe)


def test_the_config_dump_shows_the_tool_rules(stack_tools):
    config = httpx.get(f"{stack_tools.status.rstrip('/')}/config", timeout=5).json()
    rules = config["policies"]["default/mcp-authn"]["mcpAuthorization"]
    assert rules == {
        "action": "Allow",
        "rules": ['mcp.tool.name == "add"', '"admin" in jwt.groups'],
    }
