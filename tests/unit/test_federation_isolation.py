"""A federated route keeps its callers and its targets apart: what tool-level authorization judged
is all a target is sent, and a session is its caller's alone, whatever the token lacks."""

from __future__ import annotations

import orjson
import pytest

from mcp_oauth_gateway.asgi import CLAIMS_KEY, TOKEN_KEY
from mcp_oauth_gateway.proxy.federation.listen import own_filter
from mcp_oauth_gateway.proxy.federation.session import new_session, owner_of
from mcp_oauth_gateway.proxy.federation.shared import record_of, session_from
from unit.stages.federation_targets import INIT, Targets, open_session, stage
from unit.stages.harness import drive


def notification(method: str, **params: object) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", "method": method, "params": params})


@pytest.mark.parametrize(
    "body",
    [
        # Named as target a's tool (so judged as a's), but fanned out unrewritten it reaches b,
        # where a JSON-RPC server runs a request without an id as a notification.
        notification("tools/call", name="a_t1"),
        notification("resources/read", uri="file:///secret"),
        notification("prompts/get", name="secret"),
        notification("tools/list"),
    ],
)
async def test_a_request_sent_without_an_id_reaches_no_target(body):
    targets = Targets()
    app = stage(targets)
    headers = await open_session(app)
    before = len(targets.seen)
    response = await drive(app, "POST", headers=headers, body=body)
    assert response.status == 400
    assert response.json()["error"]["code"] == -32600
    assert targets.seen[before:] == []


async def test_a_client_notification_still_reaches_every_target():
    targets = Targets()
    app = stage(targets)
    headers = await open_session(app)
    body = notification("notifications/roots/list_changed")
    response = await drive(app, "POST", headers=headers, body=body)
    assert response.status == 202
    told = sorted(name for name, _, m in targets.seen if m.get("method", "").startswith("notif"))
    assert told == ["a", "b"]


def caller(token: str, **claims: object) -> dict[str, object]:
    return {CLAIMS_KEY: {"iss": "https://idp", **claims}, TOKEN_KEY: token}


@pytest.mark.parametrize(
    "claims",
    [
        {},  # no subject at all (a Keycloak client without the `basic` scope)
        {"sub": ""},
        {"sub": None},
        {"sub": ["alice"]},  # not a string: not a subject
        {"sub": {"id": 1}},
    ],
)
async def test_callers_without_a_subject_do_not_share_sessions(claims):
    app = stage(Targets())
    first = await drive(app, "POST", body=INIT, scope=caller("token-one", **claims))
    assert first.status == 200, first.body
    session = first.header(b"mcp-session-id")
    assert session is not None
    headers = [(b"mcp-session-id", session)]
    listed = orjson.dumps({"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    other = await drive(
        app, "POST", headers=headers, body=listed, scope=caller("token-two", **claims)
    )
    assert other.status == 404
    mine = caller("token-one", **claims)
    own = await drive(app, "POST", headers=headers, body=listed, scope=mine)
    assert own.status == 200
    assert "result" in own.json()


def test_the_owner_is_the_issuer_and_subject_when_there_is_one():
    assert owner_of(caller("t", sub="alice")) == ("https://idp", "alice")
    assert owner_of(caller("t", sub="alice")) == owner_of(caller("u", sub="alice"))
    assert owner_of({}) is None
    # Without one, the token is all the caller is known by; never the same as a subject's.
    assert owner_of(caller("t")) != owner_of(caller("u"))
    assert owner_of(caller("t")) == owner_of(caller("t", sub=""))
    assert owner_of(caller("t"))[1] not in (None, "", "t")


def test_a_token_owner_reads_back_from_redis_as_it_was():
    owner = owner_of(caller("t"))
    session = new_session(owner, {}, ())
    record = orjson.loads(orjson.dumps(record_of(session)))
    restored = session_from(session.id, record, ())
    assert restored is not None
    assert restored.owner == owner
    assert restored.owner != owner_of(caller("u"))


def test_a_target_s_listen_filter_holds_only_its_own_resources_under_the_one_spelling():
    wanted = {
        "toolsListChanged": True,
        "resourceSubscriptions": ["mcp+gw://a/x", "mcp+gw://b/y", "file:///z"],
        # The Python SDK reads these as resourceSubscriptions too: never passed on.
        "resource_subscriptions": ["file:///secret"],
        "ResourceSubscriptions": ["file:///secret"],
    }
    assert own_filter(wanted, "b", {"a", "b"}) == {
        "toolsListChanged": True,
        "resourceSubscriptions": ["y"],
    }
    assert own_filter({"resource_subscriptions": ["file:///secret"]}, "a", {"a", "b"}) == {}
