"""What outlives configuration reloads in broker mode: the state stores and the CIMD cache."""

from __future__ import annotations

from .clients import MetadataDocuments
from .store import BrokerStore, MemoryStore, RedisStore


class BrokerRuntime:
    """One store per Redis URL (or one in-memory store), shared by every broker of a process."""

    def __init__(self, allow_local_client_metadata: bool = False,
                 default_redis_url: str | None = None):
        self.documents = MetadataDocuments(allow_private=allow_local_client_metadata)
        self.default_redis_url = default_redis_url
        self._stores: dict[str, BrokerStore] = {}

    def store(self, redis_url: str | None) -> BrokerStore:
        """The store for a policy's Redis URL (the environment's, or memory, when unset)."""
        url = redis_url or self.default_redis_url
        key = url or "memory"
        if key not in self._stores:
            self._stores[key] = RedisStore(url) if url else MemoryStore()
        return self._stores[key]

    async def close(self) -> None:
        """Close every store."""
        for store in self._stores.values():
            await store.close()
