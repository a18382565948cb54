"""Each userOAuth upstream's authorization server, found when first needed (explicit endpoints,
the configured issuer's metadata, or the backend's own 401 and RFC 9728 metadata) and kept for
an hour; a failure is kept for half a minute, so a down upstream is not asked on every call."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from ..controlplane.snapshot import CompiledUserOAuth
from .discovery import DiscoveryError, discover
from .metadata import AuthServer, Endpoints

log = logging.getLogger("mcp_oauth_gateway.useroauth")

KEEP = 3600.0
KEEP_FAILURE = 30.0
TIMEOUT = 10.0


@dataclass(frozen=True, slots=True)
class _Found:
    server: AuthServer | None
    failure: str | None
    until: float


def endpoints_of(oauth: CompiledUserOAuth) -> Endpoints | None:
    """The endpoints a policy names for an upstream without discovery (None: discover)."""
    if oauth.authorization_endpoint is None or oauth.token_endpoint is None:
        return None
    return Endpoints(oauth.authorization_endpoint, oauth.token_endpoint, oauth.revocation_endpoint)


async def find(
    session: aiohttp.ClientSession, oauth: CompiledUserOAuth, backend_url: str, limit: float
) -> AuthServer:
    """The upstream's authorization server, as the policy says to find it; DiscoveryError."""
    explicit = endpoints_of(oauth)
    return await discover(session, backend_url, issuer=oauth.issuer, explicit=explicit, limit=limit)


class Servers:
    """The authorization servers of every userOAuth backend of the process."""

    def __init__(self, session: Callable[[], aiohttp.ClientSession | None]):
        self.session = session
        self._found: dict[tuple[CompiledUserOAuth, str], _Found] = {}
        self._locks: dict[tuple[CompiledUserOAuth, str], asyncio.Lock] = {}
        self._tasks: set[asyncio.Task[None]] = set()

    async def of(self, oauth: CompiledUserOAuth, backend_url: str) -> AuthServer:
        """The upstream's authorization server; DiscoveryError says why it cannot be had."""
        key = (oauth, backend_url)
        found = self._found.get(key)
        if found is None or time.monotonic() > found.until:
            lock = self._locks.setdefault(key, asyncio.Lock())
            async with lock:
                found = self._found.get(key)
                if found is None or time.monotonic() > found.until:
                    found = self._found[key] = await self._discover(oauth, backend_url)
        if found.server is None:
            raise DiscoveryError(found.failure or "the upstream's authorization server is unknown")
        return found.server

    def prefetch(self, oauth: CompiledUserOAuth, backend_url: str) -> None:
        """Look for the server now, in the background: a wrong issuer or an unreachable server
        is logged when the configuration loads, not when the first user connects."""
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:
            return  # built outside the event loop (a test's assembly): found when needed
        if self.session() is None:
            return  # before the control plane started: found when first needed
        task = loop.create_task(self._prefetched(oauth, backend_url))
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _prefetched(self, oauth: CompiledUserOAuth, backend_url: str) -> None:
        with contextlib.suppress(DiscoveryError):
            await self.of(oauth, backend_url)

    def last_failure(self, oauth: CompiledUserOAuth, backend_url: str) -> str | None:
        """Why the last attempt to find the server failed (for /status), if it did."""
        found = self._found.get((oauth, backend_url))
        return None if found is None else found.failure

    async def _discover(self, oauth: CompiledUserOAuth, backend_url: str) -> _Found:
        session = self.session()
        if session is None:
            return _Found(None, "the gateway is shutting down", time.monotonic() + 1)
        try:
            server = await find(session, oauth, backend_url, TIMEOUT)
        except DiscoveryError as exc:
            log.warning(
                "userOAuth %s: its authorization server was not found: %s", backend_url, exc
            )
            return _Found(None, str(exc), time.monotonic() + KEEP_FAILURE)
        return _Found(server, None, time.monotonic() + KEEP)
