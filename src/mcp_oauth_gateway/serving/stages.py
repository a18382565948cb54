"""A request's whole way through the gateway, declared once and read top to bottom: first the
gateway's own steps (`ENTRY`, built once per process from the serve options), then the matched
route's (`PIPELINE`, built per route from its configuration). Before the first, the HTTP server
holds the connection limits (`connections.py`); after the last, the backend answers.

Each stage says what it does, when it runs, and how it is built (`entry` for the gateway's,
`stage_builders` for a route's), and for a route's what `/config` shows of it (`stage_views`).
The entry point (`app.py`), the assembly (`pipeline.py`), `/config`, the audit trail's names
and reasons, and the docs' diagram and stage list all read these two lists, so a new stage is
its module, a builder, and one entry here."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

from ..asgi import ASGIApp
from ..audit import Answering
from ..controlplane.snapshot import CompiledPolicy, CompiledRoute
from . import entry
from . import stage_builders as build
from . import stage_views as views
from .entry import EntryContext
from .route_context import RouteContext, failure_of, is_broker, set_headers
from .user_oauth import uses_user_oauth

On = TypeVar("On")  # what `applies` decides on
Ctx = TypeVar("Ctx")  # what the stage is built from


@dataclass(frozen=True)
class Stage(Generic[On, Ctx]):
    """One step of the request's way. It either wraps what comes after it (`wrap`) or answers
    every request itself (`answer`: nothing after it is built or run). `view` is what `/config`
    shows of the policy for it; it has no default, so a new stage decides what it shows."""

    name: str
    does: str
    # `applies` in words, for the docs: the configuration that turns the stage on.
    when: str
    applies: Callable[[On], bool]
    view: Callable[[CompiledPolicy], dict[str, object]] | None
    wrap: Callable[[Ctx, ASGIApp], ASGIApp] | None = None
    answer: Callable[[Ctx], ASGIApp] | None = None
    # Named among the checks an allowed request passed (its audit line's reason); False for a
    # stage that answers requests of its own (pages, preflights) and passes others untouched.
    check: bool = True

    def __post_init__(self) -> None:
        if (self.wrap is None) == (self.answer is None):
            raise TypeError(f"stage {self.name}: give exactly one of wrap and answer")


# The gateway's own steps, in the request's order: every request meets those that are on.
ENTRY: tuple[Stage[EntryContext, EntryContext], ...] = (
    Stage(
        "access-line",
        "hands the request its exchange (what was answered); once it ends, one access-log line "
        "(a warning for a stream cut at shutdown) and the request metrics",
        "always (metrics with --admin-port)",
        lambda ctx: True,
        None,
        wrap=entry.AccessLine,
    ),
    Stage(
        "request-id",
        "the caller's X-Request-Id when well-formed (audited: only from a trusted proxy), else a "
        "new one; logged, forwarded to the backend and returned",
        "--log-format json or --audit-log",
        lambda ctx: ctx.request_ids,
        None,
        wrap=entry.request_id,
    ),
    Stage(
        "own-listeners",
        "the admin and health listeners' requests go to their own apps, behind the 500 "
        "handler: the steps below are the Gateway listeners' only",
        "--admin-port or --health-port",
        lambda ctx: bool(ctx.own),
        None,
        wrap=entry.own_listeners,
    ),
    Stage(
        "tracing",
        "one span per request, a child of the caller's traceparent; the backend gets it as parent",
        "--tracing otlp",
        lambda ctx: ctx.tracing is not None,
        None,
        wrap=entry.tracing,
    ),
    Stage(
        "server-error",
        "an error no stage handled answers 500 (audit stage `gateway`); an answer the drain or "
        "the end of the grace period cut is ended cleanly",
        "always",
        lambda ctx: True,
        None,
        wrap=entry.server_error,
    ),
    Stage(
        "audit",
        "begins the request's audit record, written as one line when the answer starts; 503 "
        "while the log cannot be written and --audit-required is set",
        "--audit-log",
        lambda ctx: ctx.audit is not None,
        None,
        wrap=entry.audit_trail,
    ),
    Stage(
        "entry-rules",
        "one meaning per request: repeated or aliased headers, header size, a NUL in the path "
        "(400, 431)",
        "always",
        lambda ctx: True,
        None,
        wrap=entry.EntryRules,
    ),
    Stage(
        "routing",
        "listener port, Host and path to the route rule through maps built at load (404 when "
        "none matches); that rule's stages, below, take the request",
        "always",
        lambda ctx: True,
        None,
        answer=entry.routing,
    ),
)


def _has(test: Callable[[CompiledPolicy], object]) -> Callable[[CompiledRoute], bool]:
    """`applies` for a policy stage: the route has a policy and `test` holds for it."""
    return lambda route: route.policy is not None and bool(test(route.policy))


# The route's stages, in the request's order: the first stage sees the request first.
PIPELINE: tuple[Stage[CompiledRoute, RouteContext], ...] = (
    Stage(
        "broker-pages",
        "Broker mode: the sign-in and consent pages (outside CORS, never readable cross-origin)",
        "spec.traffic.jwtAuthentication.mcp.authorizationServerMode is Broker",
        is_broker,
        None,
        wrap=build.broker_pages,
        check=False,
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
        check=False,
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
        check=False,
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


def _taken(stages: tuple[Stage[On, Ctx], ...], on: On) -> tuple[Stage[On, Ctx], ...]:
    """The stages that apply, in order, up to the first that answers."""
    out: list[Stage[On, Ctx]] = []
    for stage in stages:
        if stage.applies(on):
            out.append(stage)
            if stage.answer is not None:
                break
    return tuple(out)


def _fold(stages: tuple[Stage[Any, Ctx], ...], ctx: Ctx, last: ASGIApp) -> ASGIApp:
    """`stages` built innermost first, each wrapping the next, around `last`."""
    app = last
    for stage in reversed(stages):
        assert stage.wrap is not None
        app = stage.wrap(ctx, app)
    return app


def stages_for(route: CompiledRoute) -> tuple[Stage[CompiledRoute, RouteContext], ...]:
    """The stages a route runs, in the request's order, up to the first that answers."""
    return _taken(PIPELINE, route)


def entry_for(ctx: EntryContext) -> tuple[Stage[EntryContext, EntryContext], ...]:
    """The gateway's own steps this process runs, in the request's order."""
    return _taken(ENTRY, ctx)


def assemble(ctx: RouteContext) -> ASGIApp:
    """The route's app: its stages built innermost first, each wrapping the next."""
    stages = stages_for(ctx.route)
    last = stages[-1]
    assert last.answer is not None, "the pipeline ends with a stage that answers"
    # Reaching the answering stage is the audit trail's `allow` (or its refusal, fail-closed).
    return _fold(stages[:-1], ctx, Answering(last.name, last.answer(ctx)))


def assemble_entry(ctx: EntryContext) -> ASGIApp:
    """The gateway's app: its own steps, the last (routing) handing each request to its
    route's app."""
    stages = entry_for(ctx)
    last = stages[-1]
    assert last.answer is not None, "the entry ends with a stage that answers"
    app = _bound(last.answer(ctx))
    for stage in reversed(stages[:-1]):
        assert stage.wrap is not None
        app = _bound(stage.wrap(ctx, app))
    return app


def _bound(step: ASGIApp) -> ASGIApp:
    """The step's bound `__call__`, for the step before it to hold: every request takes this
    way, and a method is called without the tuple of arguments calling an instance costs."""
    call: ASGIApp = step.__call__  # type: ignore[operator]
    return call


def passed(route: CompiledRoute) -> tuple[str, str]:
    """The route's answering stage, and the reason of an `allow` that reached it: the checks
    it passed."""
    stages = stages_for(route)
    if route.policy is None:
        reason = "no GatewayPolicy protects this route"
    else:
        names = [s.name for s in stages[:-1] if s.check]
        reason = "passed " + (", ".join(names) if names else "no stage")
    return stages[-1].name, reason
