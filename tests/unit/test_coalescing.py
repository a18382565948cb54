"""CoalescingTransport: what one turn of the event loop writes leaves in one write, in order;
closing sends what is kept first, aborting drops it, nothing is written after close. The
transport underneath is a recorder standing in for uvloop's (same calls, no socket)."""

from __future__ import annotations

import asyncio

from mcp_oauth_gateway.coalescing import CoalescingTransport


class Recorder(asyncio.Transport):
    def __init__(self) -> None:
        super().__init__()
        self.calls: list[tuple[str, bytes]] = []
        self.closing = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.calls.append(("write", bytes(data)))

    def write_eof(self) -> None:
        self.calls.append(("write_eof", b""))

    def can_write_eof(self) -> bool:
        return True

    def close(self) -> None:
        self.calls.append(("close", b""))
        self.closing = True

    def abort(self) -> None:
        self.calls.append(("abort", b""))
        self.closing = True

    def is_closing(self) -> bool:
        return self.closing

    def get_write_buffer_size(self) -> int:
        return 7


async def turn() -> None:
    """Let the loop run the callbacks scheduled so far."""
    await asyncio.sleep(0)


async def test_head_and_body_written_in_one_turn_leave_as_one_write() -> None:
    inner = Recorder()
    transport = CoalescingTransport(inner, asyncio.get_running_loop())
    transport.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n")
    transport.write(bytearray(b"ok"))
    transport.write(b"")
    assert inner.calls == []
    assert transport.get_write_buffer_size() == 7 + 40
    await turn()
    assert inner.calls == [("write", b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")]


async def test_a_buffer_changed_after_the_write_leaves_as_it_was_written() -> None:
    inner = Recorder()
    transport = CoalescingTransport(inner, asyncio.get_running_loop())
    buffer = bytearray(b"first")
    view_source = bytearray(b"view!")
    transport.write(buffer)
    transport.write(memoryview(view_source))
    buffer[:] = b"ZZZZZ"
    view_source[:] = b"YYYYY"
    await turn()
    assert inner.calls == [("write", b"firstview!")]


async def test_writes_of_later_turns_leave_separately_and_in_order() -> None:
    inner = Recorder()
    transport = CoalescingTransport(inner, asyncio.get_running_loop())
    for event in (b"data: 1\n\n", b"data: 2\n\n"):
        transport.writelines([event[:4], event[4:]])
        await turn()
    assert inner.calls == [("write", b"data: 1\n\n"), ("write", b"data: 2\n\n")]


async def test_close_and_write_eof_send_what_is_kept_first() -> None:
    inner = Recorder()
    transport = CoalescingTransport(inner, asyncio.get_running_loop())
    transport.write(b"last")
    transport.write_eof()
    transport.write(b"bye")
    transport.close()
    transport.write(b"after close")
    await turn()
    assert inner.calls == [
        ("write", b"last"),
        ("write_eof", b""),
        ("write", b"bye"),
        ("close", b""),
    ]
    assert transport.is_closing()


async def test_abort_drops_what_is_kept() -> None:
    inner = Recorder()
    transport = CoalescingTransport(inner, asyncio.get_running_loop())
    transport.write(b"never sent")
    transport.abort()
    await turn()
    assert inner.calls == [("abort", b"")]
