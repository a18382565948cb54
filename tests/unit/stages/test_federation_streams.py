"""What the federation stage routes besides calls, over targets played in memory: the client's
GET stream merged from its targets', a target's request reaching the client (on the GET stream
or inside a call's stream) under an id the session minted and the client's answer going back to
that target alone, a forged or foreign answer refused, a cancellation reaching only the target
that has the request, progress passing only for a call in flight at the target that reports
it, and each refusal recorded for the audit trail as the federation stage's."""

from __future__ import annotations

import asyncio

import orjson

from mcp_oauth_gateway.asgi import AUDIT_KEY, CLAIMS_KEY
from mcp_oauth_gateway.audit import AuditRecord

from .federation_targets import (
    ASK,
    Targets,
    answer,
    events,
    open_session,
    progress,
    rpc,
    stage,
)
from .harness import drive

CHANGED = b'data: {"jsonrpc":"2.0","method":"notifications/tools/list_changed"}\n\n'
UPDATED = (
    b'data: {"jsonrpc":"2.0","method":"notifications/resources/updated",'
    b'"params":{"uri":"note://b"}}\n\n'
)


def sent_to(targets: Targets, name: str) -> list[dict]:
    """The messages `name` was sent after its session opened."""
    return [m for n, _, m in targets.seen if n == name and m and m.get("method") != "initialize"]


async def test_the_get_stream_merges_the_targets_and_answers_go_back_to_the_one_that_asked():
    targets = Targets(streams={"a": [CHANGED, ASK], "b": [ASK, UPDATED]})
    app = stage(targets)
    headers = await open_session(app)
    stream = await drive(app, "GET", headers=headers)
    assert stream.status == 200
    assert stream.header(b"content-type") == b"text/event-stream"
    got = events(stream.body)
    assert {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"} in got
    assert {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"uri": "mcp+gw://b/note://b"},
    } in got
    asked = {m["id"] for m in got if m.get("method") == "sampling/createMessage"}
    assert len(asked) == 2  # both targets asked with id 0: two ids for the client
    for minted in asked:
        answered = await drive(app, "POST", headers=headers, body=answer(minted))
        assert answered.status == 202
    # Each target got one answer, under its own id.
    for name in ("a", "b"):
        assert sent_to(targets, name)[-1] == orjson.loads(answer(0))


async def test_no_target_offering_a_get_stream_is_405():
    app = stage(Targets())
    headers = await open_session(app)
    response = await drive(app, "GET", headers=headers)
    assert response.status == 405
    assert b"GET" in (response.header(b"allow") or b"")


async def test_a_request_inside_a_call_reaches_the_client_and_its_answer_the_target():
    targets = Targets()
    app = stage(targets)
    headers = await open_session(app)
    called = await drive(app, "POST", headers=headers, body=rpc("tools/call", 7, name="b_ask"))
    asked = events(called.body)[0]
    assert asked["method"] == "sampling/createMessage"
    assert asked["id"] != 0
    response = await drive(app, "POST", headers=headers, body=answer(asked["id"]))
    assert response.status == 202
    assert sent_to(targets, "b")[-1] == orjson.loads(answer(0))
    assert all("result" not in m for m in sent_to(targets, "a"))


async def test_a_forged_or_foreign_answer_reaches_no_target():
    targets = Targets()
    app = stage(targets)
    mine, theirs = await open_session(app), await open_session(app)
    called = await drive(app, "POST", headers=theirs, body=rpc("tools/call", 7, name="a_ask"))
    minted = events(called.body)[0]["id"]
    before = len(targets.seen)
    for forged in (minted, "a/1", 0, "b/1"):
        record = AuditRecord()
        response = await drive(
            app, "POST", headers=mine, body=answer(forged), scope={AUDIT_KEY: record}
        )
        assert response.status == 400
        assert (record.decision, record.stage) == ("deny", "federation")
        assert "never sent the client" in (record.reason or "")
    assert len(targets.seen) == before
    # The session that got the request still answers it.
    assert (await drive(app, "POST", headers=theirs, body=answer(minted))).status == 202


async def test_a_cancellation_reaches_only_the_target_that_has_the_request():
    started, gone = asyncio.Event(), asyncio.Event()
    targets = Targets(waiting=started)
    app = stage(targets)
    headers = await open_session(app)
    call = rpc("tools/call", "c-1", name="b_wait")
    running = asyncio.ensure_future(
        drive(app, "POST", headers=headers, body=call, client_left=gone)
    )
    await started.wait()
    cancel = {"requestId": "c-1", "reason": "user"}
    note = orjson.dumps({"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel})
    assert (await drive(app, "POST", headers=headers, body=note)).status == 202
    gone.set()
    await running
    cancelled = [
        name for name, _, m in targets.seen if m.get("method") == "notifications/cancelled"
    ]
    assert cancelled == ["b"]
    # Answered: a cancellation now reaches no target.
    assert (await drive(app, "POST", headers=headers, body=note)).status == 202
    assert [m.get("method") for _, _, m in targets.seen].count("notifications/cancelled") == 1


async def audited(app, headers, body) -> AuditRecord:
    record = AuditRecord()
    await drive(app, "POST", headers=headers, body=body, scope={AUDIT_KEY: record})
    assert (record.decision, record.stage) == ("deny", "federation")
    assert record.reason
    return record


async def test_the_stages_refusals_are_recorded_for_the_audit_trail():
    targets = Targets()
    app = stage(targets)
    headers = await open_session(app)
    unknown = await audited(app, headers, rpc("tools/call", name="c_x"))
    assert unknown.reason == "Unknown tool: c_x"
    cursor = await audited(app, headers, rpc("tools/list", cursor="made.up"))
    assert "cursor" in (cursor.reason or "")
    targets.down.add("b")
    down = await audited(app, headers, rpc("tools/call", name="b_u1"))
    assert (down.reason or "").startswith("the MCP server 'b' behind this route is unavailable")
    foreign = [(b"mcp-session-id", b"not-a-session")]
    assert "unknown session" in ((await audited(app, foreign, rpc("ping"))).reason or "")
    assert "Mcp-Session-Id" in ((await audited(app, [], rpc("ping"))).reason or "")
    # Another caller's token does not open the session, and is told it as unknown.
    claims = {CLAIMS_KEY: {"iss": "i", "sub": "mallory"}}
    record = AuditRecord()
    response = await drive(
        app, "POST", headers=headers, body=rpc("ping"), scope={AUDIT_KEY: record, **claims}
    )
    assert response.status == 404
    assert "another caller's" in (record.reason or "")


async def test_a_target_whose_stream_breaks_off_leaves_the_others_streams():
    targets = Targets(streams={"a": [CHANGED, ASK], "b": [UPDATED, ASK]}, broken={"a"})
    app = stage(targets)
    headers = await open_session(app)
    stream = await drive(app, "GET", headers=headers)
    got = events(stream.body)
    assert {"jsonrpc": "2.0", "method": "notifications/tools/list_changed"} in got
    # b's whole stream came through; a's broke off after its first event.
    assert [m["id"] for m in got if "id" in m] == ["b/1"]


async def test_one_get_stream_per_session_and_a_client_leaving_stops_the_targets():
    gone, streamed = asyncio.Event(), asyncio.Event()
    targets = Targets(streams={"a": [CHANGED]}, holding=True, streamed=streamed)
    app = stage(targets)
    headers = await open_session(app)
    listening = asyncio.ensure_future(drive(app, "GET", headers=headers, client_left=gone))
    await streamed.wait()  # a's stream is open and its event relayed; b offers none
    second = await drive(app, "GET", headers=headers)
    assert second.status == 409
    gone.set()
    first = await listening
    assert events(first.body) == [{"jsonrpc": "2.0", "method": "notifications/tools/list_changed"}]
    assert [(get.released, get.closed) for get in targets.gets] == [(1, True)]
    # The stream ended: the session may open another.
    targets.holding = False
    assert (await drive(app, "GET", headers=headers)).status == 200


async def test_a_target_opened_while_the_get_stream_is_open_joins_it():
    """A target down when the client opened its stream (or restarted since) joins the stream
    with its own once its session is opened again, here by the client's next list."""
    gone, a_streamed, b_streamed = asyncio.Event(), asyncio.Event(), asyncio.Event()
    targets = Targets(streams={"a": [CHANGED], "b": [UPDATED]}, down={"b"}, holding=True)
    targets.streamed = a_streamed
    app = stage(targets)
    headers = await open_session(app)
    listening = asyncio.ensure_future(drive(app, "GET", headers=headers, client_left=gone))
    await a_streamed.wait()
    targets.down.clear()
    targets.streamed = b_streamed
    listed = await drive(app, "POST", headers=headers, body=rpc("tools/list"))
    assert [t["name"] for t in listed.json()["result"]["tools"]][-1] == "b_u2"
    # b's stream was opened and its event relayed (a guard, not a wait for time to pass)
    await asyncio.wait_for(b_streamed.wait(), 5)
    gone.set()
    got = events((await listening).body)
    assert {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"uri": "mcp+gw://b/note://b"},
    } in got
    assert [get.released for get in targets.gets] == [1, 1]


async def test_the_get_stream_passes_progress_only_for_a_call_in_flight_at_its_target():
    """SDK progress tokens are often request ids: target b must not report progress (or fake
    completion) for the call the client made to a, nor a for a call of b's or one answered."""
    gone, a_waits, b_waits = asyncio.Event(), asyncio.Event(), asyncio.Event()
    sent_by_a = [progress(5, "a"), progress("5", "a"), progress(5.0, "a"), progress(True, "a")]
    sent_by_a += [progress(None, "a"), progress(6, "a"), progress(7, "a")]
    sent_by_b = [progress(5, "b"), progress(6, "b"), progress(1, "b"), progress(7, "b")]
    targets = Targets(streams={"a": sent_by_a, "b": sent_by_b}, waiting=a_waits)
    app = stage(targets)
    headers = await open_session(app)
    at_a = rpc("tools/call", 5, name="a_wait", _meta={"progressToken": 5})
    running = [
        asyncio.ensure_future(drive(app, "POST", headers=headers, body=at_a, client_left=gone))
    ]
    await a_waits.wait()
    targets.waiting = b_waits
    at_b = rpc("tools/call", 6, name="b_wait", _meta={"progressToken": 6})
    running.append(
        asyncio.ensure_future(drive(app, "POST", headers=headers, body=at_b, client_left=gone))
    )
    await b_waits.wait()
    # Answered: 7 asked progress at both, and is in flight at neither.
    answered = rpc("tools/call", 7, name="a_t1", _meta={"progressToken": 7})
    assert (await drive(app, "POST", headers=headers, body=answered)).status == 200
    stream = await drive(app, "GET", headers=headers)
    reported = [(m["params"]["progressToken"], m["params"]["message"]) for m in events(stream.body)]
    assert sorted(reported) == [(5, "a"), (6, "b")]
    gone.set()
    await asyncio.gather(*running)
    # Neither call is in flight any more: no progress passes.
    assert events((await drive(app, "GET", headers=headers)).body) == []
