"""Prometheus metrics (prometheus_client), served on the admin listener.

Label children are cached so the request path does one dict lookup and one increment."""

from __future__ import annotations

import time
from collections.abc import Iterator

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily

REASONS = (
    ("missing bearer token", "missing"), ("malformed token", "malformed"),
    ("is not accepted", "algorithm"), ("typ ", "type"), ("crit", "crit"),
    ("no key with kid", "unknown_kid"), ("has no kid", "unknown_kid"),
    ("signature", "signature"), ("cannot be verified with key", "algorithm"),
    ("expired", "expired"), ("not yet valid", "not_yet_valid"), ("issued in the future", "iat"),
    ("not the expected issuer", "issuer"), ("aud", "audience"),
    ("not yet available", "keyset_unavailable"), ("longer than", "too_large"),
)


def failure_reason(description: str) -> str:
    """A bounded label for an authentication failure message."""
    for marker, reason in REASONS:
        if marker in description:
            return reason
    return "other"


def decision_of(status: int) -> str:
    """What the gateway decided, from the status it answered."""
    if status in (401, 403, 429):
        return {401: "unauthenticated", 403: "forbidden", 429: "rate_limited"}[status]
    if status >= 500:
        return "error"
    return "allowed"


class Metrics:
    """The gateway's metrics on their own registry (so tests and workers stay independent)."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("mcp_gateway_requests", "Requests by route, status and decision",
                                ["route", "status", "decision"], registry=self.registry)
        self.auth_failures = Counter("mcp_gateway_authentication_failures",
                                     "Bearer tokens refused, by reason", ["reason"],
                                     registry=self.registry)
        self.rate_limited = Counter("mcp_gateway_rate_limit_rejections",
                                    "Requests refused by a rate limit", ["policy"],
                                    registry=self.registry)
        self.upstream = Histogram("mcp_gateway_upstream_latency_seconds",
                                  "Time until the MCP backend's response headers", ["route"],
                                  buckets=(.0005, .001, .0025, .005, .01, .025, .05, .1, .25,
                                           .5, 1, 2.5, 5, 10, 30),
                                  registry=self.registry)
        self.jwks_fetches = Gauge("mcp_gateway_jwks_fetches", "JWKS fetches so far", ["url"],
                                  registry=self.registry)
        self._children: dict[tuple[str, int], object] = {}
        self._keysets: list[tuple[str, object]] = []
        self.registry.register(_KeysetAge(self))

    def request(self, route: str, status: int) -> None:
        """Count one request."""
        child = self._children.get((route, status))
        if child is None:
            child = self.requests.labels(route, str(status), decision_of(status))
            self._children[(route, status)] = child
        child.inc()  # type: ignore[attr-defined]

    def watch_keysets(self, keysets: list[tuple[str, object]]) -> None:
        """The keyset holders whose fetch count and age are reported."""
        self._keysets = keysets

    def render(self) -> bytes:
        """The Prometheus text exposition."""
        for url, holder in self._keysets:
            self.jwks_fetches.labels(url).set(getattr(holder, "fetches", 0))
        return generate_latest(self.registry)


class _KeysetAge:
    def __init__(self, metrics: Metrics):
        self.metrics = metrics

    def collect(self) -> Iterator[GaugeMetricFamily]:
        """The prometheus_client collector protocol: one family, one sample per keyset."""
        family = GaugeMetricFamily("mcp_gateway_jwks_age_seconds",
                                   "Seconds since the keyset was last fetched successfully "
                                   "(-1: never)", labels=["url"])
        now = time.monotonic()
        for url, holder in self.metrics._keysets:
            fetched = getattr(holder, "fetched_at", None)
            family.add_metric([url], now - fetched if fetched else -1.0)
        yield family
