"""Resource updates on the streams that carry them (the GET stream of a session, the listen stream
of the 2026-07-28 wire) reach a caller only for resources it may read: a subscription made before
the rules changed, or a server that sends updates unasked, tells nothing of a denied resource."""

from __future__ import annotations

import orjson

from .harness import Inner, drive
from .mcp_authz_support import ADMIN, USER, stage

JSON = [(b"content-type", b"application/json")]


def update(uri: object = None, **extra: object) -> bytes:
    params: dict[str, object] = {**extra}
    if uri is not None:
        params["uri"] = uri
    message = {"jsonrpc": "2.0", "method": "notifications/resources/updated", "params": params}
    return b"data: " + orjson.dumps(message) + b"\n\n"


OTHER = b'data: {"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n\n'
PUBLIC = update("file:///public/a")
EVENTS = [
    PUBLIC,
    update("file:///etc/shadow"),
    b"id: 7\n" + update("file:///etc/passwd", title="secret"),
    update(),  # names no resource: cannot be judged
    update(["file:///public/a"]),
    OTHER,
]


async def test_the_get_stream_carries_only_updates_of_resources_the_caller_may_read():
    inner = Inner.sse(EVENTS)
    response = await drive(stage(inner), "GET", scope=USER, inner=inner)
    assert response.status == 200
    assert response.body == PUBLIC + OTHER
    assert b"shadow" not in response.body
    assert b"passwd" not in response.body


async def test_an_admin_gets_every_update():
    inner = Inner.sse(EVENTS[:3])
    response = await drive(stage(inner), "GET", scope=ADMIN, inner=inner)
    assert response.body == b"".join(EVENTS[:3])


async def test_a_listen_stream_carries_only_updates_of_resources_the_caller_may_read():
    params = {"notifications": {"resourceSubscriptions": ["file:///public/a"]}, "_meta": {}}
    body = orjson.dumps(
        {"jsonrpc": "2.0", "id": 7, "method": "subscriptions/listen", "params": params}
    )
    inner = Inner.sse(EVENTS)
    response = await drive(stage(inner), "POST", headers=JSON, body=body, scope=USER, inner=inner)
    assert response.reached
    assert response.body == PUBLIC + OTHER
