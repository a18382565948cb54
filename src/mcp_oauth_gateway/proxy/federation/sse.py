"""Reading the messages of a target's `text/event-stream` answer: the data of each event, and
the stream's last event id when it was dispatched, as the WHATWG event stream format defines
them (lines end with CRLF, LF or CR; an event ends at a blank line; its `data:` lines are joined
with LF; one space after the colon is dropped; an event whose data is empty, as MCP's priming
event, is none; an `id:` holding NUL is ignored, one without a value clears it; an event the
stream ends in the middle of is dropped)."""

from __future__ import annotations

from collections.abc import AsyncIterator


def _field(line: bytes) -> tuple[bytes, bytes]:
    name, _, value = line.partition(b":")
    return name, value.removeprefix(b" ")


async def sse_events(
    chunks: AsyncIterator[bytes], limit: int
) -> AsyncIterator[tuple[bytes | None, bytes]]:
    """(the last event id, its data) of each event whose data is not empty, in order;
    ValueError past `limit` bytes held."""
    pending = b""
    data: list[bytes] = []
    last_id: bytes | None = None
    async for chunk in chunks:
        pending += chunk
        held = b""
        if pending.endswith(b"\r"):
            # It may be the first half of a CRLF: decide with the next chunk.
            pending, held = pending[:-1], b"\r"
        *lines, rest = pending.replace(b"\r\n", b"\n").replace(b"\r", b"\n").split(b"\n")
        pending = rest + held
        if len(pending) + sum(map(len, data)) > limit:
            raise ValueError(f"an event is larger than {limit} bytes")
        for line in lines:
            if not line:
                joined = b"\n".join(data)
                if joined:
                    yield last_id, joined
                data = []
                continue
            name, value = _field(line)
            if name == b"data":
                data.append(value)
            elif name == b"id" and b"\0" not in value:
                last_id = value or None


async def event_data(chunks: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    """The data of each event whose data is not empty, in order; ValueError past `limit`
    bytes held."""
    async for _, data in sse_events(chunks, limit):
        yield data
