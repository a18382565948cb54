"""Reading MCP requests and filtering list results for tool-level authorization."""

from __future__ import annotations

import json

import pytest

from mcp_oauth_gateway.dataplane.mcp_messages import (
    HeaderMismatch,
    denied,
    filter_result,
    read_request,
)


def body(method: str, **params: object) -> bytes:
    return json.dumps({"jsonrpc": "2.0", "id": 7, "method": method, "params": params}).encode()


def test_a_tool_call_names_its_tool():
    request = read_request(body("tools/call", name="echo", arguments={}))
    assert (request.method, request.kind, request.name, request.id) == \
        ("tools/call", "tool", "echo", 7)


def test_resources_are_named_by_uri():
    request = read_request(body("resources/read", uri="file:///a"))
    assert (request.kind, request.name) == ("resource", "file:///a")


def test_headers_must_match_the_body():
    assert read_request(body("tools/call", name="echo"), b"tools/call", b"echo").name == "echo"
    with pytest.raises(HeaderMismatch, match="Mcp-Name"):
        read_request(body("tools/call", name="echo"), b"tools/call", b"admin")
    with pytest.raises(HeaderMismatch, match="Mcp-Method"):
        read_request(body("tools/call", name="echo"), b"tools/list")


@pytest.mark.parametrize("raw", [b"not json", b"[]", b'{"id": 1}', b'{"method": 3}'])
def test_non_requests_are_not_read(raw):
    assert read_request(raw) is None


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
