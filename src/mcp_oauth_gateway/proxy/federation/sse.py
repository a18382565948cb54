"""Reading the messages of a target's `text/event-stream` answer: the data of each event, as
the WHATWG event stream format defines it (lines end with CRLF, LF or CR; an event ends at a
blank line; its `data:` lines are joined with LF; one space after the colon is dropped; an
event the stream ends in the middle of is dropped)."""

from __future__ import annotations

from collections.abc import AsyncIterator


async def event_data(chunks: AsyncIterator[bytes], limit: int) -> AsyncIterator[bytes]:
    """The data of each event that has some, in order; ValueError past `limit` bytes held."""
    pending = b""
    data: list[bytes] = []
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
                if data:
                    yield b"\n".join(data)
                data = []
            elif line.startswith(b"data:"):
                data.append(line[5:].removeprefix(b" "))
