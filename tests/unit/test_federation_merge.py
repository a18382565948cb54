"""The pure parts of the federation stage: the merged initialize answer, list items renamed for
their target, requests routed back and un-prefixed, the signed cursor of a merged list, and the
event stream reader."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.jsonrpc import INVALID_PARAMS, Malformed
from mcp_oauth_gateway.proxy.federation import merge
from mcp_oauth_gateway.proxy.federation.cursor import BadCursor, Cursors
from mcp_oauth_gateway.proxy.federation.routing import routed
from mcp_oauth_gateway.proxy.federation.sse import event_data
from unit.fuzz_settings import FUZZ

TARGETS = frozenset({"a", "b"})


def test_capabilities_are_the_union_with_every_promise_kept():
    got = merge.union(
        [
            {"tools": {"listChanged": True}, "logging": {}},
            {"tools": {}, "prompts": {"listChanged": False}, "resources": {"subscribe": True}},
            {"experimental": {"x": {"on": True}}, "completions": {}},
        ]
    )
    assert got == {
        "tools": {"listChanged": True},
        "logging": {},
        "prompts": {"listChanged": False},
        "resources": {"subscribe": True},
        "experimental": {"x": {"on": True}},
        "completions": {},
    }


def test_the_oldest_agreed_version_is_answered():
    assert merge.agreed_version(["2025-11-25", "2025-06-18", "2025-11-25"]) == "2025-06-18"


def test_instructions_name_their_target():
    assert merge.instructions({"a": "Use add.", "b": ""}) == "a: Use add."
    assert merge.instructions({"a": ""}) is None


def test_list_items_carry_their_target_and_unnamed_items_are_dropped():
    tools = {"tools": [{"name": "add", "x": 1}, {"name": ""}, {"title": "no name"}, "junk"]}
    assert merge.offered_items("tools/list", "a", tools) == [{"name": "a_add", "x": 1}]
    templates = {"resourceTemplates": [{"uriTemplate": "f:///{p}", "name": "files"}]}
    assert merge.offered_items("resources/templates/list", "b", templates) == [
        {"uriTemplate": "mcp+gw://b/f:///{p}", "name": "files"}
    ]
    assert merge.offered_items("prompts/list", "a", {"prompts": None}) == []


def call(method: str, **params: object) -> dict[str, object]:
    return {"jsonrpc": "2.0", "id": 7, "method": method, "params": params}


def test_calls_are_routed_to_their_target_unprefixed():
    target, message = routed(call("tools/call", name="b_add", arguments={"a": 1}), TARGETS)
    assert target == "b"
    assert message == call("tools/call", name="add", arguments={"a": 1})
    target, message = routed(call("resources/read", uri="mcp+gw://a/file:///x"), TARGETS)
    assert (target, message["params"]) == ("a", {"uri": "file:///x"})
    ref = {"type": "ref/prompt", "name": "a_greet"}
    target, message = routed(call("completion/complete", ref=ref, argument={}), TARGETS)
    assert message["params"] == {"ref": {"type": "ref/prompt", "name": "greet"}, "argument": {}}


@pytest.mark.parametrize(
    ("message", "why"),
    [
        (call("tools/call", name="c_add"), "Unknown tool: c_add"),
        (call("tools/call", name="add"), "Unknown tool: add"),
        (call("tools/call", name=3), "Unknown tool: 3"),
        (call("prompts/get"), "Unknown prompt: None"),
        (call("resources/read", uri="file:///x"), "Unknown resource: file:///x"),
        (call("completion/complete", ref={"type": "ref/x"}), "needs a prompt or resource ref"),
        ({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": []}, "params must be"),
    ],
)
def test_requests_no_target_owns_are_unknown_items(message, why):
    with pytest.raises(Malformed) as refused:
        routed(message, TARGETS)
    assert refused.value.code == INVALID_PARAMS
    assert why in str(refused.value)


def test_a_cursor_reads_back_in_its_session_and_list_only():
    cursors = Cursors()
    cursor = cursors.issue("s1", "tools/list", {"a": "page-2"})
    assert cursor is not None
    assert cursors.read(cursor, "s1", "tools/list", TARGETS) == {"a": "page-2"}
    for session, method in (("s2", "tools/list"), ("s1", "prompts/list")):
        with pytest.raises(BadCursor):
            cursors.read(cursor, session, method, TARGETS)
    with pytest.raises(BadCursor):
        Cursors().read(cursor, "s1", "tools/list", TARGETS)  # another process's key
    assert cursors.issue("s1", "tools/list", {}) is None


def test_a_cursor_naming_a_target_the_route_lost_is_refused():
    cursors = Cursors()
    cursor = cursors.issue("s", "tools/list", {"gone": "x"})
    with pytest.raises(BadCursor):
        cursors.read(cursor, "s", "tools/list", TARGETS)


@FUZZ
@given(st.one_of(st.text(), st.integers(), st.none(), st.lists(st.text())))
def test_any_tampered_or_made_up_cursor_is_refused(cursor):
    cursors = Cursors(b"k" * 32)
    issued = cursors.issue("s", "tools/list", {"a": "1"})
    assert issued is not None
    if cursor == issued:
        return
    with pytest.raises(BadCursor):
        cursors.read(cursor, "s", "tools/list", TARGETS)


def test_a_flipped_byte_is_refused():
    cursors = Cursors()
    issued = cursors.issue("s", "tools/list", {"a": "1"})
    assert issued is not None
    for index in range(len(issued)):
        flipped = issued[:index] + ("A" if issued[index] != "A" else "B") + issued[index + 1 :]
        with pytest.raises(BadCursor):
            cursors.read(flipped, "s", "tools/list", TARGETS)


async def _chunks(parts: list[bytes]) -> AsyncIterator[bytes]:
    for part in parts:
        yield part


def events(parts: list[bytes], limit: int = 1000) -> list[bytes]:
    async def collect() -> list[bytes]:
        return [data async for data in event_data(_chunks(parts), limit)]

    return asyncio.run(collect())


def test_events_split_on_every_line_ending_across_chunks():
    stream = b'event: message\r\ndata: {"a":1}\r\n\r\ndata:x\rdata: y\r\rid: 3\n\n: c\n\ndata: tail'
    for size in (1, 2, 5, len(stream)):
        parts = [stream[i : i + size] for i in range(0, len(stream), size)]
        assert events(parts) == [b'{"a":1}', b"x\ny"], size


def test_an_oversized_event_is_refused():
    with pytest.raises(ValueError, match="larger than"):
        events([b"data: " + b"x" * 2000])
