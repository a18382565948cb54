"""Reading MCP requests and filtering list results for tool-level authorization."""

from __future__ import annotations

import json

import httpx
import pytest

from mcp_oauth_gateway.dataplane.mcp_messages import (
    Ambiguous,
    HeaderMismatch,
    Refusal,
    Unreadable,
    denied,
    filter_result,
    read_request,
)

from .rpc_bodies import body


def test_a_tool_call_names_its_tool():
    request = read_request(body("tools/call", name="echo", arguments={}))
    assert (request.method, request.kind, request.name, request.id) == (
        "tools/call",
        "tool",
        "echo",
        7,
    )


def test_resources_are_named_by_uri():
    request = read_request(body("resources/read", uri="file:///a"))
    assert (request.kind, request.name) == ("resource", "file:///a")


def test_headers_must_match_the_body():
    assert read_request(body("tools/call", name="echo"), b"tools/call", b"echo").name == "echo"
    with pytest.raises(HeaderMismatch, match="Mcp-Name"):
        read_request(body("tools/call", name="echo"), b"tools/call", b"admin")
    with pytest.raises(HeaderMismatch, match="Mcp-Method"):
        read_request(body("tools/call", name="echo"), b"tools/list")


def test_batches_and_repeated_keys_are_refused():
    with pytest.raises(Ambiguous, match="batches"):
        read_request(b'[{"jsonrpc": "2.0", "id": 1, "method": "tools/call"}]')
    with pytest.raises(Ambiguous, match="repeats a key"):
        read_request(b'{"method": "tools/call", "params": {"name": "add", "name": "rm"}}')


CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "é"}}


@pytest.mark.parametrize(
    "raw",
    [
        json.dumps(CALL).encode("utf-8"),
        json.dumps(CALL, ensure_ascii=False).encode("utf-8"),
        b'{"method": "tools/call", "params": {"name": "\\ud83d\\ude00"}}',  # a surrogate pair
    ],
)
def test_utf8_json_is_read(raw):
    expected = json.loads(raw)
    request = read_request(raw)
    assert (request.method, request.name) == (expected["method"], expected["params"]["name"])


@pytest.mark.parametrize(
    ("raw", "why"),
    [
        (b"\xef\xbb\xbf" + json.dumps(CALL).encode(), "byte order mark"),
        (json.dumps(CALL).encode("utf-16"), "not UTF-8"),
        (json.dumps(CALL, ensure_ascii=False).encode("utf-32-le"), "not UTF-8"),
        (b'{"method": "tools/call", "params": {"name": "\xff"}}', "not UTF-8"),
        (b'{"method": "tools/call", "params": {"name": "\\ud800"}}', "lone UTF-16 surrogate"),
        (b'{"method": "tools/call", "params": {"a": ["\\uDFFF"]}}', "lone UTF-16 surrogate"),
        (b'{"method": "tools/call", "params": {"n": NaN}}', "NaN is not a JSON number"),
        (b'{"method": "tools/call", "params": {"n": -Infinity}}', "not a JSON number"),
        (b'{"method": "tools/call", "params": {"n": ' + b"9" * 5000 + b"}}", "more digits"),
        (b'{"method": "tools/call", "params": ' + b"[" * 100_000, "deeper than 512 levels"),
        (
            b'{"method": "tools/call", "params": ' + b"[" * 600 + b"]" * 600 + b"}",
            "deeper than 512",
        ),
        (b"not json", "not JSON"),
        (b"", "not JSON"),
    ],
)
def test_bodies_the_gateway_cannot_read_exactly_are_unreadable(raw, why):
    with pytest.raises(Unreadable, match=why) as refused:
        read_request(raw)
    assert refused.value.code == -32700


def test_nesting_up_to_512_levels_is_read():
    nested = b'{"method": "tools/call", "params": ' + b"[" * 511 + b"]" * 511 + b"}"
    assert read_request(nested).method == "tools/call"


def test_a_key_repeated_at_any_depth_is_refused():
    with pytest.raises(Ambiguous, match="repeats a key"):
        read_request(b'{"method": "tools/call", "params": {"arguments": {"a": 1, "a": 2}}}')
    with pytest.raises(Ambiguous, match="repeats a key"):
        read_request(b'{"method": "tools/call", "method": "tools/list"}')


@pytest.mark.parametrize(
    "raw",
    [
        b'{"method": "ping", "METHOD": "tools/call", "params": {"name": "rm"}}',
        b'{"Method": "tools/call", "params": {"name": "rm"}}',
        b'{"method": "tools/call", "Params": {"name": "rm"}, "params": {"name": "add"}}',
        b'{"method": "tools/call", "params": {"name": "add", "NAME": "rm"}}',
        '{"method": "tools/call", "param\u017f": {"name": "rm"}}'.encode(),  # long s
        '{"method": "tools/call", "params": {"name": "add", "\u212aey": 1, "Name": "rm"}}'.encode(),
        b'{"method": "Tools/Call", "params": {"name": "rm"}}',
        b'{"method": "tools/call ", "params": {"name": "rm"}}',
    ],
)
def test_keys_and_methods_that_differ_only_in_case_are_refused(raw):
    # Go's encoding/json matches keys ignoring case: it would read another field than the one
    # the gateway judged.
    with pytest.raises(Ambiguous, match=r"case|written differently"):
        read_request(raw)


@pytest.mark.parametrize(
    "raw",
    [
        b"3",
        b'"tools/call"',
        b"null",
        b'{"id": 1}',
        b'{"method": 3}',
        b'{"method": null, "params": {"name": "rm"}}',
        b'{"method": "tools/call", "id": 1.0, "params": {"name": "add"}}',
        b'{"method": "tools/call", "id": true, "params": {"name": "add"}}',
        b'{"method": "tools/call", "id": 9007199254740992, "params": {"name": "add"}}',
        b'{"method": "tools/call", "id": [1], "params": {"name": "add"}}',
    ],
)
def test_what_is_not_a_json_rpc_message_is_refused(raw):
    with pytest.raises(Refusal) as refused:
        read_request(raw)
    assert refused.value.code == -32600


@pytest.mark.parametrize(
    "raw",
    [
        b'{"method": "ping", "method\\u0000x": "tools/call", "params": {"name": "rm"}}',
        b'{"method": "tools/call", "params": {"name": "add", "name\\u0000": "rm"}}',
        b'{"method": "tools/call\\u0000", "params": {"name": "rm"}}',
        b'{"method": "tools/call", "params": {"arguments": {"a\\u0000": 1}, "name": "add"}}',
    ],
)
def test_a_nul_in_a_key_or_the_method_is_refused(raw):
    # C parsers (cJSON and the like) read strings only up to a NUL: another key, another method.
    with pytest.raises(Ambiguous, match="NUL"):
        read_request(raw)


def test_a_clients_answer_to_the_server_is_not_a_request():
    assert read_request(b'{"jsonrpc": "2.0", "id": 3, "result": {}}') is None
    assert read_request(b'{"jsonrpc": "2.0", "id": "x", "error": {"code": 1}}') is None


def test_missing_name_is_none_so_rules_can_refuse_it():
    assert read_request(body("tools/call")).name is None


def test_lists_are_filtered_item_by_item():
    message = {"result": {"tools": [{"name": "echo"}, {"name": "admin"}, {"title": "nameless"}]}}
    assert filter_result(message, "tools/list", lambda kind, name: name != "admin")
    assert message["result"]["tools"] == [{"name": "echo"}]
    templates = {"result": {"resourceTemplates": [{"uriTemplate": "db://{id}"}]}}
    assert not filter_result(templates, "resources/templates/list", lambda kind, name: True)


def test_denied_looks_like_an_unknown_item():
    error = denied(read_request(body("prompts/get", name="secret")))
    assert error["error"] == {"code": -32602, "message": "Unknown prompt: secret"}
    assert error["id"] == 7


def _stage(response_body: bytes, content_type: bytes, chunks: int = 1):
    from mcp_oauth_gateway.controlplane.cel import compile_expression
    from mcp_oauth_gateway.controlplane.snapshot import CompiledAuthorization
    from mcp_oauth_gateway.dataplane.mcp_authz import McpAuthorization

    async def backend(scope, receive, send):
        # A backend that answers every POST with `response_body`, split into `chunks` parts.
        await receive()
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [
                    (b"content-type", content_type),
                    (b"content-length", str(len(response_body)).encode()),
                ],
            }
        )
        step = -(-len(response_body) // chunks)
        for i in range(0, len(response_body), step):
            await send(
                {
                    "type": "http.response.body",
                    "body": response_body[i : i + step],
                    "more_body": i + step < len(response_body),
                }
            )

    rules = CompiledAuthorization(
        "Allow", (compile_expression('mcp.tool.name == "echo"', mcp=True),)
    )
    return McpAuthorization(backend, rules, 1 << 20)


async def _post(app, payload: bytes) -> httpx.Response:
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://gw"
    ) as client:
        return await client.post(
            "/mcp", content=payload, headers={"content-type": "application/json"}
        )


LISTED = {"jsonrpc": "2.0", "id": 7, "result": {"tools": [{"name": "echo"}, {"name": "rm"}]}}


async def test_a_json_list_response_is_filtered_and_its_length_fixed():
    app = _stage(json.dumps(LISTED).encode(), b"application/json")
    response = await _post(app, body("tools/list"))
    assert response.json()["result"]["tools"] == [{"name": "echo"}]
    assert int(response.headers["content-length"]) == len(response.content)


async def test_an_sse_list_response_is_filtered_across_chunk_boundaries():
    stream = b"event: message\r\ndata: " + json.dumps(LISTED).encode() + b"\r\n\r\n"
    app = _stage(stream, b"text/event-stream", chunks=5)
    response = await _post(app, body("tools/list"))
    data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
    assert [json.loads(d)["result"]["tools"] for d in data] == [[{"name": "echo"}]]
    assert "event: message" in response.text


async def test_a_denied_call_is_answered_without_the_backend():
    app = _stage(b"must not be sent", b"application/json")
    response = await _post(app, body("tools/call", name="rm"))
    assert response.json()["error"]["message"] == "Unknown tool: rm"


async def test_sse_events_without_denied_items_pass_byte_for_byte():
    # Multi-line data and a comment: rebuilt events would change them.
    stream = b': keep-alive\nid: 4\ndata: {"jsonrpc": "2.0",\ndata:  "id": 1}\n\n'
    app = _stage(stream, b"text/event-stream", chunks=3)
    response = await _post(app, body("tools/list"))
    assert response.content == stream


def test_decisions_are_remembered_per_token_and_item():
    from mcp_oauth_gateway.asgi import CLAIMS_KEY, TOKEN_KEY

    stage = _stage(b"", b"application/json")
    evaluated: list[str] = []
    decide = stage._decide
    stage._decide = lambda scope, kind, name: evaluated.append(name) or decide(scope, kind, name)
    scope = {"method": "POST", "path": "/mcp", "headers": [], TOKEN_KEY: "t1", CLAIMS_KEY: {}}
    assert [stage.allowed(scope, "tool", n) for n in ("echo", "rm", "echo", "rm")] == [
        True,
        False,
        True,
        False,
    ]
    assert evaluated == ["echo", "rm"]
    assert stage.allowed({**scope, TOKEN_KEY: "t2"}, "tool", "echo")
    assert evaluated == ["echo", "rm", "echo"]


@pytest.mark.parametrize(
    ("params", "kind", "name"),
    [
        ({"ref": {"type": "ref/prompt", "name": "secret"}, "argument": {}}, "prompt", "secret"),
        ({"ref": {"type": "ref/resource", "uri": "db://{id}"}}, "resource", "db://{id}"),
        ({"ref": {"type": "ref/other", "name": "x"}}, "prompt", None),
        ({"ref": "secret"}, "prompt", None),
        ({}, "prompt", None),
    ],
)
def test_a_completion_is_judged_as_the_item_it_completes(params, kind, name):
    # Completions would show the argument values of a prompt or template the caller may not use.
    request = read_request(body("completion/complete", **params))
    assert (request.kind, request.name) == (kind, name)


def test_a_completion_reference_differing_only_in_case_is_refused():
    with pytest.raises(Ambiguous, match="case"):
        read_request(body("completion/complete", ref={"type": "ref/prompt", "NAME": "secret"}))


@pytest.mark.parametrize("method", ["resources/subscribe", "resources/unsubscribe"])
def test_a_subscription_is_judged_as_the_resource_it_names(method):
    request = read_request(body(method, uri="file:///private/x"))
    assert (request.kind, request.name) == ("resource", "file:///private/x")
