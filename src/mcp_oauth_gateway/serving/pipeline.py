"""Assemble one route rule's pipeline from the snapshot, once per configuration:
CORS → MCP OAuth endpoints → JWT authentication → required scopes → CEL authorization →
rate limit → header transformation → MCP tool-level authorization and item scopes → reverse
proxy."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..asgi import ASGIApp, Limits, Receive, Scope, Send, send_error
from ..broker.endpoints import Broker
from ..broker.identity import SignInProvider
from ..controlplane.control import ControlPlane
from ..controlplane.snapshot import CompiledPolicy, CompiledRoute, Snapshot
from ..dataplane.authn import JwtAuthentication, challenger_for
from ..dataplane.authz import CelAuthorization
from ..dataplane.cors import CorsFilter
from ..dataplane.credentials import BackendCredentials
from ..dataplane.headers import OwnedHeaders
from ..dataplane.mcp_authz import McpAuthorization
from ..dataplane.metrics import Metrics
from ..dataplane.oauth_endpoints import OAuthEndpoints, PathDispatch
from ..dataplane.ratelimit import RateLimit
from ..dataplane.routing import RouteEntry, RouteTable, shared_hosts
from ..dataplane.scopes import RequiredScopes
from ..dataplane.token_exchange import TokenExchanger
from ..dataplane.transform import HeaderTransformation
from ..providers import adapter_for
from ..proxy.reverse_proxy import GATEWAY_SET, ReverseProxy
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


@dataclass(frozen=True)
class Assembly:
    """What every route's pipeline is built from, besides the route itself."""

    control: ControlPlane
    upstream: Upstream
    trust_forwarded: bool
    brokers: BrokerRuntime
    limits: Limits
    metrics: Metrics | None = None

    def route_app(self, route: CompiledRoute, shared_with: tuple[str, ...] = ()) -> ASGIApp:
        """The stages for one route rule: the Broker's pages, CORS, then the policy's stages
        around the proxy (or a fail-closed answer). `shared_with`: the other protected
        resources on a host the route serves (then it does not answer the root forms)."""
        app, pages = self._guarded(route, shared_with)
        if route.cors is not None:
            app = CorsFilter(app, route.cors)
        if pages:
            # Outside the CORS filter: the Broker's browser pages are never readable
            # cross-origin.
            app = PathDispatch(pages, app)
        return app

    def _guarded(
        self, route: CompiledRoute, shared_with: tuple[str, ...]
    ) -> tuple[ASGIApp, dict[str, ASGIApp]]:
        policy = route.policy
        if route.broken is not None or route.target is None:
            return FailClosed(
                503, "backend_unavailable", route.broken or "route has no backend"
            ), {}
        if policy is not None and policy.invalid is not None:
            return FailClosed(503, "policy_invalid", policy.invalid), {}
        sets, removes = set_headers(policy)
        app: ASGIApp = ReverseProxy(
            route.target,
            self.upstream,
            route.backend_timeout,
            self.trust_forwarded,
            self.limits.max_body_bytes,
            self.metrics.latency_observer(route.route) if self.metrics else None,
            cors_filtered=route.cors is not None,
            kept=sets | GATEWAY_SET,
        )
        if policy is None:
            return app, {}
        if policy.credentials is not None:
            app = BackendCredentials(
                app, policy.credentials, route.route, self._exchanger(policy, route.route)
            )
        app, pages = self._authentication(self._claims_stages(app, policy), policy, shared_with)
        if sets or removes:
            app = OwnedHeaders(app, sets, removes)
        return app, pages

    def _exchanger(self, policy: CompiledPolicy, route: str) -> TokenExchanger | None:
        """The token exchanger of a TokenExchange backend: each provider's token endpoint
        (from its metadata) and keyset version, by issuer."""
        credentials = policy.credentials
        if credentials is None or credentials.token_exchange is None:
            return None
        control = self.control
        providers = {
            p.issuer: (
                control.discoveries.get(p.discovery_url),
                _version_of(control, p.keyset.url),
            )
            for p in policy.providers
        }
        return TokenExchanger(
            credentials.token_exchange,
            providers,
            lambda: control.session,
            self.metrics.exchange_counter(route) if self.metrics else None,
        )

    def _claims_stages(self, app: ASGIApp, policy: CompiledPolicy) -> ASGIApp:
        """The stages that use the verified claims, innermost first."""
        scopes = policy.scopes
        prm_path = policy.mcp.prm_path if policy.mcp is not None else None
        if policy.mcp_authorization is not None or (scopes is not None and scopes.items):
            app = McpAuthorization(
                app, policy.mcp_authorization, self.limits.max_body_bytes, scopes, prm_path
            )
        if policy.transformation is not None:
            app = HeaderTransformation(app, policy.transformation)
        if policy.rate_limit is not None:
            limiter = self.brokers.limiter(policy.key, policy.rate_limit)
            app = RateLimit(app, policy.rate_limit, limiter, policy.key, self.metrics)
        if policy.authorization is not None:
            app = CelAuthorization(
                app, policy.authorization, policy.key, challenger_for(policy.mcp)
            )
        if scopes is not None and scopes.required:
            # Before the rules: a token short of a scope is asked to step up, not refused.
            app = RequiredScopes(app, scopes, prm_path)
        return app

    def _authentication(
        self, app: ASGIApp, policy: CompiledPolicy, shared_with: tuple[str, ...]
    ) -> tuple[ASGIApp, dict[str, ASGIApp]]:
        """JWT authentication and, with `mcp`, the OAuth endpoints (and the Broker's pages)."""
        if policy.provider is None:
            return app, {}
        control = self.control
        app = JwtAuthentication(
            app,
            [(p, control.keysets[p.keyset.url]) for p in policy.providers],
            policy.mcp,
            policy.forward_token,
            self.metrics,
            policy.jwt_mode,
        )
        mcp = policy.mcp
        if mcp is None:
            return app, {}
        discovery = control.discoveries.get(policy.provider.discovery_url)
        adapter = adapter_for(mcp.provider, mcp.client_id)
        broker = None
        if mcp.mode == "Broker":
            store = self.brokers.store(mcp.redis_url)
            broker = Broker(
                mcp,
                self._sign_in_providers(policy),
                store,
                self.brokers.documents,
                lambda: control.session,
            )
        app = OAuthEndpoints(
            app,
            mcp,
            policy.providers,
            adapter,
            discovery,
            lambda: control.session,
            broker.routes() if broker is not None else None,
            shared_with,
        )
        return app, broker.pages() if broker is not None else {}

    def _sign_in_providers(self, policy: CompiledPolicy) -> tuple[SignInProvider, ...]:
        """What the Broker needs of each provider: its metadata, client, name and adapter."""
        out = []
        for provider in policy.providers:
            adapter = adapter_for(provider.kind, provider.client_id)
            out.append(
                SignInProvider(
                    index=provider.index,
                    name=provider.name,
                    client_id=provider.client_id or "",
                    discovery=self.control.discoveries.get(provider.discovery_url),
                    forwards_resource=adapter.forwards_resource if adapter else True,
                    login_hint_domains=provider.login_hint_domains,
                )
            )
        return tuple(out)

    def tables(self, snapshot: Snapshot) -> dict[int, RouteTable]:
        """A route table per listener port; pipelines are shared by the routes' matches."""
        built: dict[tuple[str, int], ASGIApp] = {}
        tables = {}
        shared = shared_hosts(snapshot.listeners)
        for port, routes in snapshot.listeners.items():
            entries = []
            for route in routes:
                key = (route.route, route.rule)
                if key not in built:
                    built[key] = self.route_app(route, shared.get(key, ()))
                entries.append(RouteEntry(route, built[key]))
            tables[port] = RouteTable(entries)
        return tables


def set_headers(policy: CompiledPolicy | None) -> tuple[frozenset[bytes], frozenset[bytes]]:
    """The request headers a route's stages set for the backend, and those they remove."""
    sets: set[bytes] = set()
    removes: frozenset[bytes] = frozenset()
    if policy is None:
        return frozenset(), removes
    if policy.forward_token:
        sets.add(b"authorization")
    credentials = policy.credentials
    if credentials is not None:
        sets.add(b"authorization")
        secret = credentials.secret_header
        if secret is not None:
            sets.add(secret.header)
            if secret.identity is not None:
                sets.add(secret.identity.header)
    if policy.transformation is not None:
        sets.update(name for name, _ in policy.transformation.set)
        removes = policy.transformation.remove
    return frozenset(sets), removes


def _version_of(control: ControlPlane, url: str) -> Callable[[], int]:
    """The current version of a keyset (0 while none was fetched)."""

    def version() -> int:
        holder = control.keysets.get(url)
        keyset = holder.keyset if holder is not None else None
        return keyset.version if keyset is not None else 0

    return version
