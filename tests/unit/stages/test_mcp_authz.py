"""The MCP tool-level authorization stage (`dataplane/mcp_authz.py`) on its own: the calls it
answers itself (denied, mismatched, ambiguous, too large), what it passes inward and how, and the
list results it filters on the way back.

Covered elsewhere, not repeated: reading requests and filtering results as pure functions, a JSON
list's length fixed, SSE lists filtered across chunk boundaries and passed byte for byte when
nothing is removed, the decision cache (`tests/unit/test_mcp_messages.py`)."""

from __future__ import annotations

import json

import orjson
import pytest

from unit.rpc_bodies import body as rpc

from .harness import Inner, drive
from .mcp_authz_support import ADMIN, USER, stage

JSON = [(b"content-type", b"application/json")]


def listing(field: str, *items: dict[str, str]) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 7, "result": {field: list(items)}}).encode()


def refiltered(field: str, *items: dict[str, str]) -> bytes:
    """A list result as the stage writes it back after removing items (compact JSON)."""
    return orjson.dumps({"jsonrpc": "2.0", "id": 7, "result": {field: list(items)}})


# --- answered here ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "params", "message"),
    [
        ("tools/call", {"name": "rm", "arguments": {}}, "Unknown tool: rm"),
        ("prompts/get", {"name": "secret"}, "Unknown prompt: secret"),
        ("resources/read", {"uri": "file:///etc/passwd"}, "Unknown resource: file:///etc/passwd"),
        ("tools/call", {}, "Unknown tool: None"),  # no name: nothing to authorize, refused
    ],
)
async def test_a_denied_call_is_answered_as_an_unknown_item_without_reaching_inside(
    method, params, message
):
    inner = Inner()
    response = await drive(
        stage(inner), "POST", headers=JSON, body=rpc(method, **params), scope=USER, inner=inner
    )
    assert not response.reached
    assert response.status == 200
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": 7,
        "error": {"code": -32602, "message": message},
    }
    assert response.header(b"content-type") == b"application/json"


async def test_mcp_headers_that_disagree_with_the_body_are_400_with_a_jsonrpc_error():
    inner = Inner()
    response = await drive(
        stage(inner),
        "POST",
        body=rpc("tools/call", name="echo"),
        headers=[*JSON, (b"mcp-method", b"tools/call"), (b"mcp-name", b"admin")],
        scope=USER,
        inner=inner,
    )
    assert not response.reached
    assert response.status == 400
    assert response.json() == {
        "jsonrpc": "2.0",
        "id": None,
        "error": {
            "code": -32020,
            "message": "Mcp-Name 'admin' does not match the body's name 'echo'",
        },
    }


async def test_a_batch_is_400_invalid_request():
    inner = Inner()
    batch = b"[" + rpc("tools/call", name="echo") + b"]"
    response = await drive(stage(inner), "POST", body=batch, scope=USER, inner=inner)
    assert not response.reached
    assert response.status == 400
    assert response.json()["error"] == {
        "code": -32600,
        "message": "JSON-RPC batches are not accepted when tool-level authorization is on",
    }


async def test_a_body_over_the_limit_is_413_before_it_is_read_whole():
    inner = Inner()
    response = await drive(
        stage(inner, max_body=10), "POST", body=[b"x" * 6, b"x" * 6, b"x"], scope=USER, inner=inner
    )
    assert not response.reached
    assert response.status == 413
    assert response.json() == {
        "error": "request_too_large",
        "error_description": "the request body exceeds 10 bytes, the limit set by "
        "serve --max-body-bytes",
    }


async def test_a_client_gone_before_its_body_gets_nothing_and_nothing_goes_inward():
    inner = Inner()
    response = await drive(stage(inner), "POST", scope=USER, inner=inner, disconnect_first=True)
    assert not response.reached
    assert response.messages == []


# --- passed inward --------------------------------------------------------------------------------


async def test_an_allowed_call_goes_inward_with_the_same_body_in_one_message():
    inner = Inner(headers=[*JSON, (b"content-length", b"12")])
    call = rpc("tools/call", name="echo", arguments={"text": "hi"})
    response = await drive(
        stage(inner),
        "POST",
        headers=JSON,
        scope=USER,
        inner=inner,
        body=[call[:10], call[10:20], call[20:]],
    )
    assert response.reached
    assert (inner.last.body, inner.last.body_messages) == (call, 1)
    assert inner.last.headers == [(b"host", b"gw.test"), *JSON]
    # Not a list: the answer comes back as it was sent, length and all.
    assert response.headers == [*JSON, (b"content-length", b"12")]
    assert response.body == b'{"ok": true}'


@pytest.mark.parametrize(
    "payload",
    [
        rpc("initialize", protocolVersion="2025-06-18"),
        b'{"jsonrpc": "2.0", "method": "notifications/initialized"}',
        b'{"jsonrpc": "2.0", "id": 3, "result": {"action": "accept"}}',
    ],
)
async def test_requests_that_name_no_item_pass_inward_untouched(payload):
    inner = Inner()
    response = await drive(stage(inner), "POST", body=payload, scope=USER, inner=inner)
    assert response.reached
    assert inner.last.body == payload


@pytest.mark.parametrize("method", ["GET", "DELETE", "PUT", "PATCH"])
async def test_methods_other_than_post_may_not_carry_a_body(method):
    # A lenient backend could read it as a message the gateway never judged.
    inner = Inner()
    response = await drive(stage(inner), method, body=[b"a", b"b"], scope=USER, inner=inner)
    assert not response.reached
    assert response.status == 400
    assert response.json()["error"]["code"] == -32600
    assert f"a {method} request carries a body" in response.json()["error"]["message"]


@pytest.mark.parametrize("method", ["GET", "DELETE"])
async def test_methods_other_than_post_without_a_body_pass_inward(method):
    inner = Inner()
    response = await drive(stage(inner), method, scope=USER, inner=inner)
    assert response.reached
    assert inner.last.body == b""


async def test_the_rules_see_the_callers_claims():
    inner = Inner()
    response = await drive(
        stage(inner), "POST", body=rpc("tools/call", name="rm"), scope=ADMIN, inner=inner
    )
    assert response.reached


async def test_rules_reading_the_request_are_decided_per_request():
    rule = 'request.headers["x-tier"] == "gold" || mcp.tool.name == "echo"'
    app = stage(Inner(), rule)
    gold = await drive(
        app, "POST", body=rpc("tools/call", name="rm"), scope=USER, headers=[(b"x-tier", b"gold")]
    )
    plain = await drive(app, "POST", body=rpc("tools/call", name="rm"), scope=USER)
    assert "error" not in gold.json()
    assert plain.json()["error"]["message"] == "Unknown tool: rm"


# --- list results filtered on the way back ------------------------------------------------------


@pytest.mark.parametrize(
    ("method", "field", "items", "kept"),
    [
        ("tools/list", "tools", [{"name": "echo"}, {"name": "rm"}], [{"name": "echo"}]),
        ("prompts/list", "prompts", [{"name": "secret"}, {"name": "greet"}], [{"name": "greet"}]),
        (
            "resources/list",
            "resources",
            [{"uri": "file:///public/a"}, {"uri": "file:///etc/passwd"}],
            [{"uri": "file:///public/a"}],
        ),
    ],
)
async def test_list_results_keep_only_what_the_caller_may_use(method, field, items, kept):
    inner = Inner(headers=JSON, body=listing(field, *items))
    response = await drive(stage(inner), "POST", body=rpc(method), scope=USER, inner=inner)
    assert response.json()["result"][field] == kept
    everything = await drive(
        stage(Inner(headers=JSON, body=listing(field, *items))),
        "POST",
        body=rpc(method),
        scope=ADMIN,
    )
    assert everything.json()["result"][field] == items


async def test_a_json_list_sent_in_pieces_is_sent_on_whole_after_filtering():
    whole = listing("tools", {"name": "echo"}, {"name": "rm"})
    inner = Inner(
        headers=[*JSON, (b"content-length", str(len(whole)).encode())],
        body=[whole[:15], whole[15:]],
    )
    response = await drive(stage(inner), "POST", body=rpc("tools/list"), scope=USER, inner=inner)
    expected = refiltered("tools", {"name": "echo"})
    assert response.chunks == [expected]
    assert response.headers == [*JSON, (b"content-length", str(len(expected)).encode())]


async def test_a_list_answer_that_is_not_json_passes_with_its_length_recomputed():
    inner = Inner(
        status=502,
        headers=[(b"content-type", b"text/plain"), (b"content-length", b"999")],
        body=b"upstream down",
    )
    response = await drive(stage(inner), "POST", body=rpc("tools/list"), scope=USER, inner=inner)
    assert response.status == 502
    assert response.body == b"upstream down"
    assert response.header(b"content-length") == b"13"


async def test_an_sse_list_is_filtered_event_by_event_as_the_events_arrive():
    first = b"id: 1\ndata: " + listing("tools", {"name": "rm"}, {"name": "echo"}) + b"\n\n"
    second = (
        b"data: " + json.dumps({"jsonrpc": "2.0", "method": "notifications/x"}).encode() + b"\n\n"
    )
    inner = Inner.sse([first, second], headers=[(b"content-length", b"1000")])
    response = await drive(stage(inner), "POST", body=rpc("tools/list"), scope=USER, inner=inner)
    # The head goes out before any event, without the length the filtering changes.
    assert response.messages[0]["type"] == "http.response.start"
    assert response.headers == [(b"content-type", b"text/event-stream")]
    filtered = b"id: 1\ndata: " + refiltered("tools", {"name": "echo"}) + b"\n\n"
    assert response.chunks == [filtered, second, b""]


async def test_a_name_with_a_nul_is_never_allowed():
    # The CEL runtime reads strings only up to a NUL: "echo\0rm" would pass as "echo".
    inner = Inner()
    call = await drive(
        stage(inner),
        "POST",
        headers=JSON,
        body=rpc("tools/call", name="echo\u0000rm", arguments={}),
        scope=USER,
        inner=inner,
    )
    assert not call.reached
    assert call.json()["error"]["message"] == "Unknown tool: echo\u0000rm"
    listed = Inner(headers=JSON, body=listing("tools", {"name": "echo\u0000rm"}, {"name": "echo"}))
    response = await drive(stage(listed), "POST", body=rpc("tools/list"), scope=USER, inner=listed)
    assert response.json()["result"]["tools"] == [{"name": "echo"}]


@pytest.mark.parametrize("ending", [b"\r", b"\r\n"])
async def test_sse_events_split_by_any_line_ending_are_filtered(ending):
    event = (
        (b"data: " + listing("tools", {"name": "rm"}, {"name": "echo"})).replace(b"\n", b"")
        + ending
        + ending
    )
    # Split inside the line ending, where a CRLF could be misread as two line ends.
    inner = Inner.sse([event[:-1], event[-1:]])
    response = await drive(stage(inner), "POST", body=rpc("tools/list"), scope=USER, inner=inner)
    assert b'"rm"' not in response.body
    assert b'"echo"' in response.body


async def test_an_unterminated_last_sse_event_is_filtered_too():
    tail = b"data: " + listing("tools", {"name": "rm"}, {"name": "echo"})  # no blank line
    inner = Inner.sse([tail])
    response = await drive(stage(inner), "POST", body=rpc("tools/list"), scope=USER, inner=inner)
    assert b'"rm"' not in response.body
    assert b'"echo"' in response.body
