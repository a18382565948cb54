"""The key of the tokens a Broker route issues to workloads: derived from the store's secret
and the route (the same on every replica, another for another route or secret), public half
only published, and, until derived, waited for without blocking a request."""

from __future__ import annotations

import asyncio

from mcp_oauth_gateway.broker.store import MemoryStore
from mcp_oauth_gateway.broker.workload_keys import WorkloadKeys, derive_key
from support import wait_until_async


def test_the_key_depends_on_the_secret_and_the_route_only():
    one = derive_key(b"s" * 32, "route-a")
    assert derive_key(b"s" * 32, "route-a").kid == one.kid
    assert derive_key(b"s" * 32, "route-b").kid != one.kid
    assert derive_key(b"t" * 32, "route-a").kid != one.kid
    assert one.public["alg"] == "ES256"
    assert "d" not in one.public


class GatedStore(MemoryStore):
    """A store whose secret is answered only once `opened` is set (Redis being slow)."""

    def __init__(self) -> None:
        super().__init__()
        self.opened = asyncio.Event()

    async def secret(self) -> bytes:
        await self.opened.wait()
        return await super().secret()


async def test_until_the_secret_is_read_there_is_no_keyset_and_then_there_is():
    store = GatedStore()
    keys = WorkloadKeys(store, "route")
    assert keys.keyset is None  # the JWT stage answers 503 with Retry-After meanwhile
    assert not keys.available
    store.opened.set()
    await wait_until_async(lambda: keys.available, what="the derived key")
    assert keys.keyset is not None
    signing = await keys.signing()
    assert list(keys.keyset.by_kid) == [signing.kid]
    assert (await keys.jwks()) == {"keys": [signing.public]}


async def test_two_replicas_on_one_store_derive_one_key():
    store = MemoryStore()
    first, second = WorkloadKeys(store, "route"), WorkloadKeys(store, "route")
    assert (await first.signing()).kid == (await second.signing()).kid
    assert (await WorkloadKeys(store, "other").signing()).kid != (await first.signing()).kid
