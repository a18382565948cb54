"""A user's upstream access token for a backend: read from the store, refreshed ahead of expiry
once however many requests (and replicas) need it at the same moment, dropped when the upstream
says the grant is gone (`invalid_grant`), so the user is asked again."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from ..controlplane.snapshot import CompiledUserOAuth
from ..usertokens.grants import Grant, GrantKey
from ..usertokens.refresh import SingleFlight
from ..usertokens.store import GrantStore
from .discovery import DiscoveryError
from .metadata import AuthServer
from .oauth_client import TokenAnswer, UpstreamOAuthError, refresh
from .servers import Servers

log = logging.getLogger("mcp_oauth_gateway.useroauth")

# A token this close to its expiry is refreshed first: it could expire on its way upstream.
REFRESH_AHEAD = 60.0
# Longer than a refresh takes; a holder that died frees the lock after this.
REFRESH_LOCK = 30.0


class Unavailable(Exception):
    """The upstream token cannot be had now (authorization server down), nor used (expired)."""


@dataclass(frozen=True, slots=True)
class Upstream:
    """One userOAuth backend (or target): its settings and URL."""

    oauth: CompiledUserOAuth
    url: str
    service: str  # its name as users read it


@dataclass(frozen=True, slots=True)
class Outcome:
    """A usable access token (None: none, ask the user) and what happened on the way."""

    token: str | None
    event: str | None = None  # "refreshed", "refresh-failed" (grant dropped), or None


def expiring(grant: Grant, now: float, ahead: float = REFRESH_AHEAD) -> bool:
    """Whether the grant's access token expires within `ahead` seconds (never, without exp)."""
    return grant.expires_at is not None and grant.expires_at - ahead <= now


def granted(answer: TokenAnswer, now: float, previous: Grant | None, issuer: str | None) -> Grant:
    """The grant a token answer makes; a refresh answer without a refresh token keeps the old
    one (RFC 6749 §6: the client keeps using it)."""
    refresh_token = answer.refresh_token
    if refresh_token is None and previous is not None:
        refresh_token = previous.refresh_token
    return Grant(
        access_token=answer.access_token,
        refresh_token=refresh_token,
        token_type="Bearer",
        expires_at=None if answer.expires_in is None else now + answer.expires_in,
        scope=answer.scope
        if answer.scope is not None
        else (previous.scope if previous is not None else None),
        upstream_issuer=issuer,
        obtained_at=previous.obtained_at if previous is not None else now,
        refreshed_at=now if previous is not None else None,
    )


class GrantAccess:
    """Reads, refreshes and drops users' grants."""

    def __init__(
        self,
        store: GrantStore,
        servers: Servers,
        session: Callable[[], aiohttp.ClientSession | None],
    ):
        self.store = store
        self.servers = servers
        self.session = session
        self.flight = SingleFlight()

    async def token(self, key: GrantKey, upstream: Upstream) -> Outcome:
        """The user's access token, fresh; Unavailable when it cannot be had now."""
        grant = await self.store.get(key)
        now = time.time()
        if grant is None:
            return Outcome(None)
        if not expiring(grant, now):
            return Outcome(grant.access_token)
        if grant.refresh_token is None:
            if expiring(grant, now, ahead=0):
                await self.store.delete(key)
                return Outcome(None, "expired")
            return Outcome(grant.access_token)
        return await self.flight.run(key.text(), lambda: self._refresh(key, upstream))

    async def renewed(self, key: GrantKey, upstream: Upstream, rejected: str) -> str | None:
        """A new access token after the backend refused `rejected` before its expiry (a clock
        apart, an upstream without `expires_in`): the refresh token's, or another request's
        new one; None when there is none to have."""
        async with self.store.lock("refresh:" + key.text(), REFRESH_LOCK):
            grant = await self.store.get(key)
            if grant is None:
                return None
            if grant.access_token != rejected:
                return grant.access_token  # another request renewed it meanwhile
            if grant.refresh_token is None:
                return None
            try:
                server = await self.servers.of(upstream.oauth, upstream.url)
                answer = await self._ask(server, upstream.oauth, grant.refresh_token)
            except (UpstreamOAuthError, DiscoveryError, Unavailable):
                return None  # the caller drops the grant and asks the user
            renewed = granted(answer, time.time(), grant, server.issuer)
            await self.store.put(key, renewed)
            return renewed.access_token

    async def _refresh(self, key: GrantKey, upstream: Upstream) -> Outcome:
        async with self.store.lock("refresh:" + key.text(), REFRESH_LOCK):
            # Another request or replica may have refreshed while this one waited.
            grant = await self.store.get(key)
            now = time.time()
            if grant is None:
                return Outcome(None)
            if not expiring(grant, now) or grant.refresh_token is None:
                return Outcome(grant.access_token)
            try:
                server = await self.servers.of(upstream.oauth, upstream.url)
                answer = await self._ask(server, upstream.oauth, grant.refresh_token)
            except UpstreamOAuthError as exc:
                if exc.error == "invalid_grant":
                    await self.store.delete(key)
                    log.info("upstream refused a refresh (invalid_grant): grant dropped")
                    return Outcome(None, "refresh-failed")
                return self._still_valid(grant, now, f"{exc.error}: {exc.description}")
            except DiscoveryError as exc:
                return self._still_valid(grant, now, str(exc))
            renewed = granted(answer, time.time(), grant, server.issuer)
            await self.store.put(key, renewed)
            return Outcome(renewed.access_token, "refreshed")

    async def _ask(self, server: AuthServer, oauth: CompiledUserOAuth, token: str) -> TokenAnswer:
        session = self.session()
        if session is None:
            raise Unavailable("the gateway is shutting down")
        return await refresh(
            session,
            server,
            oauth.client_id,
            oauth.client_secret,
            token,
            oauth.resource or server.resource,
            oauth.scopes,
        )

    @staticmethod
    def _still_valid(grant: Grant, now: float, why: str) -> Outcome:
        # A refresh that failed for the upstream's own trouble keeps a token that still works.
        if not expiring(grant, now, ahead=0):
            return Outcome(grant.access_token)
        raise Unavailable(f"the upstream token expired and could not be refreshed: {why}")
