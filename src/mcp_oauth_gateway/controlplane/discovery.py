"""The provider's OIDC discovery document, cached with a TTL and served stale when it is down."""

from __future__ import annotations

import asyncio
import logging
import time

import aiohttp

from ..urls import shown_url
from .fetch import FetchError, fetch_json

log = logging.getLogger("mcp_oauth_gateway.discovery")

DISCOVERY_TTL = 300.0


class DiscoveryCache:
    """One discovery URL; `get()` answers from cache, refreshing stale entries in the background."""

    def __init__(self, url: str, ttl: float = DISCOVERY_TTL):
        self.url = url
        # How messages write it: never its user-info, query values or fragment.
        self.shown = shown_url(url)
        self.ttl = ttl
        self.document: dict[str, object] | None = None
        self.last_error: str | None = None
        self._fetched_at = float("-inf")
        self._inflight: asyncio.Future[dict[str, object]] | None = None
        self._session: aiohttp.ClientSession | None = None

    def start(self, session: aiohttp.ClientSession) -> None:
        """Remember the session and warm the cache in the background."""
        self._session = session
        self._refresh_in_background()

    async def stop(self) -> None:
        """Cancel an in-flight fetch."""
        if self._inflight is not None:
            self._inflight.cancel()
            await asyncio.gather(self._inflight, return_exceptions=True)

    async def get(self) -> dict[str, object]:
        """The document; raises FetchError only when it was never fetched."""
        if self.document is None:
            return await asyncio.shield(self._fetch_shared())
        if time.monotonic() - self._fetched_at > self.ttl:
            self._refresh_in_background()
        return self.document

    async def fetch_now(self) -> dict[str, object]:
        """Fetch regardless of the cache (used by `check`)."""
        return await asyncio.shield(self._fetch_shared())

    def _refresh_in_background(self) -> None:
        if self._session is not None and self._inflight is None:
            future = self._fetch_shared()
            future.add_done_callback(lambda f: f.cancelled() or f.exception())

    def _fetch_shared(self) -> asyncio.Future[dict[str, object]]:
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._fetch())
            self._inflight.add_done_callback(lambda _: setattr(self, "_inflight", None))
        return self._inflight

    async def _fetch(self) -> dict[str, object]:
        if self._session is None:
            raise FetchError(f"discovery {self.shown} is not started")
        try:
            document = await fetch_json(self._session, self.url)
            if not isinstance(document, dict):
                raise FetchError(f"GET {self.shown}: discovery document is not a JSON object")
        except FetchError as exc:
            self.last_error = str(exc)
            stale = "serving the cached copy" if self.document else "nothing cached yet"
            log.warning("OIDC discovery fetch failed (%s): %s", stale, exc)
            raise
        if self.document is None:
            log.info("OIDC discovery %s fetched (issuer %s)", self.shown, _shown_issuer(document))
        self.document, self.last_error = document, None
        self._fetched_at = time.monotonic()
        return document


def _shown_issuer(document: dict[str, object]) -> str:
    """The fetched document's issuer as logs may write it."""
    issuer = document.get("issuer")
    return shown_url(issuer) if isinstance(issuer, str) else repr(issuer)
