"""Broker mode: the gateway is the authorization server MCP clients see.

Clients register with the gateway (DCR or CIMD), authorize at the gateway (exact redirect URI,
PKCE S256, a consent page per client because every client reaches the provider through one
static client id), and get the gateway's own one-time code with `iss` = the gateway issuer
(RFC 9207). The gateway signs the user in at the provider as `mcp.clientId` with its own PKCE and
state, and hands the provider's token response over (with its own refresh token), so `/mcp`
validates exactly the same JWTs as in facade mode.

Every route is an authorization server of its own, even where several share a host and a store:
its client ids, consent, codes, states and tokens are its own (`binding`).

This module is the table of paths to handlers, one module per endpoint (`*_endpoint`), all over
one `BrokerContext`, bound to the request's route before the handler sees it. Handlers answer or
raise `OAuthError`; `_guard` writes every error in one place.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable
from urllib.parse import urlencode

import aiohttp

from .. import audit
from ..asgi import ASGIApp, Receive, Scope, Send, send_error
from ..controlplane.snapshot import CompiledMcp
from ..dpop import MemoryReplayCache, ReplayCache
from ..redis_clients import RedisUnavailable
from ..urls import with_query
from . import pages
from .authorize_endpoint import authorize
from .bound_tokens import RouteTokens
from .callback_endpoint import callback
from .clients import MetadataDocuments
from .context import BrokerContext
from .errors import OAuthError
from .identity import SignInProvider
from .metadata_endpoint import jwks, metadata
from .register_endpoint import register
from .revoke_endpoint import revoke
from .store import BrokerStore
from .token_endpoint import token
from .workload_grant import WorkloadGrant
from .workload_keys import WorkloadKeys

log = logging.getLogger("mcp_oauth_gateway.broker")

Handler = Callable[[BrokerContext, Scope, Receive, Send], Awaitable[None]]


class Broker:
    """The broker's endpoints for one policy's route; stateless apart from `store`. `policy`:
    the policy's key (`namespace/name`), part of what binds records to the route."""

    def __init__(
        self,
        mcp: CompiledMcp,
        providers: tuple[SignInProvider, ...],
        store: BrokerStore,
        documents: MetadataDocuments,
        session: Callable[[], aiohttp.ClientSession | None],
        policy: str,
        workload: WorkloadGrant | None = None,
        replay: Callable[[], ReplayCache] = MemoryReplayCache,
    ):
        self.context = BrokerContext.create(
            mcp, providers, store, documents, session, policy, workload, replay
        )
        self.bound_tokens = RouteTokens(self.context)

    @property
    def workload_keys(self) -> WorkloadKeys | None:
        """The key of the tokens issued to workloads (None without workloadIdentity)."""
        workload = self.context.workload
        return workload.keys if workload is not None else None

    def routes(self) -> dict[str, ASGIApp]:
        """Path → handler for what MCP clients call (the route's CORS applies)."""
        ctx = self.context
        routes = {
            ctx.mcp.asm_path: _guard(ctx, metadata, page=False),
            ctx.mcp.registration_path: _guard(ctx, register, page=False),
            ctx.token_path: _guard(ctx, token, page=False),
            ctx.revoke_path: _guard(ctx, revoke, page=False),
        }
        if ctx.workload is not None:
            routes[ctx.jwks_path] = _guard(ctx, jwks, page=False)
        return routes

    def pages(self) -> dict[str, ASGIApp]:
        """Path → handler for the browser pages, which no CORS setting may expose to scripts
        of other sites."""
        ctx = self.context
        return {
            ctx.authorize_path: _guard(ctx, authorize, page=True),
            ctx.callback_path: _guard(ctx, callback, page=True),
        }


def store_unavailable(retry_after: int) -> OAuthError:
    """The answer while the Broker's Redis fails over."""
    return OAuthError(
        503,
        "temporarily_unavailable",
        "the gateway's shared store (Redis) is failing over; nothing was changed, try again "
        f"in {retry_after} s",
        headers=[(b"retry-after", str(retry_after).encode())],
    )


def _guard(unbound: BrokerContext, handler: Handler, page: bool) -> ASGIApp:
    # The pipeline stage that serves the handler, as the audit trail names it.
    stage = "broker-pages" if page else "oauth-endpoints"

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        audit.allow(scope, stage)
        ctx = unbound.at(scope)
        try:
            await handler(ctx, scope, receive, send)
        except OAuthError as exc:
            audit.deny(scope, stage, f"{exc.error}: {exc.description}")
            await _write_error(ctx, scope, send, exc, page)
        except RedisUnavailable as exc:
            # Nothing was done that a failover could lose: the client tries again shortly.
            log.warning("broker at %s: %s", scope["path"][:200], exc)
            audit.deny(scope, stage, "the shared store is unavailable (fail closed)")
            await _write_error(ctx, scope, send, store_unavailable(exc.retry_after), page)
        except Exception as exc:
            # An error of the gateway's own (its store, a provider's connection): no `allow`,
            # whatever answer it gets. The type only: a message may hold a URL's password.
            audit.deny(scope, stage, audit.failure(exc))
            raise

    return guarded


async def _write_error(
    ctx: BrokerContext, scope: Scope, send: Send, exc: OAuthError, page: bool
) -> None:
    if exc.redirect_href is not None:
        params = {
            "error": exc.error,
            "error_description": exc.description,
            "iss": ctx.issuer(scope),
        }
        if exc.state is not None:
            params["state"] = exc.state
        await pages.send_redirect(send, with_query(exc.redirect_href, urlencode(params)))
    elif page:
        await pages.send_error_page(
            scope, send, exc.status, exc.error, exc.description, exc.headers
        )
    else:
        await send_error(send, exc.status, exc.error, exc.description, exc.headers)
