"""The upstream HTTP client behind one small interface (the pool in `pool.py` implements it;
tests and benchmarks can put another behind the proxy)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Protocol

from ..asgi import Headers


class UpstreamError(Exception):
    """The backend could not be reached or broke the exchange before answering."""


class InvalidRequestHead(ValueError):
    """A request the upstream refuses to write: a header name that is not a token, or a control
    character (CR, LF, NUL and the others) in the request line or a header value, whatever stage
    produced it."""


class UpstreamResponse(Protocol):
    status: int
    headers: Headers

    def chunks(self) -> AsyncIterator[bytes]:
        """The body as it arrives, chunk by chunk, without buffering."""
        ...

    def complete_body(self) -> bytes | None:
        """The whole body when it has already arrived completely, else None."""
        ...

    def release(self) -> None:
        """Return the connection to the pool (or drop it when the body was not consumed)."""
        ...


class Upstream(Protocol):
    async def request(
        self,
        method: str,
        url: str,
        headers: Headers,
        body: bytes | AsyncIterator[bytes],
        headers_within: float,
    ) -> UpstreamResponse:
        """Send a request and return once the response headers have arrived; raise
        TimeoutError when they take longer than `headers_within` seconds."""
        ...

    async def close(self) -> None:
        """Close every pooled connection."""
        ...
