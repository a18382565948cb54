"""The messages that name no item, routed by what the client session remembers: a target's
request reaches the client under an id the session minted and the answer goes back to that
target under its own id (once, and only from the session that got it); a cancellation knows
which targets have the request; resource URIs in notifications and results carry their target."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.proxy.federation.exchange import Exchanges
from mcp_oauth_gateway.proxy.federation.rewrite import (
    from_target,
    offered_result,
    stray_progress,
    to_target,
)
from unit.fuzz_settings import FUZZ


def request(request_id: object, method: str = "sampling/createMessage") -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": {}}


def answer(request_id: object) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": request_id, "result": {"ok": True}}


def test_a_targets_request_is_answered_back_to_it_under_its_own_id():
    exchanges = Exchanges()
    # Both targets number their requests from 0: the client sees two different ids.
    to_a = from_target(request(0), "a", exchanges)
    to_b = from_target(request(0), "b", exchanges)
    assert to_a is not None
    assert to_b is not None
    assert to_a["id"] != to_b["id"]
    assert to_a["method"] == "sampling/createMessage"
    assert to_target(answer(to_b["id"]), exchanges) == ("b", answer(0))
    assert to_target(answer(to_a["id"]), exchanges) == ("a", answer(0))


def test_an_answer_goes_back_once():
    exchanges = Exchanges()
    minted = from_target(request("r-1"), "a", exchanges)
    assert minted is not None
    assert to_target(answer(minted["id"]), exchanges) == ("a", answer("r-1"))
    assert to_target(answer(minted["id"]), exchanges) is None


def test_an_id_another_session_minted_reaches_nothing_here():
    mine, theirs = Exchanges(), Exchanges()
    theirs_request = from_target(request(5), "b", theirs)
    assert theirs_request is not None
    assert to_target(answer(theirs_request["id"]), mine) is None
    # Still there for the session that got it.
    assert to_target(answer(theirs_request["id"]), theirs) == ("b", answer(5))


@FUZZ
@given(st.one_of(st.text(), st.integers(), st.none(), st.booleans(), st.lists(st.integers())))
def test_an_id_the_session_never_minted_is_refused(forged):
    exchanges = Exchanges()
    minted = from_target(request(1), "a", exchanges)
    assert minted is not None
    if forged == minted["id"]:
        return
    assert to_target(answer(forged), exchanges) is None


def test_the_oldest_unanswered_request_is_forgotten_past_the_limit():
    exchanges = Exchanges(asked_limit=2)
    first, _, third = (from_target(request(n), "a", exchanges) for n in range(3))
    assert first is not None
    assert third is not None
    assert to_target(answer(first["id"]), exchanges) is None
    assert to_target(answer(third["id"]), exchanges) == ("a", answer(2))


def test_a_target_cancelling_its_request_is_told_under_the_minted_id():
    exchanges = Exchanges()
    minted = from_target(request(3), "a", exchanges)
    assert minted is not None
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 3}}
    told = from_target(cancel, "a", exchanges)
    assert told == {**cancel, "params": {"requestId": minted["id"]}}
    # Withdrawn: its answer is no longer taken, and b cannot cancel a's request.
    assert to_target(answer(minted["id"]), exchanges) is None
    assert from_target(cancel, "b", exchanges) is None


def test_requests_in_flight_name_their_targets():
    exchanges = Exchanges(running_limit=2)
    exchanges.start(1, ("a",))
    exchanges.start("1", ("a", "b"))
    assert exchanges.targets_of(1) == ("a",)
    assert exchanges.targets_of("1") == ("a", "b")
    exchanges.finish(1)
    assert exchanges.targets_of(1) == ()
    exchanges.start(2, ("b",))
    exchanges.start(3, ("b",))  # past the limit: "1" is forgotten
    assert exchanges.targets_of("1") == ()


def test_notifications_pass_and_a_resource_update_carries_its_target():
    exchanges = Exchanges()
    for method in ("notifications/tools/list_changed", "notifications/message"):
        note = {"jsonrpc": "2.0", "method": method, "params": {"level": "info"}}
        assert from_target(note, "a", exchanges) == note
    updated = {
        "jsonrpc": "2.0",
        "method": "notifications/resources/updated",
        "params": {"uri": "note://x"},
    }
    assert from_target(updated, "b", exchanges) == {
        **updated,
        "params": {"uri": "mcp+gw://b/note://x"},
    }


def test_answers_on_the_get_stream_are_dropped():
    exchanges = Exchanges()
    assert from_target(answer(1), "a", exchanges) is None
    assert from_target(answer(1), "a", exchanges, "tools/call", 1) == answer(1)


def test_a_call_s_answer_goes_under_the_call_s_id():
    exchanges = Exchanges()
    # Whatever id the target wrote (another request's: one in flight at another target, say),
    # its answer is to the call it was sent.
    assert from_target(answer(2), "a", exchanges, "tools/call", 1) == answer(1)
    assert from_target(answer(1), "a", exchanges, "tools/call", "1") == answer("1")
    refused = {"jsonrpc": "2.0", "id": None, "error": {"code": -32700, "message": "x"}}
    assert from_target(refused, "a", exchanges, "tools/call", 7) == {**refused, "id": 7}


def test_uris_in_results_carry_their_target():
    read = {"contents": [{"uri": "file:///x", "text": "x"}, {"text": "no uri"}]}
    assert offered_result("resources/read", "a", read) == {
        "contents": [{"uri": "mcp+gw://a/file:///x", "text": "x"}, {"text": "no uri"}]
    }
    called = {
        "content": [
            {"type": "text", "text": "t"},
            {"type": "resource_link", "uri": "note://l", "name": "l"},
            {"type": "resource", "resource": {"uri": "note://e", "text": "e"}},
        ],
        "isError": False,
    }
    assert offered_result("tools/call", "b", called) == {
        "content": [
            {"type": "text", "text": "t"},
            {"type": "resource_link", "uri": "mcp+gw://b/note://l", "name": "l"},
            {"type": "resource", "resource": {"uri": "mcp+gw://b/note://e", "text": "e"}},
        ],
        "isError": False,
    }
    prompt = {"messages": [{"role": "user", "content": {"type": "resource_link", "uri": "u:1"}}]}
    assert offered_result("prompts/get", "a", prompt) == {
        "messages": [
            {"role": "user", "content": {"type": "resource_link", "uri": "mcp+gw://a/u:1"}}
        ]
    }
    assert offered_result("completion/complete", "a", {"completion": {}}) == {"completion": {}}
    assert offered_result("tools/call", "a", "odd") == "odd"


def test_a_message_that_is_no_answer_takes_no_request():
    exchanges = Exchanges()
    minted = from_target(request(1), "a", exchanges)
    assert minted is not None
    assert to_target({"jsonrpc": "2.0", "id": minted["id"]}, exchanges) is None
    assert to_target(answer(minted["id"]), exchanges) == ("a", answer(1))


def progress(token: object) -> dict[str, object]:
    params = {"progressToken": token, "progress": 1}
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


def test_progress_outside_a_calls_stream_is_of_a_call_in_flight_at_that_target():
    exchanges = Exchanges(running_limit=3)
    exchanges.start(1, ("a",), 1)
    exchanges.start("l", ("a", "b"), "l")  # a list goes to every target
    exchanges.start(2, ("b",))  # asked for no progress
    assert not stray_progress(progress(1), "a", exchanges)
    assert not stray_progress(progress("l"), "a", exchanges)
    assert not stray_progress(progress("l"), "b", exchanges)
    for token in (1, "1", 1.0, True, [1], None, 2):
        assert stray_progress(progress(token), "b", exchanges), token
    for token in ("1", 1.0, True, [1], {"t": 1}, None, 2):
        assert stray_progress(progress(token), "a", exchanges), token
    assert stray_progress({"method": "notifications/progress"}, "a", exchanges)
    assert not stray_progress({"method": "notifications/message", "params": {}}, "b", exchanges)
    exchanges.finish(1)
    assert stray_progress(progress(1), "a", exchanges)
    # The same id again replaces the request it named, its token with it.
    exchanges.start("l", ("b",), "m")
    assert stray_progress(progress("l"), "a", exchanges)
    assert not stray_progress(progress("m"), "b", exchanges)
    # Past the limit the oldest is forgotten (2, then "l" started again), its progress with it.
    exchanges.start(3, ("a",), 3)
    exchanges.start(4, ("a",), 4)
    assert not stray_progress(progress("m"), "b", exchanges)
    exchanges.start(5, ("a",), 5)
    assert stray_progress(progress("m"), "b", exchanges)
    assert not stray_progress(progress(3), "a", exchanges)
