"""Both MCP wires pass through the gateway untouched: the 2025-11-25 session wire (initialize,
Mcp-Session-Id, GET stream, DELETE) and the 2026-07-28 stateless wire (Mcp-Method/Mcp-Name)."""

from __future__ import annotations

import httpx
import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from support import unverified_claims

ACCEPT = "application/json, text/event-stream"


def backend_requests(backend: str) -> list[dict]:
    return httpx.get(f"http://{backend}/debug/requests", timeout=5).json()


def sse_data(text: str) -> list[str]:
    return [line[5:].strip() for line in text.splitlines() if line.startswith("data:")]


def test_session_wire_raw(stack_b):
    auth = {"Authorization": f"Bearer {stack_b.token()}", "Accept": ACCEPT}
    with httpx.Client(timeout=10) as http:
        init = http.post(
            stack_b.mcp,
            headers=auth,
            json={
                "jsonrpc": "2.0",
                "id": 1,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-11-25",
                    "capabilities": {},
                    "clientInfo": {"name": "raw", "version": "1"},
                },
            },
        )
        assert init.status_code == 200, init.text
        session = init.headers["mcp-session-id"]
        session_headers = {**auth, "Mcp-Session-Id": session, "MCP-Protocol-Version": "2025-11-25"}
        note = http.post(
            stack_b.mcp,
            headers=session_headers,
            json={"jsonrpc": "2.0", "method": "notifications/initialized"},
        )
        assert note.status_code == 202
        with http.stream(
            "GET", stack_b.mcp, headers={**session_headers, "Accept": "text/event-stream"}
        ) as stream:
            assert stream.status_code == 200
            assert stream.headers["content-type"].startswith("text/event-stream")
        call = http.post(
            stack_b.mcp,
            headers={**session_headers, "Last-Event-ID": "ev-7"},
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {"name": "add", "arguments": {"a": 20, "b": 22}},
            },
        )
        assert call.status_code == 200
        assert '"result":42' in "".join(sse_data(call.text)).replace(" ", "")
        ended = http.delete(stack_b.mcp, headers=session_headers)
        assert ended.status_code == 200
        after = http.post(
            stack_b.mcp,
            headers=session_headers,
            json={"jsonrpc": "2.0", "id": 3, "method": "tools/list"},
        )
        assert after.status_code == 404, "the backend's answer for an ended session passes through"
    seen = [
        r
        for r in backend_requests(stack_b.backend)
        if dict(r["headers"]).get("mcp-session-id") == session
    ]
    assert {r["method"] for r in seen} >= {"POST", "GET", "DELETE"}
    assert any(dict(r["headers"]).get("last-event-id") == "ev-7" for r in seen)
    assert all("authorization" not in dict(r["headers"]) for r in seen)


def test_stateless_wire_headers_pass_untouched(stack_b):
    headers = {
        "Authorization": f"Bearer {stack_b.token()}",
        "Accept": ACCEPT,
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "add",
        "Mcp-Param-Region": "eu-west",
    }
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {
            "name": "add",
            "arguments": {"a": 1, "b": 2},
            "_meta": {
                "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
            },
        },
    }
    response = httpx.post(stack_b.mcp, headers=headers, json=body, timeout=10)
    assert response.status_code in (200, 400), response.text
    received = backend_requests(stack_b.backend)[-1]
    forwarded = dict(received["headers"])
    assert forwarded["mcp-method"] == "tools/call"
    assert forwarded["mcp-name"] == "add"
    assert forwarded["mcp-param-region"] == "eu-west"
    assert forwarded["mcp-protocol-version"] == "2026-07-28"
    assert "authorization" not in forwarded


@pytest.mark.parametrize("mode", ["auto", "legacy"])
async def test_python_sdk_client_over_both_wires(stack_b, mode):
    token = stack_b.token()
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=20)
    transport = streamable_http_client(stack_b.mcp, http_client=http)
    async with http, Client(transport, mode=mode) as client:
        tools = await client.list_tools()
        result = await client.call_tool("add", {"a": 4, "b": 5})
    assert sorted(t.name for t in tools.tools) == ["add", "count"]
    assert result.structured_content == {"result": 9}
    assert unverified_claims(token)["sub"] == "alice"
    methods = [dict(r["headers"]).get("mcp-method") for r in backend_requests(stack_b.backend)]
    if mode == "auto":
        assert "tools/call" in methods, "the 2026-07-28 wire carries Mcp-Method to the backend"
