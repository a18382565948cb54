"""The upstream HTTP client behind one small interface, so it can be swapped for a faster pool.

aiohttp is the measured choice for now (httpx collapses as a proxy client under concurrency):
pooled keep-alive connections, no decompression, raw header bytes.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Protocol

import aiohttp

Headers = list[tuple[bytes, bytes]]


class UpstreamError(Exception):
    """The backend could not be reached or broke the exchange before answering."""


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
    async def request(self, method: str, url: str, headers: Headers,
                      body: bytes | AsyncIterator[bytes],
                      headers_within: float) -> UpstreamResponse:
        """Send a request and return once the response headers have arrived; raise
        TimeoutError when they take longer than `headers_within` seconds."""
        ...

    async def close(self) -> None:
        """Close every pooled connection."""
        ...


class _AiohttpResponse:
    __slots__ = ("_response", "headers", "status")

    def __init__(self, response: aiohttp.ClientResponse):
        self._response = response
        self.status = response.status
        self.headers: Headers = list(response.raw_headers)

    def complete_body(self) -> bytes | None:
        return None

    async def chunks(self) -> AsyncIterator[bytes]:
        try:
            async for chunk in self._response.content.iter_any():
                yield chunk
        except (aiohttp.ClientError, ConnectionError) as exc:
            raise UpstreamError(f"backend broke the response body: {exc}") from exc

    def release(self) -> None:
        self._response.release()


class AiohttpUpstream:
    """One pooled aiohttp session for all backends of a process."""

    def __init__(self, limit: int = 1000):
        self._limit = limit
        self._session: aiohttp.ClientSession | None = None

    def _client(self) -> aiohttp.ClientSession:
        if self._session is None:
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(limit=self._limit, keepalive_timeout=30,
                                               ttl_dns_cache=60),
                auto_decompress=False,
                cookie_jar=aiohttp.DummyCookieJar(),
                skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type"),
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=10),
            )
        return self._session

    async def request(self, method: str, url: str, headers: Headers,
                      body: bytes | AsyncIterator[bytes],
                      headers_within: float) -> UpstreamResponse:
        """Send the request; raise UpstreamError when the backend cannot be reached."""
        text_headers = [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers]
        try:
            async with asyncio.timeout(headers_within):
                response = await self._client().request(
                    method, url, headers=text_headers, data=body, allow_redirects=False,
                    compress=None,
                )
        except (aiohttp.ClientError, ConnectionError, OSError) as exc:
            raise UpstreamError(str(exc) or type(exc).__name__) from exc
        return _AiohttpResponse(response)

    async def close(self) -> None:
        """Close the session and its connections."""
        if self._session is not None:
            await self._session.close()
            self._session = None
