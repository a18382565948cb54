"""Prometheus metrics, served on the admin listener.

The request path only bumps plain integers (the event loop is single-threaded, so no locks);
prometheus_client turns them into the exposition format when /metrics is scraped."""

from __future__ import annotations

import time
from bisect import bisect_left
from collections.abc import Callable, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeMetricFamily,
    HistogramMetricFamily,
)

from ..urls import shown_url
from .bounded import CacheCounts

REASONS = (
    ("missing bearer token", "missing"),
    # Before the token's reasons: a proof's refusal names its own signature, alg and typ.
    ("DPoP-Nonce", "dpop_nonce"),
    ("DPoP", "dpop"),
    ("cnf", "dpop"),
    ("malformed token", "malformed"),
    ("is not accepted", "algorithm"),
    ("typ ", "type"),
    ("crit", "crit"),
    ("no key with kid", "unknown_kid"),
    ("has no kid", "unknown_kid"),
    ("signature", "signature"),
    ("cannot be verified with key", "algorithm"),
    ("expired", "expired"),
    ("not yet valid", "not_yet_valid"),
    ("issued in the future", "iat"),
    ("not the expected issuer", "issuer"),
    ("is not one of this route's issuers", "issuer"),
    ("aud", "audience"),
    ("not yet available", "keyset_unavailable"),
    ("longer than", "too_large"),
)
BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


def failure_reason(description: str) -> str:
    """A bounded label for an authentication failure message."""
    for marker, reason in REASONS:
        if marker in description:
            return reason
    return "other"


def keyset_labels(urls: list[str]) -> list[str]:
    """Each URL as a label may show it (`shown_url`), numbered ` (2)`, ` (3)`… when several
    read the same once their secrets are hidden: a scraper refuses a repeated label set."""
    labels: list[str] = []
    seen: dict[str, int] = {}
    for url in urls:
        shown = shown_url(url)
        seen[shown] = seen.get(shown, 0) + 1
        labels.append(shown if seen[shown] == 1 else f"{shown} ({seen[shown]})")
    return labels


def decision_of(status: int) -> str:
    """What the gateway decided, from the status it answered."""
    if status in (401, 403, 429):
        return {401: "unauthenticated", 403: "forbidden", 429: "rate_limited"}[status]
    if status >= 500:
        return "error"
    return "allowed"


# A federated route rule's target as its health is exported: (route, rule, target, up: None
# when not asked yet, failures by reason).
TargetRow = tuple[str, int, str, bool | None, Mapping[str, int]]


class _Latency:
    __slots__ = ("buckets", "count", "total")

    def __init__(self) -> None:
        self.buckets = [0] * (len(BUCKETS) + 1)
        self.count = 0
        self.total = 0.0

    def observe(self, seconds: float) -> None:
        self.buckets[bisect_left(BUCKETS, seconds)] += 1
        self.count += 1
        self.total += seconds


class ConnectionCounts:
    """Connection-level counts of one process, bumped by the server's HTTP protocol.

    The protocol lives above the data plane; it receives this object rather than the data plane
    knowing about the protocol."""

    __slots__ = ("header_timeouts", "idle_timeouts", "limit", "open", "refused")

    def __init__(self) -> None:
        self.open = 0
        self.limit = 0
        self.header_timeouts = 0
        self.idle_timeouts = 0
        self.refused = 0


# A Redis connection as the metrics show it: its URL without passwords, up, failures.
RedisRow = tuple[str, bool | None, int]


class Metrics:
    """Counters of one gateway process, exported through their own registry."""

    def __init__(
        self,
        token_cache: CacheCounts | None = None,
        authorization_cache: CacheCounts | None = None,
    ) -> None:
        self.connections = ConnectionCounts()
        self.requests: dict[tuple[str, int], int] = {}
        self.auth_failures: dict[str, int] = {}
        self.rejections: dict[str, int] = {}
        # (route, outcome: exchanged, cache_hit, refused, unreachable, malformed) → count
        self.exchanges: dict[tuple[str, str], int] = {}
        self.latency: dict[str, _Latency] = {}
        # Every route's verified-token cache and authorization memo count here.
        self.token_cache = token_cache if token_cache is not None else CacheCounts()
        self.authorization_cache = (
            authorization_cache if authorization_cache is not None else CacheCounts()
        )
        self._keysets: list[tuple[str, object]] = []
        # The routes and policies of the running configuration (`keep`).
        self._routes: frozenset[str] = frozenset()
        self._policies: frozenset[str] = frozenset()
        self._federation: Callable[[], Iterable[TargetRow]] = list
        self._redis: Callable[[], Iterable[RedisRow]] = list
        self.registry = CollectorRegistry()
        self.registry.register(self)

    def request(self, route: str, status: int) -> None:
        """Count one request."""
        key = (route, status)
        self.requests[key] = self.requests.get(key, 0) + 1

    def auth_failure(self, description: str) -> None:
        """Count one refused token, by reason."""
        reason = failure_reason(description)
        self.auth_failures[reason] = self.auth_failures.get(reason, 0) + 1

    def rejection_counter(self, policy: str) -> Callable[[], None]:
        """A function counting one rate-limit rejection of `policy`."""

        def count() -> None:
            self.rejections[policy] = self.rejections.get(policy, 0) + 1

        return count

    def exchange_counter(self, route: str) -> Callable[[str], None]:
        """A function counting one token exchange outcome for the backend of `route`."""

        def count(outcome: str) -> None:
            key = (route, outcome)
            self.exchanges[key] = self.exchanges.get(key, 0) + 1

        return count

    def latency_observer(self, route: str) -> Callable[[float], None]:
        """A function recording one upstream latency for `route`."""
        return self.latency.setdefault(route, _Latency()).observe

    def keep(self, routes: frozenset[str], policies: frozenset[str]) -> None:
        """A new configuration: drop the series of the routes and policies the previous one
        had and this one has not (else every route or policy ever served would stay, and its
        series with it); requests that are not a route's keep theirs."""
        gone_routes, gone_policies = self._routes - routes, self._policies - policies
        self._routes, self._policies = routes, policies
        if gone_routes:
            self.requests = {k: n for k, n in self.requests.items() if k[0] not in gone_routes}
            self.exchanges = {k: n for k, n in self.exchanges.items() if k[0] not in gone_routes}
            self.latency = {k: h for k, h in self.latency.items() if k not in gone_routes}
        if gone_policies:
            self.rejections = {k: n for k, n in self.rejections.items() if k not in gone_policies}

    def watch_keysets(self, keysets: list[tuple[str, object]]) -> None:
        """The keyset holders whose fetch count and age are reported, labelled by URL."""
        labels = keyset_labels([url for url, _ in keysets])
        self._keysets = [
            (label, holder) for label, (_, holder) in zip(labels, keysets, strict=True)
        ]

    def watch_federation(self, rows: Callable[[], Iterable[TargetRow]]) -> None:
        """Where the federated routes' targets' health is read at scrape time."""
        self._federation = rows

    def watch_redis(self, rows: Callable[[], Iterable[RedisRow]]) -> None:
        """Where the Redis connections' health is read at scrape time."""
        self._redis = rows

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        return generate_latest(self.registry)

    def collect(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily | HistogramMetricFamily]:
        """The prometheus_client collector protocol, read at scrape time."""
        requests = CounterMetricFamily(
            "mcp_gateway_requests",
            "Requests by route, status and decision",
            labels=["route", "status", "decision"],
        )
        for (route, status), n in sorted(self.requests.items()):
            requests.add_metric([route, str(status), decision_of(status)], n)
        failures = CounterMetricFamily(
            "mcp_gateway_authentication_failures",
            "Bearer tokens refused, by reason",
            labels=["reason"],
        )
        for reason, n in sorted(self.auth_failures.items()):
            failures.add_metric([reason], n)
        rejections = CounterMetricFamily(
            "mcp_gateway_rate_limit_rejections",
            "Requests refused by a rate limit",
            labels=["policy"],
        )
        for policy, n in sorted(self.rejections.items()):
            rejections.add_metric([policy], n)
        exchanges = CounterMetricFamily(
            "mcp_gateway_token_exchanges",
            "Token exchanges for backends, by route and outcome "
            "(exchanged, cache_hit, refused, unreachable, malformed)",
            labels=["route", "outcome"],
        )
        for (route, outcome), n in sorted(self.exchanges.items()):
            exchanges.add_metric([route, outcome], n)
        latency = HistogramMetricFamily(
            "mcp_gateway_upstream_latency_seconds",
            "Time until the MCP backend's response headers",
            labels=["route"],
        )
        for route, hist in sorted(self.latency.items()):
            cumulative, running = [], 0
            for bound, n in zip([*map(str, BUCKETS), "+Inf"], hist.buckets, strict=True):
                running += n
                cumulative.append((bound, running))
            latency.add_metric([route], cumulative, hist.total)
        fetches = GaugeMetricFamily(
            "mcp_gateway_jwks_fetches", "JWKS fetches so far", labels=["url"]
        )
        age = GaugeMetricFamily(
            "mcp_gateway_jwks_age_seconds",
            "Seconds since the keyset was last fetched successfully (-1: never)",
            labels=["url"],
        )
        now = time.monotonic()
        for url, holder in self._keysets:
            fetches.add_metric([url], getattr(holder, "fetches", 0))
            fetched = getattr(holder, "fetched_at", None)
            age.add_metric([url], now - fetched if fetched else -1.0)
        yield from (requests, failures, rejections, exchanges, latency, fetches, age)
        yield from self._connection_metrics()
        yield from self._cache_metrics()
        yield from self._federation_metrics()
        yield from self._redis_metrics()

    def _redis_metrics(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        up = GaugeMetricFamily(
            "mcp_gateway_redis_up",
            "Whether a Redis answered its last exchange (1) or failed (0), by URL without "
            "passwords",
            labels=["redis"],
        )
        failures = CounterMetricFamily(
            "mcp_gateway_redis_failures",
            "Failed exchanges with a Redis (unanswered, or writes not acknowledged by replicas)",
            labels=["redis"],
        )
        for shown, is_up, count in self._redis():
            if is_up is not None:
                up.add_metric([shown], 1.0 if is_up else 0.0)
            failures.add_metric([shown], count)
        yield from (up, failures)

    def _federation_metrics(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        labels = ["route", "rule", "target"]
        up = GaugeMetricFamily(
            "mcp_gateway_federation_target_up",
            "Whether a federated route's target answered its last exchange (1) or failed (0)",
            labels=labels,
        )
        failures = CounterMetricFamily(
            "mcp_gateway_federation_target_failures",
            "Failed exchanges with a federated route's target, by reason (timeout, "
            "unreachable, http_error, bad_answer, refused, session_lost)",
            labels=[*labels, "reason"],
        )
        for route, rule, target, is_up, counts in self._federation():
            if is_up is not None:
                up.add_metric([route, str(rule), target], 1.0 if is_up else 0.0)
            for reason, n in sorted(counts.items()):
                failures.add_metric([route, str(rule), target, reason], n)
        yield from (up, failures)

    def _cache_metrics(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        yield from _cache_metrics("token_cache", "verified-token cache", self.token_cache)
        yield from _cache_metrics(
            "authorization_cache", "authorization decision memo", self.authorization_cache
        )

    def _connection_metrics(self) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
        counts = self.connections
        yield GaugeMetricFamily(
            "mcp_gateway_connections_open",
            "Client connections open on the gateway listeners",
            value=counts.open,
        )
        yield GaugeMetricFamily(
            "mcp_gateway_connections_max",
            "Client connections this process accepts at once (--max-connections)",
            value=counts.limit,
        )
        # A keep-alive connection that ends after its last response is normal and not counted;
        # these count clients that hold a connection without completing a request.
        timeouts = CounterMetricFamily(
            "mcp_gateway_connection_timeouts",
            "Connections closed "
            "because the client stalled: header (no complete request "
            "head in time) or idle (the request body stopped "
            "arriving)",
            labels=["timeout"],
        )
        timeouts.add_metric(["header"], counts.header_timeouts)
        timeouts.add_metric(["idle"], counts.idle_timeouts)
        yield timeouts
        yield CounterMetricFamily(
            "mcp_gateway_connections_refused",
            "Connections refused with 503 because --max-connections were open",
            value=counts.refused,
        )


def _cache_metrics(
    name: str, what: str, counts: CacheCounts
) -> Iterator[CounterMetricFamily | GaugeMetricFamily]:
    """One memo kind's hits, misses, evictions and entries, summed over the routes."""
    prefix = f"mcp_gateway_{name}"
    yield CounterMetricFamily(f"{prefix}_hits", f"Lookups the {what} answered", value=counts.hits)
    yield CounterMetricFamily(
        f"{prefix}_misses",
        f"Lookups the {what} could not answer (never seen, forgotten, or no longer valid)",
        value=counts.misses,
    )
    yield CounterMetricFamily(
        f"{prefix}_evictions",
        f"Entries the {what} forgot to make room (least recently used first)",
        value=counts.evictions,
    )
    yield GaugeMetricFamily(
        f"{prefix}_entries", f"Entries the {what} holds, over every route", value=counts.entries()
    )
