"""One bounded HTTP exchange with an upstream (its MCP server or its authorization server): a
time limit, a body read up to a size limit, no redirects followed (a redirect could send a
metadata request, or a form holding a client secret, anywhere), and failures described without
the URL's secrets (`controlplane.fetch.failure_text`)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass

import aiohttp
import orjson

from ..controlplane.fetch import failure_text, read_at_most

MAX_BODY = 256 * 1024


class Unreachable(Exception):
    """No HTTP answer (connection refused, reset, timed out); the message says which."""


@dataclass(frozen=True, slots=True)
class Reply:
    """An HTTP answer: status, the headers the gateway reads, and the body up to MAX_BODY."""

    status: int
    content_type: str
    www_authenticate: str | None  # every field of the header, joined as one list
    body: bytes
    too_large: bool

    def json_object(self) -> dict[str, object] | None:
        """The body as a JSON object, or None (too large, not JSON, or another JSON value)."""
        if self.too_large:
            return None
        try:
            value = orjson.loads(self.body)
        except orjson.JSONDecodeError:
            return None
        return value if isinstance(value, dict) else None

    def described(self) -> str:
        """What came back, for an error message: the status and what the body was."""
        kind = self.content_type or "no content type"
        if self.too_large:
            return f"HTTP {self.status} with a body larger than {MAX_BODY // 1024} KiB"
        if self.json_object() is not None:
            return f"HTTP {self.status} with a JSON object"
        if not self.body:
            return f"HTTP {self.status} with an empty body"
        return f"HTTP {self.status} with a body that is not a JSON object ({kind})"


async def exchange(
    session: aiohttp.ClientSession,
    method: str,
    url: str,
    *,
    headers: dict[str, str],
    limit: float,
    form: dict[str, str] | None = None,
    body: bytes | None = None,
) -> Reply:
    """Send one request and read its answer within `limit` seconds; Unreachable otherwise."""
    try:
        async with asyncio.timeout(limit):
            async with session.request(
                method,
                url,
                headers=headers,
                data=form if form is not None else body,
                allow_redirects=False,
            ) as response:
                read = await read_at_most(response.content, MAX_BODY)
                challenge = response.headers.getall("WWW-Authenticate", [])
                return Reply(
                    status=response.status,
                    content_type=response.headers.get("Content-Type", "")[:100],
                    www_authenticate=", ".join(challenge) if challenge else None,
                    body=read[:MAX_BODY],
                    too_large=len(read) > MAX_BODY,
                )
    except TimeoutError as exc:
        raise Unreachable(f"no answer within {limit:g}s") from exc
    except (aiohttp.ClientError, ValueError) as exc:
        # ValueError: aiohttp refuses some URLs before any request, in a text quoting them.
        raise Unreachable(failure_text(exc)) from exc
