"""What the resources cannot say about where they are served, and the rules that depend on it."""

from __future__ import annotations

from dataclasses import dataclass

from .cluster import Cluster


@dataclass(frozen=True, slots=True)
class Deployment:
    """How many processes (workers, or replicas in a cluster) share the traffic, and the Redis
    they share by default, if any."""

    processes: int = 1
    default_redis_url: str | None = None
    # How an operator sets the shared default, for messages.
    default_redis_hint: str = "the MCP_OAUTH_GATEWAY_REDIS_URL environment variable"
    # Set when the objects come from a Kubernetes API server.
    cluster: Cluster | None = None
    # How messages name the processes when their number is not known (a cluster's replicas).
    processes_label: str | None = None
    # Where users' upstream tokens are kept (`serve --user-token-store`): "sqlite", "redis",
    # or None when the gateway runs without `--user-token-key` (userOAuth is then refused).
    user_token_store: str | None = None

    @property
    def served_by(self) -> str:
        """The processes, as messages name them."""
        return self.processes_label or f"{self.processes} processes"

    @property
    def shares_memory(self) -> bool:
        """Whether in-memory state is seen by every request (one process only)."""
        return self.processes <= 1
