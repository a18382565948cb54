"""GET a JSON document from a provider, with a size cap, a time limit and errors that say why."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson

MAX_DOCUMENT_BYTES = 1024 * 1024
FETCH_TIMEOUT = 10.0


class FetchError(Exception):
    """A fetch failed; the message names the URL and the reason."""


async def read_at_most(content: aiohttp.StreamReader, limit: int) -> bytes:
    """The body until its end, or its first `limit + 1` bytes when it is longer (so the caller
    can tell). `StreamReader.read(n)` alone returns whatever has arrived, which cuts documents
    that come in several packets."""
    chunks: list[bytes] = []
    size = 0
    while size <= limit:
        chunk = await content.read(limit + 1 - size)
        if not chunk:
            break
        chunks.append(chunk)
        size += len(chunk)
    return b"".join(chunks)


async def fetch_json(
    session: aiohttp.ClientSession, url: str, limit: float = FETCH_TIMEOUT
) -> object:
    """Fetch `url` and parse it as JSON; only HTTP 200 is accepted."""
    try:
        async with asyncio.timeout(limit):
            async with session.get(
                url, headers={"Accept": "application/json"}, allow_redirects=False
            ) as response:
                if response.status != 200:
                    raise FetchError(f"GET {url} answered HTTP {response.status}, expected 200")
                body = await read_at_most(response.content, MAX_DOCUMENT_BYTES)
    except TimeoutError as exc:
        raise FetchError(f"GET {url} timed out after {limit:g}s") from exc
    except aiohttp.ClientError as exc:
        raise FetchError(f"GET {url} failed: {exc or type(exc).__name__}") from exc
    if len(body) > MAX_DOCUMENT_BYTES:
        raise FetchError(f"GET {url}: document larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise FetchError(f"GET {url}: response is not JSON ({exc})") from exc


def new_session() -> aiohttp.ClientSession:
    """A client session for control-plane fetches (small pool; no cookies)."""
    return aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=16),
        cookie_jar=aiohttp.DummyCookieJar(),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
    )
