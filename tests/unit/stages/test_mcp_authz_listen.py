"""Tool-level authorization of the 2026-07-28 wire's `subscriptions/listen`: the stream would
deliver the updates of every resource it names, so each is judged as a `resources/subscribe` of
it is (rules and item scopes); a filter the gateway cannot read exactly is refused, since a
backend might find subscriptions in it the gateway did not see. And an `Mcp-Name` that travels
base64-wrapped (a URI outside printable ASCII) is compared unwrapped."""

from __future__ import annotations

import base64

import orjson
import pytest

from mcp_oauth_gateway.dataplane.mcp_authz import McpAuthorization

from .harness import Inner, drive
from .mcp_authz_support import ADMIN, USER, stage
from .scopes_support import PRM, caller, scopes

JSON = [(b"content-type", b"application/json")]


def listen(notifications: object) -> bytes:
    params = {"notifications": notifications, "_meta": {}}
    return orjson.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": params}
    )


@pytest.mark.parametrize(
    ("uris", "reached"),
    [
        ([], True),
        (["file:///public/a", "file:///public/b"], True),
        (["file:///public/a", "file:///etc/shadow"], False),
        (["file:///etc/shadow"], False),
    ],
)
async def test_a_listen_stream_may_name_only_resources_the_caller_may_read(uris, reached):
    inner = Inner()
    body = listen({"toolsListChanged": True, "resourceSubscriptions": uris})
    response = await drive(stage(inner), "POST", headers=JSON, body=body, scope=USER, inner=inner)
    assert response.reached is reached
    if not reached:
        assert response.json()["error"] == {
            "code": -32602,
            "message": "Unknown resource: file:///etc/shadow",
        }


async def test_an_admin_may_subscribe_to_anything():
    inner = Inner()
    body = listen({"resourceSubscriptions": ["file:///etc/shadow"]})
    response = await drive(stage(inner), "POST", headers=JSON, body=body, scope=ADMIN, inner=inner)
    assert response.reached


async def test_a_listen_stream_short_of_a_resource_s_scope_is_a_step_up():
    inner = Inner()
    rules = scopes(items=[('mcp.resource.uri.startsWith("file:///private/")', ["files:read"])])
    app = McpAuthorization(inner, None, 1 << 20, rules, PRM)
    body = listen({"resourceSubscriptions": ["file:///private/a"]})
    short = await drive(app, "POST", headers=JSON, body=body, scope=caller(""), inner=inner)
    assert short.status == 403
    assert b'scope="files:read"' in (short.header(b"www-authenticate") or b"")
    granted = await drive(
        app, "POST", headers=JSON, body=body, scope=caller("files:read"), inner=inner
    )
    assert granted.reached


@pytest.mark.parametrize(
    "notifications",
    [
        "all",  # not an object
        {"resourceSubscriptions": "file:///etc/shadow"},  # not a list
        {"resourceSubscriptions": [1]},  # not strings
        {
            "ResourceSubscriptions": ["file:///etc/shadow"]
        },  # read as the field by case-folding servers
        # Read as the field by the Python SDK's models (pydantic, populate_by_name).
        {"resource_subscriptions": ["file:///etc/shadow"]},
        {"resourceSubscriptions": [], "resource_subscriptions": ["file:///etc/shadow"]},
        {"Resource_Subscriptions": ["file:///etc/shadow"]},
    ],
)
async def test_a_filter_the_gateway_cannot_read_exactly_is_refused(notifications):
    inner = Inner()
    body = listen(notifications)
    response = await drive(stage(inner), "POST", headers=JSON, body=body, scope=USER, inner=inner)
    assert not response.reached
    assert response.status == 400


async def test_a_params_key_that_folds_to_notifications_is_refused():
    inner = Inner()
    params = {"Notifications": {"resourceSubscriptions": ["file:///etc/shadow"]}}
    body = orjson.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": params}
    )
    response = await drive(stage(inner), "POST", headers=JSON, body=body, scope=USER, inner=inner)
    assert not response.reached


@pytest.mark.parametrize(
    ("header", "reached"),
    [
        (b"=?base64?" + base64.b64encode("file:///public/é".encode()) + b"?=", True),
        (b"=?base64?" + base64.b64encode(b"file:///public/other") + b"?=", False),
        (b"=?base64?not base64?=", False),
    ],
)
async def test_a_wrapped_mcp_name_is_compared_unwrapped(header, reached):
    inner = Inner()
    body = orjson.dumps(
        {
            "jsonrpc": "2.0",
            "id": 7,
            "method": "resources/read",
            "params": {"uri": "file:///public/é"},
        }
    )
    headers = [*JSON, (b"mcp-method", b"resources/read"), (b"mcp-name", header)]
    response = await drive(
        stage(inner), "POST", headers=headers, body=body, scope=USER, inner=inner
    )
    assert response.reached is reached
    if not reached:
        assert response.json()["error"]["code"] == -32020
