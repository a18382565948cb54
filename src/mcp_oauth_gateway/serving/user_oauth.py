"""A route's user-OAuth parts, built from its compiled policy: which of its backends (or
targets) take each user's own upstream token, under which grant key, and the connect pages
that sign users in at the route's provider to get those tokens."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ..asgi import ASGIApp
from ..controlplane.fetch import FetchError
from ..controlplane.snapshot import CompiledPolicy
from ..dataplane.authn import JwtAuthentication
from ..dataplane.tokens import TokenError
from ..useroauth.browser import PageError
from ..useroauth.connect_pages import ConnectPages
from ..useroauth.runtime import UserOAuthRuntime
from ..useroauth.signin import Metadata, NotVerified, SignIn
from ..useroauth.stage import UserOAuthStage
from .route_context import RouteContext
from .user_oauth_targets import upstreams_of, uses_user_oauth

__all__ = [
    "connect_pages",
    "runtime_of",
    "upstreams_of",
    "user_oauth_gates",
    "user_oauth_stage",
    "uses_user_oauth",
]


def runtime_of(ctx: RouteContext) -> UserOAuthRuntime:
    """The process's runtime (a userOAuth policy compiles only when the gateway has a key)."""
    control = ctx.shared.control
    runtime = ctx.shared.process_state.user_oauth(lambda: control.session)
    assert runtime is not None, "userOAuth policies are refused without --user-token-key"
    return runtime


def user_oauth_stage(ctx: RouteContext, app: ASGIApp) -> ASGIApp:
    """The backend-credentials stage of a single-target userOAuth route."""
    route = ctx.route
    assert route.policy is not None
    assert route.policy.mcp is not None
    ((key, upstream),) = upstreams_of(route).items()
    return UserOAuthStage(
        app,
        upstream,
        key,
        runtime_of(ctx),
        route.policy.mcp.mcp_path,
        ctx.shared.limits.max_body_bytes,
    )


def user_oauth_gates(ctx: RouteContext, app: ASGIApp) -> ASGIApp:
    """A federated route's userOAuth targets, each asking the caller to connect it first (the
    first one not connected asks; none inject: the federation gives each target its token)."""
    route = ctx.route
    users = upstreams_of(route)
    if not users:
        return app
    assert route.policy is not None
    assert route.policy.mcp is not None
    runtime = runtime_of(ctx)
    siblings = frozenset(users)
    for key, upstream in reversed(users.items()):
        app = UserOAuthStage(
            app,
            upstream,
            key,
            runtime,
            route.policy.mcp.mcp_path,
            ctx.shared.limits.max_body_bytes,
            inject=False,
            siblings=siblings,
        )
    return app


def _sign_in(ctx: RouteContext, policy: CompiledPolicy) -> SignIn:
    control = ctx.shared.control
    keysets = control.keysets
    verifier = JwtAuthentication(
        _unused,
        [(p, keysets[p.keyset.url]) for p in policy.providers],
        policy.mcp,
        False,
        cache_entries=64,
    )

    async def verify(token: str) -> Mapping[str, object]:
        try:
            return await verifier.verify(token)
        except TokenError as exc:
            raise NotVerified(
                f"the identity provider's token is not one this route accepts: {exc}"
            ) from None

    providers: dict[str, Metadata] = {}
    for provider in policy.providers:
        discovery = control.discoveries.get(provider.discovery_url)

        async def metadata(d: Any = discovery) -> Mapping[str, Any]:
            try:
                found: Mapping[str, Any] = await d.get()
            except FetchError as exc:
                why = f"the identity provider's metadata is unavailable: {exc}"
                raise PageError(502, "Identity provider unavailable", why) from None
            return found

        providers[provider.issuer] = metadata
    assert policy.mcp is not None
    assert policy.mcp.client_id is not None
    return SignIn(policy.mcp.client_id, providers, policy.providers[0].issuer, verify)


async def _unused(scope: object, receive: object, send: object) -> None:
    raise AssertionError("the connect pages' verifier only verifies")


def connect_pages(ctx: RouteContext) -> dict[str, ASGIApp]:
    """The route's connect and connections pages, by exact path."""
    policy = ctx.policy
    assert policy is not None
    assert policy.mcp is not None
    runtime = runtime_of(ctx)
    upstreams = upstreams_of(ctx.route)
    for upstream in upstreams.values():
        runtime.servers.prefetch(upstream.oauth, upstream.url)
    pages = ConnectPages(runtime, _sign_in(ctx, policy), upstreams, policy.mcp.mcp_path)
    return pages.routes()
