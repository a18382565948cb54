"""Which Broker route a request is at, and how what the Broker issues there stays there.

Several Broker routes may share one host, one store (the default Redis) and so one store secret:
two tenants' policies on `/a/mcp` and `/b/mcp`, say. Everything a route issues is bound to its
*route key*, a digest of the policy's key (`namespace/name`) and the resource the route serves
(`resourceMetadata.resource`, or the gateway's origin and MCP path when it names none, as the
RFC 8707 `resource` check reads it). Client ids carry it inside their signature; consent names it;
codes, pending sign-ins, provider states, refresh tokens and access-token bindings are stored under
it, so another route's endpoints never find them (nor use them up). It is computed from
configuration and the request's origin alone, so every replica computes the same one; the policy
is part of it because the resource is not a secret: another policy may name the same URL.
"""

from __future__ import annotations

import hashlib
from typing import Any

import orjson

from .store import BrokerStore


def route_key(policy: str, resource: str) -> str:
    """The key of the Broker route that policy `policy` serves `resource` at."""
    # A JSON array, so no policy name and resource can be spelled as another pair.
    return hashlib.sha256(orjson.dumps([policy, resource])).hexdigest()[:32]


class RouteStore:
    """One route's part of a shared store: its records are kept under its route key, where the
    same kind of record of another route is never looked for. The secret is the store's."""

    def __init__(self, store: BrokerStore, route: str):
        self.store = store
        self.route = route

    def _key(self, key: str) -> str:
        return f"{self.route}:{key}"

    async def put(self, kind: str, key: str, value: dict[str, Any], ttl: int) -> None:
        """Store under this route."""
        await self.store.put(kind, self._key(key), value, ttl)

    async def take(self, kind: str, key: str) -> dict[str, Any] | None:
        """Take what this route stored (another route's record with the same key stays)."""
        return await self.store.take(kind, self._key(key))

    async def first_use(self, kind: str, key: str, ttl: int) -> bool:
        """Remember under this route (another route's use of the same key is its own)."""
        return await self.store.first_use(kind, self._key(key), ttl)

    async def secret(self) -> bytes:
        """The shared store's secret."""
        return await self.store.secret()

    async def close(self) -> None:
        """Nothing: the shared store is closed by whoever made it."""
