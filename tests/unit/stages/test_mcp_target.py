"""`mcp.target` in tool-level rules: the target an item belongs to (a backend's only target,
or the one a federated name or URI carries), with names as the client sees them; an item that
names no target has no `mcp.target`, so a rule on it never holds."""

from __future__ import annotations

import orjson
import pytest

from mcp_oauth_gateway.controlplane.cel import compile_expression
from mcp_oauth_gateway.controlplane.snapshot import CompiledAuthorization
from mcp_oauth_gateway.dataplane.mcp_authz import McpAuthorization
from mcp_oauth_gateway.dataplane.mcp_messages import item_variables

from .harness import Inner, drive
from .mcp_authz_support import USER

RULE = 'mcp.target != "b" || (has(mcp.tool) && mcp.tool.name == "b_whoami")'


def stage(inner: Inner, targets: tuple[str, ...]) -> McpAuthorization:
    rules = CompiledAuthorization("Allow", (compile_expression(RULE, mcp=True),))
    return McpAuthorization(inner, rules, 1 << 20, targets=targets)


def test_the_variables_name_the_target():
    assert item_variables("tool", "b_add", ("a", "b")) == {"tool": {"name": "b_add"}, "target": "b"}
    assert item_variables("resource", "mcp+gw://a/x://1", ("a", "b"))["target"] == "a"
    assert item_variables("tool", "add", ("only",)) == {"tool": {"name": "add"}, "target": "only"}
    assert "target" not in item_variables("tool", "c_add", ("a", "b"))
    assert "target" not in item_variables("prompt", "greet", ())


@pytest.mark.parametrize(
    ("name", "allowed"),
    [("a_add", True), ("b_add", False), ("b_whoami", True), ("c_add", False), ("add", False)],
)
async def test_a_call_is_judged_by_its_target(name, allowed):
    body = orjson.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name}}
    )
    inner = Inner()
    response = await drive(stage(inner, ("a", "b")), "POST", body=body, scope=USER, inner=inner)
    assert response.reached is allowed
    if not allowed:
        assert response.json()["error"]["message"] == f"Unknown tool: {name}"


async def test_merged_lists_lose_the_denied_targets_items():
    tools = [{"name": n} for n in ("a_add", "b_add", "b_whoami")]
    resources = [{"uri": "mcp+gw://a/n://a"}, {"uri": "mcp+gw://b/n://b"}]
    inner = Inner(body=orjson.dumps({"jsonrpc": "2.0", "id": 1, "result": {"tools": tools}}))
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/list"}'
    response = await drive(stage(inner, ("a", "b")), "POST", body=body, scope=USER, inner=inner)
    assert [t["name"] for t in response.json()["result"]["tools"]] == ["a_add", "b_whoami"]
    inner = Inner(
        body=orjson.dumps({"jsonrpc": "2.0", "id": 2, "result": {"resources": resources}})
    )
    body = b'{"jsonrpc":"2.0","id":2,"method":"resources/list"}'
    response = await drive(stage(inner, ("a", "b")), "POST", body=body, scope=USER, inner=inner)
    assert response.json()["result"]["resources"] == [{"uri": "mcp+gw://a/n://a"}]


async def test_a_single_target_is_named_too():
    body = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"add"}}'
    for target, reached in (("a", True), ("b", False)):
        inner = Inner()
        response = await drive(stage(inner, (target,)), "POST", body=body, scope=USER, inner=inner)
        assert response.reached is reached
