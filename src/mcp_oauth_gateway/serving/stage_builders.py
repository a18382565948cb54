"""How each stage of `stages.PIPELINE` is built for a route: from its compiled policy and the
route's context. Each builder is called only when its stage applies to the route."""

from __future__ import annotations

from ..asgi import ASGIApp
from ..controlplane.snapshot import CompiledPolicy, CompiledProvider
from ..dataplane.authn import JwtAuthentication, KeySource, challenger_for
from ..dataplane.authz import CelAuthorization
from ..dataplane.cors import CorsFilter, with_dpop
from ..dataplane.credentials import BackendCredentials, OwnedRemoved
from ..dataplane.headers import OwnedHeaders
from ..dataplane.mcp_authz import McpAuthorization
from ..dataplane.oauth_endpoints import OAuthEndpoints, PathDispatch
from ..dataplane.ratelimit import RateLimit
from ..dataplane.scopes import RequiredScopes
from ..dataplane.transform import HeaderTransformation
from ..dpop import ProofCheck, nonce_context
from ..providers import adapter_for
from ..proxy.federation.stage import Federation
from ..proxy.federation.target import TargetLink
from ..proxy.reverse_proxy import GATEWAY_SET, ReverseProxy
from .route_context import FailClosed, RouteContext
from .user_oauth import connect_pages as user_oauth_pages
from .user_oauth import user_oauth_gates, user_oauth_stage


def _policy(ctx: RouteContext) -> CompiledPolicy:
    """The route's policy (a policy stage applies only when there is one)."""
    assert ctx.policy is not None
    return ctx.policy


def _prm_path(policy: CompiledPolicy) -> str | None:
    return policy.mcp.prm_path if policy.mcp is not None else None


def broker_pages(ctx: RouteContext, app: ASGIApp) -> ASGIApp:
    """The Broker's sign-in and consent pages, by exact path."""
    return PathDispatch(ctx.pages(), app)


def cors(ctx: RouteContext, app: ASGIApp) -> ASGIApp:
    """The route's CORS filter (letting browsers use DPoP where the policy takes it)."""
    settings = ctx.route.cors
    assert settings is not None
    policy = ctx.policy
    if policy is not None and any(p.dpop.enabled for p in policy.providers):
        settings = with_dpop(settings)
    return CorsFilter(app, settings)


def fail_closed(ctx: RouteContext) -> ASGIApp:
    """The 503 a route that cannot be served safely answers."""
    failure = ctx.failure
    assert failure is not None
    return FailClosed(failure.status, failure.error, failure.description)


def owned_headers(ctx: RouteContext, app: ASGIApp) -> ASGIApp:
    """Drops the client's copies of the headers the stages own."""
    return OwnedHeaders(app, *ctx.owned_headers)


def oauth_endpoints(ctx: RouteContext, app: ASGIApp) -> ASGIApp:
    """The MCP OAuth endpoints, with the Broker's when in Broker mode."""
    policy = _policy(ctx)
    assert policy.mcp is not None
    assert policy.provider is not None
    control = ctx.shared.control
    broker = ctx.broker
    return OAuthEndpoints(
        app,
        policy.mcp,
        policy.providers,
        adapter_for(policy.mcp.provider, policy.mcp.client_id),
        control.discoveries.get(policy.provider.discovery_url),
        lambda: control.session,
        broker.routes() if broker is not None else None,
        ctx.shared_with,
    )


def jwt_authentication(ctx: RouteContext, app: ASGIApp) -> ASGIApp:
    """JWT verification against each provider's live keyset, and DPoP proofs remembered and
    nonces keyed where the policy's Broker state is (its Redis, the environment's, or this
    process)."""
    policy = _policy(ctx)
    keysets = ctx.shared.control.keysets
    issuers: list[tuple[CompiledProvider, KeySource]] = [
        (p, keysets[p.keyset.url]) for p in policy.providers
    ]
    # The tokens the Broker issues to workloads, checked with its own key.
    workload = policy.mcp.workload if policy.mcp is not None else None
    keys = ctx.broker.workload_keys if ctx.broker is not None else None
    if workload is not None and keys is not None:
        issuers.append((workload.token_provider, keys))
    process_state = ctx.shared.process_state
    redis_url = policy.mcp.redis_url if policy.mcp is not None else None
    proofs = ProofCheck(
        [p.dpop for p, _ in issuers],
        lambda: process_state.dpop_replay(policy.key, redis_url),
        lambda: process_state.store(redis_url).secret(),
        # Each policy's nonces its own, shared with its Broker's token endpoint.
        context=nonce_context(policy.key),
    )
    return JwtAuthentication(
        app,
        issuers,
        policy.mcp,
        policy.forward_token,
        ctx.shared.metrics,
        policy.jwt_mode,
        ctx.shared.limits.token_cache_entries,
        ctx.shared.token_cache,
        proofs,
        # The DPoP-bound tokens the route's Broker seals, opened with its key.
        ctx.broker.bound_tokens if ctx.broker is not None else None,
    )


def required_scopes(ctx: RouteContext, app: ASGIApp) -> ASGIApp:
    """The route-wide scopes."""
    policy = _policy(ctx)
    assert policy.scopes is not None
    return RequiredScopes(
        app,
        policy.scopes,
        _prm_path(policy),
        ctx.shared.limits.token_cache_entries,
        ctx.shared.authorization_cache,
    )


def cel_authorization(ctx: RouteContext, app: ASGIApp) -> ASGIApp:
    """The policy's CEL rules."""
    policy = _policy(ctx)
    assert policy.authorization is not None
    return CelAuthorization(
        app,
        policy.authorization,
        policy.key,
        challenger_for(policy.mcp, policy.providers),
        ctx.shared.limits.token_cache_entries,
        ctx.shared.authorization_cache,
    )


def rate_limit(ctx: RouteContext, app: ASGIApp) -> ASGIApp:
    """The policy's token buckets (kept across reloads while unchanged)."""
    policy = _policy(ctx)
    assert policy.rate_limit is not None
    limiter = ctx.shared.process_state.limiter(policy.key, policy.rate_limit)
    return RateLimit(app, policy.rate_limit, limiter, policy.key, ctx.shared.metrics)


def header_transformation(ctx: RouteContext, app: ASGIApp) -> ASGIApp:
    """The request headers set from CEL and removed."""
    policy = _policy(ctx)
    assert policy.transformation is not None
    return HeaderTransformation(app, policy.transformation)


def mcp_authorization(ctx: RouteContext, app: ASGIApp) -> ASGIApp:
    """Tool-level rules and item scopes."""
    policy = _policy(ctx)
    return McpAuthorization(
        app,
        policy.mcp_authorization,
        ctx.shared.limits.max_body_bytes,
        policy.scopes,
        _prm_path(policy),
        tuple(target.name for target in ctx.route.targets),
        ctx.shared.limits.token_cache_entries,
        ctx.shared.authorization_cache,
    )


def backend_credentials(ctx: RouteContext, app: ASGIApp) -> ASGIApp:
    """What the backend is given in place of the client's token."""
    policy = _policy(ctx)
    per_target = ctx.target_credentials
    if per_target is not None:
        # Each target's own is set by the federation as it talks to that target; a userOAuth
        # target's stage first asks the caller to connect it.
        return user_oauth_gates(ctx, OwnedRemoved(app, per_target.owned))
    assert policy.credentials is not None
    if policy.credentials.user_oauth is not None:
        return user_oauth_stage(ctx, app)
    return BackendCredentials(app, policy.credentials, ctx.route.route, ctx.exchanger(policy))


def connect_pages(ctx: RouteContext, app: ASGIApp) -> ASGIApp:
    """The user-OAuth connect and connections pages, by exact path."""
    return PathDispatch(user_oauth_pages(ctx), app)


def reverse_proxy(ctx: RouteContext) -> ASGIApp:
    """The proxy to the route's backend."""
    route = ctx.route
    assert route.target is not None
    metrics = ctx.shared.metrics
    return ReverseProxy(
        route.target,
        ctx.shared.upstream,
        route.target.timeout or route.backend_timeout,
        ctx.shared.trust_forwarded,
        ctx.shared.limits.max_body_bytes,
        metrics.latency_observer(route.route) if metrics else None,
        cors_filtered=route.cors is not None,
        kept=ctx.owned_headers[0] | GATEWAY_SET,
    )


def federation(ctx: RouteContext) -> ASGIApp:
    """The backend's targets served as one MCP server."""
    route = ctx.route
    shared = ctx.shared
    metrics = shared.metrics
    credentials, owned = ctx.credential_headers() or (None, frozenset[bytes]())
    link = TargetLink(
        shared.upstream,
        route.backend_timeout,
        shared.trust_forwarded,
        ctx.owned_headers[0] | GATEWAY_SET,
        metrics.latency_observer(route.route) if metrics else None,
        credentials,
        owned,
    )
    state = shared.process_state.federation_of(route)
    return Federation(route.targets, link, shared.limits.max_body_bytes, state)
