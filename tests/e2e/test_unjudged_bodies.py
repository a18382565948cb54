"""Nothing reaches a real, lenient backend unjudged: the TypeScript SDK's Express app (which
inflates gzip and deflate, replaces invalid UTF-8 and reads big numbers) behind tool rules, a
per-tool step-up scope and the backend's credentials. Every request shape that once made a
denied tool run is sent again; the backend's ledger of tool calls that really ran is the
verdict, not the gateway's answer alone."""

from __future__ import annotations

import gzip
import json
import uuid
import zlib

import httpx
import pytest

from conftest import TS_BACKEND_SECRET as SECRET
from conftest import Stack

ACCEPT = "application/json, text/event-stream"


@pytest.fixture
def stack(stack_ts_tools: Stack) -> Stack:
    """The gateway in front of the TypeScript backend (tests/conftest.py)."""
    return stack_ts_tools


def ran(stack: Stack) -> list[dict]:
    """The tool calls the backend really ran."""
    return httpx.get(f"http://{stack.backend}/debug/ran", timeout=5).json()


def post(stack: Stack, body: bytes, token: str | None = None, **headers: str) -> httpx.Response:
    sent = {
        "Authorization": f"Bearer {token or stack.token(scope='openid mcp:tools')}",
        "Accept": ACCEPT,
        "Content-Type": "application/json",
        **{k.replace("_", "-"): v for k, v in headers.items()},
    }
    return httpx.post(stack.mcp, content=body, headers=sent, timeout=10)


def call(name: str, marker: str, **extra: object) -> bytes:
    arguments = {"a": marker, **extra}
    message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name}}
    message["params"]["arguments"] = arguments
    return json.dumps(message).encode()


def ran_with(stack: Stack, marker: str) -> list[str]:
    return [r["tool"] for r in ran(stack) if marker in json.dumps(r["args"])]


def test_an_allowed_tool_runs_and_a_denied_one_does_not(stack):
    marker = uuid.uuid4().hex
    assert post(stack, call("add", marker)).status_code == 200
    denied = post(stack, call("delete_all", marker))
    assert denied.json()["error"] == {"code": -32602, "message": "Unknown tool: delete_all"}
    assert ran_with(stack, marker) == ["add"]


def variants(marker: str) -> list[tuple[str, bytes, dict[str, str]]]:
    """The same denied call in every shape that once reached the backend unjudged."""
    plain = call("delete_all", marker)
    return [
        ("gzip", gzip.compress(plain), {"Content-Encoding": "gzip"}),
        ("deflate", zlib.compress(plain), {"Content-Encoding": "deflate"}),
        ("br", plain, {"Content-Encoding": "br"}),
        ("gzip twice", gzip.compress(gzip.compress(plain)), {"Content-Encoding": "gzip, gzip"}),
        ("invalid UTF-8", plain.replace(marker.encode(), marker.encode() + b"\xff"), {}),
        ("5000 digits", plain.replace(b'"a": ', b'"n": ' + b"7" * 5000 + b', "a": '), {}),
        ("lone surrogate", plain.replace(b'"delete_all"', b'"delete_all\\ud800"'), {}),
        ("BOM", b"\xef\xbb\xbf" + plain, {}),
        ("UTF-16 charset", plain, {"Content-Type": "application/json; charset=utf-16"}),
        ("case", plain.replace(b'"method"', b'"method": "ping", "METHOD"'), {}),
    ]


@pytest.mark.parametrize("shape", [v[0] for v in variants("x")])
def test_a_denied_tool_never_runs_whatever_the_body_looks_like(stack, shape):
    marker = uuid.uuid4().hex
    _, body, headers = next(v for v in variants(marker) if v[0] == shape)
    response = post(stack, body, **headers)
    assert response.status_code in (200, 400), response.text
    assert "result" not in response.json()
    assert ran_with(stack, marker) == []


def test_a_body_nested_100000_deep_is_a_parse_error_not_a_500(stack):
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":' + b"[" * 100_000
    response = post(stack, body)
    assert response.status_code == 400
    assert response.json()["error"]["code"] == -32700


def test_an_allowed_tool_sent_compressed_runs_with_the_bytes_that_were_judged(stack):
    marker = uuid.uuid4().hex
    response = post(stack, gzip.compress(call("add", marker)), Content_Encoding="gzip")
    assert response.status_code == 200, response.text
    assert ran_with(stack, marker) == ["add"]


@pytest.mark.parametrize("coding", ["none", "gzip"])
def test_a_per_tool_scope_holds_whatever_the_body_looks_like(stack, coding):
    marker = uuid.uuid4().hex
    body = call("admin", marker)
    headers = {"Content-Encoding": "gzip"} if coding == "gzip" else {}
    short = post(stack, gzip.compress(body) if headers else body, **headers)
    assert short.status_code == 403
    assert 'scope="mcp:admin"' in short.headers["www-authenticate"]
    assert ran_with(stack, marker) == []
    admin = stack.token(scope="openid mcp:tools mcp:admin")
    assert post(stack, body, token=admin).status_code == 200
    assert ran_with(stack, marker) == ["admin"]


def tool_names(response: httpx.Response) -> list[str]:
    lines = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
    return [t["name"] for t in json.loads(lines[-1])["result"]["tools"]]


def test_a_list_with_a_description_cut_mid_emoji_is_still_filtered(stack):
    listed = post(stack, b'{"jsonrpc":"2.0","id":2,"method":"tools/list"}')
    assert listed.status_code == 200
    assert tool_names(listed) == ["add", "admin"]


def test_the_backend_gets_the_gateways_credentials_never_a_forged_or_stripped_one(stack):
    marker = uuid.uuid4().hex
    forged = '{"sub":"root","groups":["admin"]}'
    refused = [
        {"Connection": "X-Mcp-Identity", "X_Mcp_Identity": forged},
        {"Connection": "X-Api-Key"},
        {"X_Api_Key": "forged"},
    ]
    for extra in refused:
        response = httpx.post(
            stack.mcp,
            content=call("add", marker),
            headers={
                "Authorization": f"Bearer {stack.token(scope='openid mcp:tools')}",
                "Accept": ACCEPT,
                "Content-Type": "application/json",
                **extra,
            },
            timeout=10,
        )
        assert response.status_code == 400, (extra, response.text)
    assert ran_with(stack, marker) == []
    assert post(stack, call("add", marker), X_Probe=marker).status_code == 200
    seen = httpx.get(f"http://{stack.backend}/debug/requests", timeout=5).json()[-1]["headers"]
    pairs = [(seen[i].lower(), seen[i + 1]) for i in range(0, len(seen), 2)]
    assert [v for k, v in pairs if k == "x-api-key"] == [SECRET]
    identities = [json.loads(v) for k, v in pairs if k.replace("_", "-") == "x-mcp-identity"]
    assert [i["sub"] for i in identities] == ["alice"]
