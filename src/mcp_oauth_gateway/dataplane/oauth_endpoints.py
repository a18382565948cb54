"""The MCP OAuth endpoints the gateway answers itself, never proxied: protected resource metadata
(RFC 9728), authorization server metadata (RFC 8414, built from the provider's discovery
document) and the client-registration shim (RFC 7591)."""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping

import aiohttp
import orjson

from .. import audit
from ..asgi import (
    TOO_LARGE,
    ASGIApp,
    BodyTooLarge,
    Headers,
    Receive,
    Scope,
    Send,
    read_body,
    request_origin,
    send_error,
    send_json,
)
from ..controlplane.discovery import DiscoveryCache
from ..controlplane.fetch import FetchError
from ..controlplane.snapshot import ASM_PREFIX, PRM_PREFIX, CompiledMcp, CompiledProvider
from ..provider_kinds import profile
from ..providers import ProviderAdapter, RegistrationError
from ..registration import MAX_REGISTRATION_BODY, REGISTRATION_LIMIT, parse_registration
from .dpop_binding import resource_metadata

log = logging.getLogger("mcp_oauth_gateway.oauth")

MCP_PROTOCOL_VERSION = "2025-06-18"
STAGE = "oauth-endpoints"


async def refuse(
    scope: Scope, send: Send, status: int, error: str, why: str, headers: Headers | None = None
) -> None:
    """An OAuth endpoint's error answer, recorded as this stage's refusal."""
    audit.deny(scope, STAGE, f"{error}: {why}")
    await send_error(send, status, error, why, headers)


def endpoint_path(scope: Scope) -> str:
    """The request path as endpoints are looked up (trailing slashes ignored): one function, so
    every stage that picks endpoints by path agrees on which endpoint a request is for."""
    return scope["path"].rstrip("/") or "/"


class PathDispatch:
    """Serves some exact paths with their own handlers; everything else goes on to `app`."""

    def __init__(self, handlers: dict[str, ASGIApp], app: ASGIApp):
        self.handlers = handlers
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        handler = self.handlers.get(endpoint_path(scope))
        if handler is None:
            await self.app(scope, receive, send)
        else:
            await handler(scope, receive, send)


def protected_resource_metadata(
    mcp: CompiledMcp,
    origin: str,
    issuers: tuple[str, ...],
    dpop: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The RFC 9728 document: the gateway is the AS when a provider is set (Facade, Broker),
    else every provider's issuer, in the policy's order; with the DPoP members (`dpop`)."""
    document: dict[str, object] = {
        "resource": mcp.resource or origin + mcp.mcp_path,
        "authorization_servers": [origin + mcp.mcp_path] if mcp.provider else list(issuers),
        "mcp_protocol_version": MCP_PROTOCOL_VERSION,
        "resource_type": "mcp-server",
        "bearer_methods_supported": list(mcp.bearer_methods_supported),
        "scopes_supported": list(mcp.scopes_supported),
        **(dpop or {}),
    }
    document.update(mcp.extra_metadata)
    return document


# What answers one endpoint path: a function of the class, given the stage, or one made by
# `_answered_by` for another app (the Broker's endpoints).
Handler = Callable[["OAuthEndpoints", Scope, Receive, Send], Awaitable[None]]


def _answered_by(app: ASGIApp) -> Handler:
    """A handler that hands the request to `app`."""

    async def handle(_: OAuthEndpoints, scope: Scope, receive: Receive, send: Send) -> None:
        await app(scope, receive, send)

    return handle


class OAuthEndpoints:
    """Answers the three MCP OAuth paths of the policy; everything else goes on down the line.

    Its handlers are the class's functions, never methods bound to the stage: a table of bound
    methods that the stage holds is a reference cycle, and a cycle keeps the route's whole
    pipeline (keys, CEL programs, caches, the next stages) alive after a reload replaced it,
    until a full collection, which `serve`'s collector settings make rare."""

    def __init__(
        self,
        app: ASGIApp,
        mcp: CompiledMcp,
        providers: tuple[CompiledProvider, ...],
        adapter: ProviderAdapter | None,
        discovery: DiscoveryCache | None,
        session: Callable[[], aiohttp.ClientSession | None],
        extra: dict[str, ASGIApp] | None = None,
        shared_with: tuple[str, ...] = (),
    ):
        self.app = app
        self.mcp = mcp
        self.issuers = tuple(p.issuer for p in providers)
        self.dpop = resource_metadata([p.dpop for p in providers])
        self.adapter = adapter
        # A provider that registers clients itself: its endpoint is in its discovery document.
        self.forwards_registration = (
            adapter is not None and profile(adapter.kind).forwards_registration
        )
        self.discovery = discovery
        self.session = session
        self.shared_with = shared_with
        self.paths: dict[str, Handler] = {
            mcp.prm_path: OAuthEndpoints._prm,
            mcp.asm_path: OAuthEndpoints._asm,
            mcp.registration_path: OAuthEndpoints._register,
        }
        if extra:
            # Broker mode: the gateway's own AS metadata, registration and token endpoints.
            self.paths.update({path: _answered_by(app) for path, app in extra.items()})
        # The root forms (RFC 9728 §3.1 without a path; 2025-03-26 clients look for the
        # authorization server at the origin): only while this is the host's one resource.
        root = self.paths[mcp.asm_path], OAuthEndpoints._prm
        if shared_with:
            root = OAuthEndpoints._ambiguous_root, OAuthEndpoints._ambiguous_root
        self.paths[ASM_PREFIX], self.paths[PRM_PREFIX] = root

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        path = endpoint_path(scope)
        handler = self.paths.get(path)
        if handler is None:
            await self.app(scope, receive, send)
            return
        audit.allow(scope, STAGE, f"OAuth endpoint {path} answered")
        await handler(self, scope, receive, send)

    @staticmethod
    async def _method_not_allowed(scope: Scope, send: Send, allowed: str, method: str) -> None:
        await refuse(
            scope,
            send,
            405,
            "invalid_request",
            f"{method} is not allowed here; use {allowed}",
            [(b"allow", allowed.encode())],
        )

    async def _ambiguous_root(self, scope: Scope, receive: Receive, send: Send) -> None:
        others = ", ".join(self.shared_with)
        await refuse(
            scope,
            send,
            404,
            "not_found",
            f"{scope['path']} would be ambiguous: this host serves more than one protected "
            f"resource ({self.mcp.mcp_path}, {others}); ask for "
            f"{scope['path']}{self.mcp.mcp_path} instead",
        )

    async def _prm(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            await self._method_not_allowed(scope, send, "GET", scope["method"])
            return
        origin = request_origin(scope)
        document = protected_resource_metadata(self.mcp, origin, self.issuers, self.dpop)
        await send_json(send, 200, document)

    async def _asm(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in ("GET", "HEAD"):
            await self._method_not_allowed(scope, send, "GET", scope["method"])
            return
        if self.adapter is None or self.discovery is None:
            await refuse(
                scope,
                send,
                404,
                "not_found",
                "this gateway does not front an authorization server for this "
                "route (mcp.provider is not set); use the issuer named in the "
                "protected resource metadata",
            )
            return
        try:
            discovery = await self.discovery.get()
        except FetchError as exc:
            await refuse(
                scope,
                send,
                502,
                "temporarily_unavailable",
                f"the provider's discovery document could not be fetched: {exc}",
            )
            return
        origin = request_origin(scope)
        document = self.adapter.authorization_server_metadata(
            discovery, origin + self.mcp.registration_path
        )
        await send_json(send, 200, document)

    async def _register(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] != "POST":
            await self._method_not_allowed(scope, send, "POST", scope["method"])
            return
        if self.adapter is None:
            await refuse(
                scope,
                send,
                404,
                "not_found",
                "client registration is not offered here (mcp.provider is not set)",
            )
            return
        try:
            raw = await read_body(receive, MAX_REGISTRATION_BODY, REGISTRATION_LIMIT)
        except BodyTooLarge as exc:
            await refuse(scope, send, 413, TOO_LARGE, str(exc))
            return
        if raw is None:
            return  # the client went away
        try:
            metadata = parse_registration(raw)
            discovery = None
            if self.discovery is not None and self.forwards_registration:
                discovery = await self.discovery.get()
            result = await self.adapter.register(metadata, raw, discovery, self.session())
        except RegistrationError as exc:
            await refuse(scope, send, exc.status, exc.error, exc.description)
            return
        except FetchError as exc:
            await refuse(
                scope,
                send,
                502,
                "server_error",
                f"the provider's discovery document could not be fetched: {exc}",
            )
            return
        if result.status < 400:
            audit.event(scope, "client-registered", *registered(metadata, result.body))
        else:
            audit.deny(
                scope, STAGE, f"the provider refused the registration (HTTP {result.status})"
            )
        await send(
            {
                "type": "http.response.start",
                "status": result.status,
                "headers": [
                    (b"content-type", result.content_type),
                    (b"content-length", str(len(result.body)).encode()),
                    (b"cache-control", b"no-store"),
                ],
            }
        )
        await send({"type": "http.response.body", "body": result.body})


def registered(metadata: dict[str, object], answer: bytes) -> tuple[str | None, str]:
    """The client id a registration answer gives (None: not JSON with one), and the client's
    name and redirect URIs as the request asked for them, for the audit line."""
    try:
        document = orjson.loads(answer)
    except orjson.JSONDecodeError:
        document = None
    given = document.get("client_id") if isinstance(document, dict) else None
    name = metadata.get("client_name")
    name = name if isinstance(name, str) else "(no client_name)"
    uris = metadata.get("redirect_uris")
    shown = ", ".join(str(u) for u in uris) if isinstance(uris, list) else ""
    return (
        given if isinstance(given, str) else None,
        f"registered client {name[:100]!r} with redirect URIs {shown[:500]}",
    )
