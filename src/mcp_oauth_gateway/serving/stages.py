"""The request's way through a route, declared once and read top to bottom: each stage, when it
applies, how it is built (`stage_builders`) and what `/config` shows of it (`stage_views`). The
assembly (`pipeline.py`), `/config` and the docs' stage list all read `PIPELINE`, so a new stage
is its module in `dataplane/`, a builder, and one entry here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..asgi import ASGIApp
from ..audit import Answering
from ..controlplane.snapshot import CompiledPolicy, CompiledRoute
from . import stage_builders as build
from . import stage_views as views
from .route_context import RouteContext, failure_of, is_broker, set_headers
from .user_oauth import uses_user_oauth


@dataclass(frozen=True)
class Stage:
    """One step of the request's way. It either wraps what comes after it (`wrap`) or answers
    every request itself (`answer`: nothing after it is built or run). `view` is what `/config`
    shows of the policy for it; it has no default, so a new stage decides what it shows."""

    name: str
    does: str
    # `applies` in words, for the docs: the configuration that turns the stage on.
    when: str
    applies: Callable[[CompiledRoute], bool]
    view: Callable[[CompiledPolicy], dict[str, object]] | None
    wrap: Callable[[RouteContext, ASGIApp], ASGIApp] | None = None
    answer: Callable[[RouteContext], ASGIApp] | None = None

    def __post_init__(self) -> None:
        if (self.wrap is None) == (self.answer is None):
            raise TypeError(f"stage {self.name}: give exactly one of wrap and answer")


def _has(test: Callable[[CompiledPolicy], object]) -> Callable[[CompiledRoute], bool]:
    """`applies` for a policy stage: the route has a policy and `test` holds for it."""
    return lambda route: route.policy is not None and bool(test(route.policy))


# In the request's order: the first stage sees the request first.
PIPELINE: tuple[Stage, ...] = (
    Stage(
        "broker-pages",
        "Broker mode: the sign-in and consent pages (outside CORS, never readable cross-origin)",
        "spec.traffic.jwtAuthentication.mcp.authorizationServerMode is Broker",
        is_broker,
        None,
        wrap=build.broker_pages,
    ),
    Stage(
        "connect-pages",
        "userOAuth: the pages that connect a user's account at a backend's own authorization "
        "server, and list and disconnect them (outside CORS)",
        "spec.backend.credentials (or a target's) is userOAuth",
        lambda route: failure_of(route) is None and uses_user_oauth(route),
        None,
        wrap=build.connect_pages,
    ),
    Stage(
        "cors",
        "answers preflights and adds CORS headers (the route's CORS filter)",
        "the HTTPRoute rule has a CORS filter",
        lambda route: route.cors is not None,
        None,
        wrap=build.cors,
    ),
    Stage(
        "fail-closed",
        "a route without a backend or with an invalid policy answers 503 to every request",
        "the rule has no backend, or its GatewayPolicy is not valid",
        lambda route: failure_of(route) is not None,
        None,
        answer=build.fail_closed,
    ),
    Stage(
        "owned-headers",
        "drops client-sent copies of the headers the gateway sets or removes for the backend",
        "the policy sets or removes request headers for the backend",
        lambda route: any(set_headers(route.policy)),
        None,
        wrap=build.owned_headers,
    ),
    Stage(
        "oauth-endpoints",
        "the MCP OAuth documents, the registration shim and, in Broker mode, the OAuth server",
        "spec.traffic.jwtAuthentication.mcp is set",
        _has(lambda p: p.provider is not None and p.mcp is not None),
        views.mcp,
        wrap=build.oauth_endpoints,
    ),
    Stage(
        "jwt-authentication",
        "verifies the bearer JWT with the keys of the provider its issuer names, and a "
        "DPoP-bound token's proof on every request (401)",
        "the route has a GatewayPolicy (jwtAuthentication is required)",
        _has(lambda p: p.provider is not None),
        views.providers,
        wrap=build.jwt_authentication,
    ),
    Stage(
        "required-scopes",
        "a token short of a route-wide scope is asked to step up (403 insufficient_scope)",
        "spec.traffic.scopes.required is not empty",
        _has(lambda p: p.scopes is not None and p.scopes.required),
        views.scopes,
        wrap=build.required_scopes,
    ),
    Stage(
        "cel-authorization",
        "the policy's CEL rules over the request and the verified claims (403)",
        "spec.traffic.authorization is set",
        _has(lambda p: p.authorization is not None),
        views.authorization,
        wrap=build.cel_authorization,
    ),
    Stage(
        "rate-limit",
        "a token bucket per CEL key, in process or shared through Redis (429)",
        "spec.traffic.rateLimit is set",
        _has(lambda p: p.rate_limit is not None),
        views.rate_limit,
        wrap=build.rate_limit,
    ),
    Stage(
        "header-transformation",
        "sets request headers from CEL expressions and removes others",
        "spec.traffic.transformation is set",
        _has(lambda p: p.transformation is not None),
        views.transformation,
        wrap=build.header_transformation,
    ),
    Stage(
        "mcp-authorization",
        "tool-level rules and item scopes on MCP messages; filters list results",
        "spec.backend.mcp.authorization or spec.backend.mcp.scopes is set",
        _has(lambda p: p.mcp_authorization is not None or (p.scopes and p.scopes.items)),
        views.mcp_authorization,
        wrap=build.mcp_authorization,
    ),
    Stage(
        "backend-credentials",
        "what the backend gets instead of the client's token: exchanged, passed on or a secret",
        "spec.backend.credentials is set",
        _has(lambda p: p.has_credentials),
        views.credentials,
        wrap=build.backend_credentials,
    ),
    Stage(
        "federation",
        "serves the backend's MCP servers as one: one session, merged lists, calls routed by name",
        "the GatewayBackend has several targets",
        lambda route: route.federated,
        None,
        answer=build.federation,
    ),
    Stage(
        "reverse-proxy",
        "streams the request to the backend and its answer back",
        "always, unless a stage before it answered",
        lambda route: True,
        None,
        answer=build.reverse_proxy,
    ),
)


def stages_for(route: CompiledRoute) -> tuple[Stage, ...]:
    """The stages a route runs, in the request's order, up to the first that answers."""
    out: list[Stage] = []
    for stage in PIPELINE:
        if stage.applies(route):
            out.append(stage)
            if stage.answer is not None:
                break
    return tuple(out)


def assemble(ctx: RouteContext) -> ASGIApp:
    """The route's app: its stages built innermost first, each wrapping the next."""
    stages = stages_for(ctx.route)
    last = stages[-1]
    assert last.answer is not None, "the pipeline ends with a stage that answers"
    # Reaching the answering stage is the audit trail's `allow` (or its refusal, fail-closed).
    app: ASGIApp = Answering(last.name, last.answer(ctx))
    for stage in reversed(stages[:-1]):
        assert stage.wrap is not None
        app = stage.wrap(ctx, app)
    return app
