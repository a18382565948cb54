"""Remote JWKS: fetched in the background, refreshed periodically, refetched on an unknown `kid`.

The last good keyset is kept when a refresh fails. Until the first fetch succeeds `keyset` is None
and routes that depend on it fail closed.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import aiohttp

from ..urls import shown_url
from .fetch import FetchError, fetch_json
from .keys import Keyset, parse_jwks

log = logging.getLogger("mcp_oauth_gateway.jwks")

# The keyset source of `jwks.kubernetes`: the service-account issuer's keys of the API server
# the controller watches, read through its client (never a URL the gateway connects to).
CLUSTER_JWKS_PATH = "/openid/v1/jwks"
CLUSTER_JWKS_URL = "kubernetes:" + CLUSTER_JWKS_PATH
FIRST_RETRY = 0.2
MAX_RETRY = 15.0
# Unknown-kid refetches are capped so a flood of forged kids cannot become a flood of fetches.
UNKNOWN_KID_INTERVAL = 10.0


class RemoteKeyset:
    """One JWKS URL: its current keyset, its fetch loop and its state for status reporting."""

    def __init__(
        self,
        url: str,
        refresh: float,
        unknown_kid_interval: float = UNKNOWN_KID_INTERVAL,
        fetch: Callable[[], Awaitable[object]] | None = None,
    ):
        self.url = url
        # How the document is read when not with the session (the cluster's own issuer,
        # through the API server's client); FetchError when it cannot be.
        self._read = fetch
        # How logs and task names write it: never its user-info, query values or fragment.
        self.shown = shown_url(url)
        self.refresh = refresh
        self.unknown_kid_interval = min(unknown_kid_interval, refresh)
        self.keyset: Keyset | None = None
        self.last_error: str | None = None
        self.fetches = 0
        self.fetched_at: float | None = None
        # Wall-clock times for status: when refreshes started failing (None while they work),
        # when the keys in use were fetched, and when the next attempt is due.
        self.failing_since: float | None = None
        self.keys_fetched_at: float | None = None
        self.next_attempt_at: float | None = None
        self._version = 0
        self._last_content: object = None
        self._last_on_demand = float("-inf")
        self._inflight: asyncio.Future[None] | None = None
        self._task: asyncio.Task[None] | None = None
        self._session: aiohttp.ClientSession | None = None

    @property
    def available(self) -> bool:
        """Whether a keyset has been fetched at least once."""
        return self.keyset is not None

    def start(self, session: aiohttp.ClientSession) -> None:
        """Start the background fetch loop (idempotent)."""
        self._session = session
        if self._task is None:
            self._task = asyncio.create_task(self._run(session), name=f"jwks {self.shown}")

    async def stop(self) -> None:
        """Stop the background loop."""
        if self._task is not None:
            self._task.cancel()
            await asyncio.gather(self._task, return_exceptions=True)
            self._task = None

    async def fetch_once(self, session: aiohttp.ClientSession) -> None:
        """Fetch now, sharing one in-flight request among concurrent callers."""
        if self._inflight is None:
            self._inflight = asyncio.ensure_future(self._fetch(session))
            self._inflight.add_done_callback(lambda _: setattr(self, "_inflight", None))
        await asyncio.shield(self._inflight)

    async def refetch_for_unknown_kid(self) -> bool:
        """Refetch because a token named an unknown kid; False when rate limited."""
        session = self._session
        now = time.monotonic()
        if session is None:
            return False
        if self._inflight is None and now - self._last_on_demand < self.unknown_kid_interval:
            return False
        if self._inflight is None:
            self._last_on_demand = now
        try:
            await self.fetch_once(session)
        except FetchError:
            return True
        return True

    async def _fetch(self, session: aiohttp.ClientSession) -> None:
        self.fetches += 1
        try:
            if self._read is not None:
                document = await self._read()
            else:
                document = await fetch_json(session, self.url)
            if document == self._last_content and self.keyset is not None:
                self._succeeded()
                return
            self._version += 1
            keyset = parse_jwks(document, self._version)
        except (FetchError, ValueError) as exc:
            self.last_error = str(exc)
            if self.failing_since is None:
                self.failing_since = time.time()
            if self.keyset is None:
                log.warning("keyset %s is not yet available: %s", self.shown, exc)
            else:
                log.warning(
                    "JWKS refresh from %s failed, keeping the last good keyset: %s", self.shown, exc
                )
            raise FetchError(str(exc)) from exc
        first = self.keyset is None
        self.keyset, self._last_content = keyset, document
        self._succeeded()
        for reason in keyset.skipped:
            log.warning("JWKS %s: skipped %s", self.shown, reason)
        log.info(
            "JWKS %s %s: %d key(s) %s",
            self.shown,
            "fetched" if first else "changed",
            len(keyset.by_kid),
            sorted(str(k) for k in keyset.by_kid),
        )

    def _succeeded(self) -> None:
        self.last_error = None
        self.failing_since = None
        self.fetched_at = time.monotonic()
        self.keys_fetched_at = time.time()

    async def _run(self, session: aiohttp.ClientSession) -> None:
        delay = FIRST_RETRY
        while True:
            try:
                await self.fetch_once(session)
            except FetchError:
                wait = delay
                delay = min(delay * 2, MAX_RETRY, self.refresh)
            else:
                wait = self.refresh
                delay = FIRST_RETRY
            self.next_attempt_at = time.time() + wait
            await asyncio.sleep(wait)


class InlineKeyset:
    """A JWKS given in the policy itself: parsed at load, never fetched."""

    def __init__(self, keyset: Keyset):
        self.url = self.shown = "inline"
        self.keyset: Keyset | None = keyset
        self.last_error: str | None = None
        self.available = True
        self.fetches = 0
        self.fetched_at: float | None = time.monotonic()

    def start(self, session: aiohttp.ClientSession) -> None:
        """Nothing to fetch."""

    async def stop(self) -> None:
        """Nothing to stop."""

    async def refetch_for_unknown_kid(self) -> bool:
        """An inline keyset never changes."""
        return False
