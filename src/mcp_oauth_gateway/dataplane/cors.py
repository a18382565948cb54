"""CORS route filter: preflights answered before authentication, headers on every response."""

from __future__ import annotations

from dataclasses import replace

from .. import audit
from ..asgi import ASGIApp, Headers, Message, Receive, Scope, Send, header, send_error
from ..controlplane.snapshot import CompiledCors

STAGE = "cors"
# What a browser's DPoP client sends (the proof) and must read (the challenge naming the
# algorithms and the error, the next nonce) on a route that takes DPoP tokens.
DPOP_REQUEST_HEADERS = ("DPoP",)
DPOP_RESPONSE_HEADERS = ("WWW-Authenticate", "DPoP-Nonce")


def _joined(listed: str, more: tuple[str, ...]) -> str:
    """`listed` (comma separated) with the names of `more` it lacks (case-insensitively)."""
    names = [name.strip() for name in listed.split(",") if name.strip()]
    have = {name.lower() for name in names}
    return ", ".join(names + [name for name in more if name.lower() not in have])


def with_dpop(cors: CompiledCors) -> CompiledCors:
    """The route's CORS settings letting browsers send a DPoP proof and read the DPoP
    challenge and nonces (`*` already allows every request header)."""
    return replace(
        cors,
        allow_headers=cors.allow_headers
        if cors.allow_all_headers
        else _joined(cors.allow_headers, DPOP_REQUEST_HEADERS),
        expose_headers=_joined(cors.expose_headers, DPOP_RESPONSE_HEADERS),
    )


def origin_allowed(cors: CompiledCors, origin: str) -> bool:
    """Whether `origin` may read responses of this route."""
    return cors.allow_all_origins or origin.rstrip("/") in cors.allow_origins


def allow_origin_value(cors: CompiledCors, origin: bytes) -> bytes:
    """`*` only when credentials are off; with credentials browsers require the exact origin."""
    if cors.allow_all_origins and not cors.allow_credentials:
        return b"*"
    return origin


class CorsFilter:
    """A pipeline stage wrapping the rest of the route's pipeline."""

    def __init__(self, app: ASGIApp, cors: CompiledCors):
        self.app = app
        self.cors = cors
        self.allow_all_methods = cors.allow_methods.strip() == "*"
        common: Headers = []
        if cors.allow_credentials:
            common.append((b"access-control-allow-credentials", b"true"))
        self.simple_headers: Headers = list(common)
        if cors.expose_headers:
            self.simple_headers.append(
                (b"access-control-expose-headers", cors.expose_headers.encode())
            )
        self.preflight_headers: Headers = [
            *common,
            (b"access-control-max-age", cors.max_age.encode()),
        ]
        # The origin decides the response, so caches must key on it.
        self.vary = (b"vary", b"Origin")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        origin = header(scope, b"origin")
        if origin is None:
            await self.app(scope, receive, send)
            return
        origin_text = origin.decode("latin-1")
        allowed = origin_allowed(self.cors, origin_text)
        requested_method = header(scope, b"access-control-request-method")
        if scope["method"] == "OPTIONS" and requested_method is not None:
            await self._preflight(
                scope,
                send,
                origin,
                allowed,
                requested_method,
                header(scope, b"access-control-request-headers"),
            )
            return
        extra = (
            [
                (b"access-control-allow-origin", allow_origin_value(self.cors, origin)),
                *self.simple_headers,
                self.vary,
            ]
            if allowed
            else [self.vary]
        )

        async def send_with_cors(message: Message) -> None:
            if message["type"] == "http.response.start":
                # The backend's own Access-Control-* headers never get this far: the proxy
                # drops them on routes with a CORS filter (proxy.reverse_proxy.CORS_RESPONSE).
                message["headers"] = [*message.get("headers", ()), *extra]
            await send(message)

        await self.app(scope, receive, send_with_cors)

    async def _preflight(
        self,
        scope: Scope,
        send: Send,
        origin: bytes,
        allowed: bool,
        method: bytes,
        requested_headers: bytes | None,
    ) -> None:
        if not allowed:
            audit.deny(
                scope,
                STAGE,
                f"CORS preflight from origin {origin.decode('latin-1')} "
                "refused: not in the route's allowOrigins",
            )
            await send_error(
                send,
                403,
                "cors_forbidden",
                f"origin {origin.decode('latin-1')} is not in the route's CORS allowOrigins",
                [self.vary],
            )
            return
        methods = method if self.allow_all_methods else self.cors.allow_methods.encode()
        if self.cors.allow_all_headers:
            allow_headers = requested_headers or b""
        else:
            allow_headers = self.cors.allow_headers.encode()
        headers: Headers = [
            (b"access-control-allow-origin", allow_origin_value(self.cors, origin)),
            (b"access-control-allow-methods", methods),
            *self.preflight_headers,
            self.vary,
            (b"content-length", b"0"),
        ]
        if allow_headers:
            headers.append((b"access-control-allow-headers", allow_headers))
        audit.allow(scope, STAGE, "CORS preflight answered")
        await send({"type": "http.response.start", "status": 204, "headers": headers})
        await send({"type": "http.response.body", "body": b""})
