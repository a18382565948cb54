"""The federation stage in process, over targets played in memory: pagination across targets
with a cursor per target, a target that fails at initialize opened on the next list, what a
client gets for messages the stage cannot act on, and the headers each target receives."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from mcp_oauth_gateway.controlplane.snapshot import CompiledTarget
from mcp_oauth_gateway.proxy.federation.rewrite import foreign_progress
from mcp_oauth_gateway.proxy.federation.session import SessionTable, new_session
from mcp_oauth_gateway.proxy.federation.stage import Federation
from mcp_oauth_gateway.proxy.federation.target import TargetLink
from mcp_oauth_gateway.serving.process_state import ProcessState

from .federation_targets import INIT, PORTS, Targets, open_session, rpc, stage
from .harness import drive


async def test_pages_run_through_every_target_with_one_cursor():
    app = stage(Targets())
    headers = await open_session(app)
    names: list[str] = []
    cursor = None
    for _ in range(3):
        params = {"cursor": cursor} if cursor else {}
        response = await drive(app, "POST", headers=headers, body=rpc("tools/list", **params))
        result = response.json()["result"]
        names += [tool["name"] for tool in result["tools"]]
        cursor = result.get("nextCursor")
        if cursor is None:
            break
    assert names == ["a_t1", "a_t2", "b_u1", "b_u2", "a_t3"]
    assert cursor is None


async def test_a_cursor_from_another_session_is_invalid_params():
    app = stage(Targets())
    first, second = await open_session(app), await open_session(app)
    listed = await drive(app, "POST", headers=first, body=rpc("tools/list"))
    cursor = listed.json()["result"]["nextCursor"]
    response = await drive(app, "POST", headers=second, body=rpc("tools/list", cursor=cursor))
    assert response.status == 200
    assert response.json()["error"]["code"] == -32602


async def test_a_target_down_at_initialize_is_opened_on_the_next_list():
    targets = Targets(down={"b"})
    app = stage(targets)
    headers = await open_session(app)
    await drive(
        app, "POST", headers=headers, body=b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    )
    targets.down.clear()
    response = await drive(app, "POST", headers=headers, body=rpc("tools/list"))
    assert [t["name"] for t in response.json()["result"]["tools"]] == [
        "a_t1",
        "a_t2",
        "b_u1",
        "b_u2",
    ]
    # b was told the client is initialized right after its late initialize.
    methods = [message.get("method") for name, _, message in targets.seen if name == "b"]
    assert methods == ["initialize", "notifications/initialized", "tools/list"]


async def test_each_target_gets_its_own_session_and_version():
    targets = Targets()
    app = stage(targets)
    headers = await open_session(app)
    await drive(
        app, "POST", headers=[*headers, (b"authorization", b"Bearer x")], body=rpc("tools/list")
    )
    listed = [(name, sent) for name, sent, m in targets.seen if m.get("method") == "tools/list"]
    assert sorted(name for name, _ in listed) == ["a", "b"]
    for name, sent in listed:
        values = dict(sent)
        assert values[b"mcp-session-id"] == f"sess-{name}".encode()
        assert values[b"mcp-protocol-version"] == b"2025-06-18"
        assert values[b"authorization"] == b"Bearer x"


async def test_every_target_down_fails_initialize_without_a_session():
    app = stage(Targets(down={"a", "b"}))
    response = await drive(app, "POST", body=INIT)
    assert response.status == 200
    assert response.header(b"mcp-session-id") is None
    assert "none of the MCP servers" in response.json()["error"]["message"]


@pytest.mark.parametrize(
    ("refusing", "status"),
    [
        # Every target refuses the client's request itself (an Origin check): so does the
        # gateway, with that status, as a single-target route passes its target's on.
        ({"a": 403, "b": 403}, 403),
        ({"a": 403, "b": 400}, 400),
        # One refusal beside a target that is down, or a lost session (404), a timeout (408),
        # a limit (429): a server error, not the client's.
        ({"a": 403}, 200),
        ({"a": 404, "b": 404}, 200),
        ({"a": 429, "b": 408}, 200),
        ({"a": 500, "b": 503}, 200),
    ],
)
async def test_initialize_every_target_refused_answers_their_refusal(refusing, status):
    down = {"b"} if set(refusing) == {"a"} else set()
    app = stage(Targets(refusing=refusing, down=down))
    response = await drive(app, "POST", body=INIT)
    assert response.status == status
    assert response.header(b"mcp-session-id") is None
    error = response.json()["error"]
    assert "none of the MCP servers" in error["message"]
    assert error["code"] == (-32600 if status != 200 else -32603)


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        (b"{", 400, -32700),
        (b"[" + rpc("ping") + b"]", 400, -32600),
        (b'{"id":1,"method":"ping"}', 400, -32600),
        (rpc("nothing/here"), 200, -32601),
        (b'{"jsonrpc":"2.0","id":[1],"method":"ping"}', 400, -32600),
        (b'{"jsonrpc":"2.0","id":true,"method":"ping"}', 400, -32600),
        (b'{"jsonrpc":"2.0","id":1,"method":"initialize","params":[]}', 200, -32602),
        (rpc("tools/call", name="c_x"), 200, -32602),
    ],
)
async def test_messages_the_stage_cannot_act_on(body, status, code):
    app = stage(Targets())
    headers = await open_session(app)
    response = await drive(app, "POST", headers=headers, body=body)
    assert (response.status, response.json()["error"]["code"]) == (status, code)


async def test_ping_is_answered_by_the_gateway():
    targets = Targets()
    app = stage(targets)
    headers = await open_session(app)
    before = len(targets.seen)
    response = await drive(app, "POST", headers=headers, body=rpc("ping", 9))
    assert response.json() == {"jsonrpc": "2.0", "id": 9, "result": {}}
    assert len(targets.seen) == before


async def test_a_call_goes_to_its_target_unprefixed_and_its_stream_comes_back_as_sent():
    targets = Targets()
    app = stage(targets)
    headers = await open_session(app)
    response = await drive(app, "POST", headers=headers, body=rpc("tools/call", name="b_u1"))
    assert response.header(b"content-type") == b"text/event-stream"
    # The target's progress under another request's token is not the client's (no progress
    # was asked for): only the answer comes back.
    assert response.body == b'data: {"jsonrpc":"2.0","id":1,"result":{"by":"b"}}\n\n'
    name, _, message = targets.seen[-1]
    assert (name, message["params"]) == ("b", {"name": "u1"})


@pytest.mark.parametrize("token", ["p-1", 7])
async def test_a_calls_stream_reports_the_progress_of_that_call_only(token):
    targets = Targets()
    app = stage(targets)
    headers = await open_session(app)
    body = rpc("tools/call", 5, name="b_u1", _meta={"progressToken": token})
    response = await drive(app, "POST", headers=headers, body=body)
    progress = {"progressToken": token, "progress": 1}
    assert response.body == (
        b'data: {"jsonrpc":"2.0","method":"notifications/progress","params":'
        + orjson.dumps(progress)
        + b'}\n\ndata: {"jsonrpc":"2.0","id":5,"result":{"by":"b"}}\n\n'
    )


@pytest.mark.parametrize(
    ("asked", "given"),
    [(None, 1), (1, 2), (1, "1"), (1, True), (1, 1.0), (1, None), ("a", ["a"])],
)
def test_progress_under_any_other_token_is_foreign(asked, given):
    message = {"method": "notifications/progress", "params": {"progressToken": given}}
    assert foreign_progress(message, asked)
    assert not foreign_progress({"method": "notifications/message", "params": {}}, asked)


def test_the_session_idle_longest_is_forgotten_first():
    table = SessionTable(limit=2)
    owner = ("iss", "alice")
    first, second, third = (new_session(owner, {}, ()) for _ in range(3))
    table.add(first)
    table.add(second)
    assert table.find(first.id, owner) is first  # used: now the most recent
    assert table.add(third) is second
    assert table.find(second.id, owner) is None
    assert table.find(first.id, ("iss", "mallory")) is None


def test_one_caller_opening_sessions_in_a_loop_pushes_out_only_its_own():
    table = SessionTable(limit=10, per_owner=3)
    alice = [new_session(("iss", "alice"), {}, ()) for _ in range(2)]
    for session in alice:
        table.add(session)
    mallory = [new_session(("iss", "mallory"), {}, ()) for _ in range(50)]
    evicted = [table.add(session) for session in mallory]
    assert all(table.find(s.id, ("iss", "alice")) is s for s in alice)
    # Mallory keeps her 3 most recent; each one past them pushed out her oldest.
    assert [table.find(s.id, ("iss", "mallory")) for s in mallory[-3:]] == mallory[-3:]
    assert evicted[3:] == mallory[:47]
    for session in mallory[-3:]:
        table.remove(session.id)
    table.remove(mallory[-1].id)  # twice: nothing more to forget
    fresh = new_session(("iss", "mallory"), {}, ())
    assert table.add(fresh) is None


@pytest.mark.parametrize("anonymous", [None, (None, None)])
def test_anonymous_callers_are_held_by_the_routes_limit_only(anonymous):
    table = SessionTable(limit=5, per_owner=2)
    sessions = [new_session(anonymous, {}, ()) for _ in range(5)]
    assert [table.add(s) for s in sessions] == [None] * 5
    assert table.add(new_session(anonymous, {}, ())) is sessions[0]


async def test_a_client_leaving_a_call_stops_the_targets_stream():
    left = asyncio.Event()
    targets = Targets(left=left)
    app = stage(targets)
    headers = await open_session(app)
    body = rpc("tools/call", name="a_t1", _meta={"progressToken": "p"})
    response = await drive(app, "POST", headers=headers, body=body, client_left=left)
    assert b'"progressToken":"p"' in response.body
    assert b"another-request" not in response.body
    assert targets.calls[-1].released == 1


async def test_a_slow_target_is_left_out_of_lists_and_its_calls_fail_in_time():
    targets = Targets()
    # The route's timeout, short, is b's: its list never answers. The fast target has a long
    # one of its own, so a stall of this process (a loaded machine) cannot time it out too.
    app = stage(targets, timeout=0.05, own={"a": 30.0})
    headers = await open_session(app)
    targets.slow.add("b")
    listed = await drive(app, "POST", headers=headers, body=rpc("tools/list"))
    assert [t["name"] for t in listed.json()["result"]["tools"]] == ["a_t1", "a_t2"]
    called = await drive(app, "POST", headers=headers, body=rpc("tools/call", 4, name="b_u1"))
    assert called.status == 200
    error = called.json()["error"]
    assert error["code"] == -32603
    assert error["message"].startswith("the MCP server 'b' behind this route is unavailable")
    assert "did not answer within 0.05s" in error["message"]


def test_sessions_outlive_a_reload_while_the_targets_stay_the_same():
    process_state = ProcessState()
    targets = tuple(CompiledTarget("127.0.0.1", port, "/mcp", n) for port, n in PORTS.items())
    state = process_state.federation("default/mcp", 0, targets)
    assert process_state.federation("default/mcp", 0, targets) is state
    moved = (targets[0], CompiledTarget("127.0.0.1", 9003, "/mcp", "b"))
    assert process_state.federation("default/mcp", 0, moved) is not state
    assert process_state.federation("default/mcp", 1, targets) is not state


async def test_delete_ends_every_targets_session_and_the_clients():
    targets = Targets()
    app = stage(targets)
    headers = await open_session(app)
    response = await drive(app, "DELETE", headers=headers)
    assert response.status == 204
    assert sorted(targets.deleted) == [("a", b"sess-a"), ("b", b"sess-b")]
    after = await drive(app, "POST", headers=headers, body=rpc("ping"))
    assert after.status == 404


async def test_each_exchange_with_a_target_is_timed_for_the_routes_latency():
    timed: list[float] = []
    compiled = tuple(CompiledTarget("127.0.0.1", port, "/mcp", n) for port, n in PORTS.items())
    link = TargetLink(Targets(), 5.0, False, latency=timed.append)
    app = Federation(compiled, link, 1 << 20)
    headers = await open_session(app)
    await drive(app, "POST", headers=headers, body=rpc("tools/list"))
    assert len(timed) == 4  # initialize and tools/list, at each target
    assert all(seconds >= 0 for seconds in timed)
