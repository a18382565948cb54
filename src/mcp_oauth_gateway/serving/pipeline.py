"""Assemble one route rule's pipeline from the snapshot, once per configuration:
CORS → MCP OAuth endpoints → JWT authentication → CEL authorization → rate limit →
header transformation → MCP tool-level authorization → reverse proxy."""

from __future__ import annotations

from ..asgi import ASGIApp, Limits, Receive, Scope, Send, send_error
from ..broker.endpoints import Broker
from ..controlplane.control import ControlPlane
from ..controlplane.snapshot import CompiledRoute, Snapshot
from ..dataplane.authn import JwtAuthentication
from ..dataplane.authz import CelAuthorization
from ..dataplane.cors import CorsFilter
from ..dataplane.mcp_authz import McpAuthorization
from ..dataplane.metrics import Metrics
from ..dataplane.oauth_endpoints import OAuthEndpoints, PathDispatch
from ..dataplane.ratelimit import RateLimit
from ..dataplane.routing import RouteEntry, RouteTable
from ..dataplane.transform import HeaderTransformation
from ..providers import adapter_for
from ..proxy.reverse_proxy import ReverseProxy
from ..proxy.upstream import Upstream
from .runtime import BrokerRuntime


class FailClosed:
    """Answers every request with an error: the route cannot be served safely."""

    def __init__(self, status: int, error: str, description: str):
        self.status = status
        self.error = error
        self.description = description

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await send_error(send, self.status, self.error, self.description)


def build_route_app(route: CompiledRoute, control: ControlPlane, upstream: Upstream,
                    trust_forwarded: bool, brokers: BrokerRuntime, limits: Limits,
                    metrics: Metrics | None = None) -> ASGIApp:
    """The stages for one route rule, innermost first."""
    policy = route.policy
    app: ASGIApp
    pages: dict[str, ASGIApp] = {}
    if route.broken is not None or route.target is None:
        app = FailClosed(503, "backend_unavailable", route.broken or "route has no backend")
    elif policy is not None and policy.invalid is not None:
        app = FailClosed(503, "policy_invalid", policy.invalid)
    else:
        app = ReverseProxy(route.target, upstream, route.backend_timeout, trust_forwarded,
                           limits.max_body_bytes,
                           metrics.latency_observer(route.route) if metrics else None,
                           cors_filtered=route.cors is not None)
        if policy is not None:
            if policy.mcp_authorization is not None:
                app = McpAuthorization(app, policy.mcp_authorization, limits.max_body_bytes)
            if policy.transformation is not None:
                app = HeaderTransformation(app, policy.transformation)
            if policy.rate_limit is not None:
                app = RateLimit(app, policy.rate_limit, brokers.limiter(policy.key,
                                                                        policy.rate_limit),
                                policy.key, metrics)
            if policy.authorization is not None:
                app = CelAuthorization(app, policy.authorization, policy.key)
            if policy.provider is not None:
                keys = control.keysets[policy.provider.keyset.url]
                app = JwtAuthentication(app, policy.provider, keys, policy.mcp,
                                        policy.forward_token, metrics)
                if policy.mcp is not None:
                    adapter = adapter_for(policy.mcp.provider, policy.mcp.client_id)
                    discovery = control.discoveries.get(policy.provider.discovery_url)
                    broker = None
                    if policy.mcp.mode == "Broker":
                        broker = Broker(policy.mcp, discovery, brokers.store(policy.mcp.redis_url),
                                        brokers.documents, lambda: control.session)
                        pages = broker.pages()
                    app = OAuthEndpoints(app, policy.mcp, policy.provider, adapter, discovery,
                                         lambda: control.session,
                                         broker.routes() if broker is not None else None)
    if route.cors is not None:
        app = CorsFilter(app, route.cors)
    if pages:
        # Outside the CORS filter: the Broker's browser pages are never readable cross-origin.
        app = PathDispatch(pages, app)
    return app


def build_tables(snapshot: Snapshot, control: ControlPlane, upstream: Upstream,
                 trust_forwarded: bool, brokers: BrokerRuntime,
                 limits: Limits, metrics: Metrics | None = None) -> dict[int, RouteTable]:
    """A route table per listener port; pipelines are shared by the routes' matches."""
    built: dict[tuple[str, int], ASGIApp] = {}
    tables = {}
    for port, routes in snapshot.listeners.items():
        entries = []
        for route in routes:
            key = (route.route, route.rule)
            if key not in built:
                built[key] = build_route_app(route, control, upstream, trust_forwarded, brokers,
                                             limits, metrics)
            entries.append(RouteEntry(route, built[key]))
        tables[port] = RouteTable(entries)
    return tables
