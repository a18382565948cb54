"""`notifications/elicitation/complete` slipped into a GET stream only between two events."""

from __future__ import annotations

import asyncio

import orjson

from mcp_oauth_gateway.asgi import Message
from mcp_oauth_gateway.useroauth.streams import Streams, complete_event


def body(data: bytes) -> Message:
    return {"type": "http.response.body", "body": data, "more_body": True}


def test_the_notification_waits_for_the_end_of_the_event_in_progress() -> None:
    async def run() -> list[bytes]:
        sent: list[bytes] = []

        async def send(message: Message) -> None:
            sent.append(message.get("body", b""))

        streams = Streams()
        listener = streams.open("key", "s1", send)
        await listener.send(body(b'event: message\ndata: {"a"'))
        await listener.inject(complete_event("e1"))
        assert len(sent) == 1  # mid-event: held back
        await listener.send(body(b":1}\n\n"))
        streams.closed("key", "s1", listener)
        return sent

    sent = asyncio.run(run())
    assert sent[-1] == complete_event("e1")
    stream = b"".join(sent)
    assert stream.startswith(b'event: message\ndata: {"a":1}\n\nevent: message\ndata: ')
    event = complete_event("e1").split(b"data: ")[1]
    assert orjson.loads(event) == {
        "jsonrpc": "2.0",
        "method": "notifications/elicitation/complete",
        "params": {"elicitationId": "e1"},
    }


def test_an_armed_stream_is_told_once_the_elicitation_is_done_and_others_are_not() -> None:
    async def run() -> tuple[list[bytes], list[bytes]]:
        done: set[str] = set()
        mine: list[bytes] = []
        other: list[bytes] = []

        async def finished(eid: str) -> bool:
            return eid in done

        async def to(out: list[bytes], message: Message) -> None:
            out.append(message.get("body", b""))

        streams = Streams()
        listener = streams.open("key", "s1", lambda m: to(mine, m))
        stranger = streams.open("key", "s2", lambda m: to(other, m))
        streams.arm("key", "s1", "e1", finished)
        streams.arm("key", "s1", "e1", finished)  # twice: told once
        done.add("e1")
        streams.wake("key")
        await asyncio.wait_for(asyncio.gather(*listener.tasks), 5)
        streams.closed("key", "s1", listener)
        streams.closed("key", "s2", stranger)
        return mine, other

    mine, other = asyncio.run(run())
    assert mine == [complete_event("e1")]
    assert other == []
