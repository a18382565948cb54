"""A client connection's transport whose writes in one turn of the event loop leave as one.

uvicorn writes a response's head on `http.response.start` and its body on the next message
(ASGI gives it no way to take both at once): two `send` system calls for every response,
about a tenth of the gateway's time per request (benchmarks/PROFILE.md). Writes are kept
until the loop's next turn and sent together: the head and a whole body leave in one call,
and a streamed response's events leave as they come, one turn later.

Nothing is lost or reordered: closing, half-closing and aborting send (or drop, for abort)
what is kept first, and the flow-control and introspection calls go to the real transport.
"""

from __future__ import annotations

import asyncio
from typing import Any


class CoalescingTransport(asyncio.Transport):
    """Wraps a connection's transport; see the module's docstring."""

    __slots__ = ("_loop", "_pending", "_scheduled", "_transport")

    def __init__(self, transport: asyncio.Transport, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__()
        self._transport = transport
        self._loop = loop
        self._pending: list[bytes] = []
        self._scheduled = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        """Keep `data` for this turn's single write."""
        if not data:
            return
        # A copy only of what may change after this call (bytearray, memoryview): uvicorn
        # writes bytes, and bytes(bytes) still costs a constructor call on every write.
        self._pending.append(data if type(data) is bytes else bytes(data))
        if not self._scheduled:
            self._scheduled = True
            self._loop.call_soon(self._flush)

    def writelines(self, list_of_data: Any) -> None:
        """Keep each buffer for this turn's single write."""
        for data in list_of_data:
            self.write(data)

    def flush(self) -> None:
        """Send what is kept now."""
        pending = self._pending
        if not pending:
            return
        self._pending = []
        if self._transport.is_closing():
            return  # as the transport itself would: nothing goes out after close
        self._transport.write(pending[0] if len(pending) == 1 else b"".join(pending))

    def _flush(self) -> None:
        self._scheduled = False
        self.flush()

    def close(self) -> None:
        """Send what is kept, then close (the transport sends its buffer before closing)."""
        self.flush()
        self._transport.close()

    def write_eof(self) -> None:
        """Send what is kept, then half-close."""
        self.flush()
        self._transport.write_eof()

    def abort(self) -> None:
        """Close at once; what is kept is dropped, as the transport drops its buffer."""
        self._pending = []
        self._transport.abort()

    def can_write_eof(self) -> bool:
        """Whether the transport can half-close."""
        return self._transport.can_write_eof()

    def is_closing(self) -> bool:
        """Whether the transport is closing or closed."""
        return self._transport.is_closing()

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        """The transport's extra information (peer name, socket…)."""
        return self._transport.get_extra_info(name, default)

    def set_protocol(self, protocol: asyncio.BaseProtocol) -> None:
        """Give the transport another protocol."""
        self._transport.set_protocol(protocol)

    def get_protocol(self) -> asyncio.BaseProtocol:
        """The transport's protocol."""
        return self._transport.get_protocol()

    def is_reading(self) -> bool:
        """Whether the transport is reading."""
        return self._transport.is_reading()

    def pause_reading(self) -> None:
        """Stop reading (flow control)."""
        self._transport.pause_reading()

    def resume_reading(self) -> None:
        """Read again (flow control)."""
        self._transport.resume_reading()

    def set_write_buffer_limits(self, high: int | None = None, low: int | None = None) -> None:
        """The transport's write-buffer watermarks."""
        self._transport.set_write_buffer_limits(high, low)

    def get_write_buffer_size(self) -> int:
        """Bytes kept here and in the transport's buffer."""
        return self._transport.get_write_buffer_size() + sum(len(d) for d in self._pending)

    def get_write_buffer_limits(self) -> tuple[int, int]:
        """The transport's write-buffer watermarks."""
        return self._transport.get_write_buffer_limits()
