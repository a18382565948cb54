"""What the Redis parts of a federated route rule share: the client, the rule's namespace, how
long an unused session's keys live, and the names of a session's keys, all under the session's
hash tag (`{<session id>}`) so that a Redis Cluster keeps them on one slot and a transaction may
touch several."""

from __future__ import annotations

import logging

from redis.asyncio import Redis
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError

from ...redis_clients import RedisConnection, RedisUnavailable

log = logging.getLogger("mcp_oauth_gateway.federation")

# What a failure to reach Redis raises (a command's error, or the connection's).
FAILURES = (RedisError, OSError)


class RedisHeld:
    """The route rule's Redis client and namespace, as `shared.SharedSessions` sets them."""

    connection: RedisConnection
    _client: Redis | RedisCluster
    namespace: str
    ttl: int

    def unavailable(self, exc: BaseException) -> RedisUnavailable:
        """What to raise when Redis could not be asked something that must not be guessed (a
        new session's limits): answered 503 with `Retry-After`."""
        self.connection.failed(exc)
        return RedisUnavailable(self.connection.shown, f"did not answer: {exc}")

    def session_key(self, session_id: str, kind: str) -> str:
        """A key of the session's, beside its record, on the session's slot."""
        return f"{self.namespace}session:{{{session_id}}}:{kind}"
