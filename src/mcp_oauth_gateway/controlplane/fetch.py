"""GET a JSON document from a provider, with a size cap, a time limit and errors that say why."""

from __future__ import annotations

import asyncio

import aiohttp
import orjson

from ..urls import shown_url

MAX_DOCUMENT_BYTES = 1024 * 1024
FETCH_TIMEOUT = 10.0


class FetchError(Exception):
    """A fetch failed; the message names the URL (as `shown_url` shows it) and the reason."""


# aiohttp errors whose text says what went wrong on the connection and never quotes the URL.
_URL_FREE_ERRORS = (
    aiohttp.ClientOSError,
    aiohttp.ServerDisconnectedError,
    aiohttp.ServerTimeoutError,
    aiohttp.ClientPayloadError,
)


def failure_text(exc: BaseException) -> str:
    """Why a client call failed, never quoting its URL: aiohttp writes the whole URL, user-info
    and query included, into the text of InvalidURL, NonHttpUrlClientError and others, so only
    the errors known to say something else are quoted, the rest named by their type."""
    if isinstance(exc, aiohttp.ClientConnectorCertificateError):
        return f"cannot connect: {exc.certificate_error}"
    if isinstance(exc, aiohttp.ClientConnectorError):
        # Not its own text, which names the host and port as aiohttp read them: from a URL
        # that `shown_url` shows as `***` (a password written unencoded) that can be the secret.
        return f"cannot connect: {exc.os_error.strerror or exc.os_error or type(exc).__name__}"
    if isinstance(exc, _URL_FREE_ERRORS):
        return str(exc) or type(exc).__name__
    return type(exc).__name__


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
    shown = shown_url(url)
    try:
        async with asyncio.timeout(limit):
            async with session.get(
                url, headers={"Accept": "application/json"}, allow_redirects=False
            ) as response:
                if response.status != 200:
                    raise FetchError(f"GET {shown} answered HTTP {response.status}, expected 200")
                body = await read_at_most(response.content, MAX_DOCUMENT_BYTES)
    except TimeoutError as exc:
        raise FetchError(f"GET {shown} timed out after {limit:g}s") from exc
    except (aiohttp.ClientError, ValueError) as exc:
        # ValueError: aiohttp refuses some URLs before any request (a user-info that is not
        # latin-1 cannot be a Basic credential), in a text that quotes part of it.
        raise FetchError(f"GET {shown} failed: {failure_text(exc)}") from exc
    if len(body) > MAX_DOCUMENT_BYTES:
        raise FetchError(f"GET {shown}: document larger than {MAX_DOCUMENT_BYTES} bytes")
    try:
        return orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise FetchError(f"GET {shown}: response is not JSON ({exc})") from exc


def new_session(
    connector: aiohttp.TCPConnector | None = None, traces: list[aiohttp.TraceConfig] | None = None
) -> aiohttp.ClientSession:
    """A client session for control-plane fetches (small pool; no cookies)."""
    return aiohttp.ClientSession(
        connector=connector or aiohttp.TCPConnector(limit=16),
        trace_configs=traces,
        cookie_jar=aiohttp.DummyCookieJar(),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=5),
    )
