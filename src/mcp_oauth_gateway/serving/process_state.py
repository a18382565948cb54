"""What a process keeps across configuration reloads, for every route it serves: its Redis
connections, the Broker's state stores, the CIMD cache, rate-limit buckets, federated routes'
sessions, DPoP replay caches, workload-token keys, users' upstream grants."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from ..broker.clients import MetadataDocuments
from ..broker.store import BrokerStore, MemoryStore, RedisStore
from ..broker.workload_keys import WorkloadKeys
from ..controlplane.snapshot import CompiledRateLimit, CompiledRoute, CompiledTarget, Snapshot
from ..dataplane.ratelimit import Limiter, LocalLimiter, RedisLimiter
from ..dpop import MemoryReplayCache, RedisReplayCache, ReplayCache
from ..proxy.federation.shared import SharedSessions
from ..proxy.federation.stage import FederationState
from ..redis_clients import RedisConnections
from ..useroauth.runtime import UserOAuthRuntime
from ..usertokens.keys import TokenKeys
from ..usertokens.store import open_store

# What a policy's rate limit and a federated route rule's sessions are found by: values of the
# configuration, so that an edit of them starts afresh.
LimitIdentity = tuple[str, str | None, int, float]
FederationIdentity = tuple[str, int, tuple[CompiledTarget, ...], str | None]


def limit_identity(policy: str, limit: CompiledRateLimit) -> LimitIdentity:
    """What a policy's token buckets are kept by: the policy, its Redis, its numbers."""
    return (policy, limit.redis_url, limit.capacity, limit.per_second)


@dataclass(frozen=True)
class UserTokenSettings:
    """`serve --user-token-key/--user-token-store`: the store is opened in each process (a
    worker opens its own connection) the first time a userOAuth route needs it."""

    store_url: str
    keys: TokenKeys


class ProcessState:
    """What one process keeps across reloads, made once per process and shared by every route:
    each part is found by the configuration values it depends on (one store per Redis URL, one
    set of token buckets per rate limit, ...), so an unchanged value finds the same part."""

    def __init__(
        self, allow_local_client_metadata: bool = False, default_redis_url: str | None = None
    ):
        self.documents = MetadataDocuments(allow_private=allow_local_client_metadata)
        self.default_redis_url = default_redis_url
        # One connection per Redis URL, for every user of it in this process.
        self.redis = RedisConnections()
        self._stores: dict[str, BrokerStore] = {}
        self._limiters: dict[LimitIdentity, Limiter] = {}
        self._federations: dict[FederationIdentity, FederationState] = {}
        self._replays: dict[str, ReplayCache] = {}
        # Per (store, route): the key of the tokens issued to workloads, derived once.
        self._workload_keys: dict[tuple[str, str], WorkloadKeys] = {}
        self.user_tokens: UserTokenSettings | None = None
        self._user_oauth: UserOAuthRuntime | None = None

    def user_oauth(
        self, session: Callable[[], aiohttp.ClientSession | None]
    ) -> UserOAuthRuntime | None:
        """The process's user-OAuth runtime (None: the gateway runs without a key)."""
        settings = self.user_tokens
        if settings is None:
            return None
        if self._user_oauth is None:
            store = open_store(settings.store_url, settings.keys, connections=self.redis)
            self._user_oauth = UserOAuthRuntime.create(store, settings.keys, session)
        return self._user_oauth

    def limiter(self, policy: str, limit: CompiledRateLimit) -> Limiter:
        """The buckets of a policy's rate limit (kept across reloads while unchanged)."""
        identity = limit_identity(policy, limit)
        if identity not in self._limiters:
            self._limiters[identity] = (
                RedisLimiter(
                    self.redis.connection(limit.redis_url, "spec.traffic.rateLimit.redisUrl"),
                    policy,
                    limit.capacity,
                    limit.per_second,
                )
                if limit.redis_url
                else LocalLimiter(limit.capacity, limit.per_second)
            )
        return self._limiters[identity]

    def federation(
        self,
        route: str,
        rule: int,
        targets: tuple[CompiledTarget, ...],
        redis_url: str | None = None,
    ) -> FederationState:
        """A federated route rule's sessions (kept across reloads while its targets are the
        same; other targets make other sessions, which their clients start anew), shared
        with other replicas through Redis when given its URL."""
        identity = (route, rule, targets, redis_url)
        if identity not in self._federations:
            shared = (
                SharedSessions(self.redis.connection(redis_url), route, rule) if redis_url else None
            )
            self._federations[identity] = FederationState(shared=shared)
        return self._federations[identity]

    def federation_of(self, route: CompiledRoute) -> FederationState:
        """A federated route rule's state, its sessions shared where the Broker's state is: the
        policy's Redis (`mcp.broker.redisUrl`), or the environment's."""
        return self.federation(*self._federation_identity(route))

    def _federation_identity(self, route: CompiledRoute) -> FederationIdentity:
        mcp = route.policy.mcp if route.policy is not None else None
        redis_url = (mcp.redis_url if mcp is not None else None) or self.default_redis_url
        return (route.route, route.rule, route.targets, redis_url)

    def retain(self, snapshot: Snapshot) -> None:
        """Forget the token buckets and federated sessions no route of `snapshot` can use: they
        are found by values an edit changes (a limit's numbers, a rule's targets), so each such
        edit would otherwise leave one more behind for good. Requests still in flight on an
        older configuration keep theirs until they end."""
        limits: set[LimitIdentity] = set()
        federations: set[FederationIdentity] = set()
        for routes in snapshot.listeners.values():
            for route in routes:
                federations.add(self._federation_identity(route))
                policy = route.policy
                if policy is not None and policy.rate_limit is not None:
                    limits.add(limit_identity(policy.key, policy.rate_limit))
        self._limiters = {k: v for k, v in self._limiters.items() if k in limits}
        self._federations = {k: v for k, v in self._federations.items() if k in federations}

    def dpop_replay(self, policy: str, redis_url: str | None) -> ReplayCache:
        """Where a policy's DPoP proofs are remembered, kept across reloads (a reload must not
        forget them: each is accepted once): the policy's Redis or the environment's, shared
        by every replica and policy using it, else this process's memory, one per policy (a
        tenant filling its own cannot refuse another's proofs)."""
        url = redis_url or self.default_redis_url
        key = f"redis:{url}" if url else f"memory:{policy}"
        if key not in self._replays:
            self._replays[key] = (
                RedisReplayCache(self.redis.connection(url)) if url else MemoryReplayCache()
            )
        return self._replays[key]

    def store(self, redis_url: str | None) -> BrokerStore:
        """The store for a policy's Redis URL (the environment's, or memory, when unset)."""
        url = redis_url or self.default_redis_url
        key = url or "memory"
        if key not in self._stores:
            self._stores[key] = RedisStore(self.redis.connection(url)) if url else MemoryStore()
        return self._stores[key]

    def workload_keys(self, redis_url: str | None, route: str) -> WorkloadKeys:
        """A Broker route's workload-token key (its store's secret read once, in the background,
        as soon as the process runs its event loop)."""
        identity = (redis_url or self.default_redis_url or "memory", route)
        if identity not in self._workload_keys:
            self._workload_keys[identity] = WorkloadKeys(self.store(redis_url), route)
        return self._workload_keys[identity]

    def start(self) -> None:
        """Start what runs in the background: Redis health checks, deriving the workload-token
        keys of routes built before the event loop ran."""
        self.redis.start()
        for keys in self._workload_keys.values():
            keys.warm()

    async def close(self) -> None:
        """Close every store, every Redis connection and the client metadata documents'
        session."""
        try:
            for store in self._stores.values():
                await store.close()
            if self._user_oauth is not None:
                await self._user_oauth.close()
            await self.redis.close()
        finally:
            await self.documents.close()
