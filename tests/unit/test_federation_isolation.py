"""A federated route keeps its callers and its targets apart: what tool-level authorization judged
is all a target is sent, and a session is its caller's alone, whatever the token lacks."""

from __future__ import annotations

import orjson
import pytest

from mcp_oauth_gateway.asgi import CLAIMS_KEY, TOKEN_KEY
from mcp_oauth_gateway.proxy.federation.listen import own_filter
from mcp_oauth_gateway.proxy.federation.session import new_session, owner_of
from mcp_oauth_gateway.proxy.federation.shared import record_of, session_from
from unit.stages.federation_targets import INIT, SSE, Targets, events, open_session, stage
from unit.stages.harness import MemoryResponse, drive


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


JSON = [(b"content-type", b"application/json")]


class Spoofing(Targets):
    """Target a answers its calls with an answer to another request first (a client request in
    flight at another target, say), as an event stream or, `json`, as its whole answer."""

    json: bool = False
    spoof: dict[str, object] | None = None

    async def request(self, method, url, headers, body, headers_within, tls=None):  # type: ignore[no-untyped-def]
        message = orjson.loads(body) if isinstance(body, bytes) and body else {}
        if ":9001/" not in url or message.get("method") != "tools/call":
            return await super().request(method, url, headers, body, headers_within)
        spoof = self.spoof or {"jsonrpc": "2.0", "id": 99, "result": {"tools": [{"name": "x"}]}}
        if self.json:
            return MemoryResponse(
                200, [(b"content-type", b"application/json")], orjson.dumps(spoof)
            )
        own = {"jsonrpc": "2.0", "id": message["id"], "result": {"by": "a"}}
        stream = [b"data: " + orjson.dumps(m) + b"\n\n" for m in (spoof, own)]
        return MemoryResponse(200, SSE, None, stream)


def call(request_id: object, name: str = "a_t1") -> bytes:
    message = {"jsonrpc": "2.0", "id": request_id, "method": "tools/call", "params": {"name": name}}
    return orjson.dumps(message)


async def test_a_call_s_stream_answers_that_call_once_and_nothing_else():
    app = stage(Spoofing())
    headers = await open_session(app)
    response = await drive(app, "POST", headers=headers, body=call(1))
    answers = [m for m in events(response.body) if "method" not in m]
    # Target a's first answer is its answer to the call, whatever id it wrote: never another
    # request's (the client's list in flight, say), and a second one is dropped.
    assert [m["id"] for m in answers] == [1]


async def test_a_call_s_json_answer_goes_under_the_call_s_id():
    targets = Spoofing()
    targets.json = True
    app = stage(targets)
    headers = await open_session(app)
    response = await drive(app, "POST", headers=headers, body=call("c-1"))
    assert response.json()["id"] == "c-1"


async def test_a_call_s_json_answer_that_is_no_answer_is_an_error():
    targets = Spoofing()
    targets.json = True
    targets.spoof = {"jsonrpc": "2.0", "method": "notifications/message", "params": {}}
    app = stage(targets)
    headers = await open_session(app)
    response = await drive(app, "POST", headers=headers, body=call(1))
    assert response.json()["id"] == 1
    assert response.json()["error"]["code"] == -32603
