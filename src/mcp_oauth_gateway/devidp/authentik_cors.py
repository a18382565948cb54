"""CORS as authentik answers it (`authentik/providers/oauth2/utils.py::cors_allow` and the views
that call it): the token, userinfo and discovery endpoints allow an `Origin` whose scheme, host
and port match one of the provider's redirect URIs, echoing it with credentials (and
`Vary: Origin`); an `OPTIONS` request is allowed for every origin (it names no provider), with
the requested headers and `GET, POST, OPTIONS`; the key set sends `Access-Control-Allow-Origin:
*`. An origin that matches nothing gets no CORS headers, and the answer is otherwise unchanged.
"""

from __future__ import annotations

import base64
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote, urlsplit

from starlette.requests import Request
from starlette.responses import Response

from .oidc_http import read_form, token_response
from .store import Store

Handler = Callable[[Request], Awaitable[Response]]


def _same_origin(origin: str, url: str) -> bool:
    received, allowed = urlsplit(origin), urlsplit(url)
    try:
        return (received.scheme, received.hostname, received.port) == (
            allowed.scheme,
            allowed.hostname,
            allowed.port,
        )
    except ValueError:  # a regex redirect URI parsed as a URL may name no valid port
        return False


def cors_allow(request: Request, response: Response, allowed_origins: list[str]) -> Response:
    """authentik's `cors_allow`."""
    origin = request.headers.get("origin")
    if not origin:
        return response
    allowed = request.method == "OPTIONS" or any(_same_origin(origin, u) for u in allowed_origins)
    if not allowed:
        return response
    response.headers["Access-Control-Allow-Origin"] = origin
    response.headers["Vary"] = "Origin"
    response.headers["Access-Control-Allow-Credentials"] = "true"
    if request.method == "OPTIONS":
        if "access-control-request-headers" in request.headers:
            requested = request.headers["access-control-request-headers"]
            response.headers["Access-Control-Allow-Headers"] = requested
        response.headers["Access-Control-Allow-Methods"] = "GET, POST, OPTIONS"
    return response


def _client_id(request: Request, form: dict[str, str]) -> str:
    auth = request.headers.get("authorization", "")
    if auth.lower().startswith("basic "):
        try:
            return unquote(base64.b64decode(auth[6:]).decode().partition(":")[0])
        except (ValueError, UnicodeDecodeError):
            return ""
    return form.get("client_id", "")


class AuthentikCors:
    """Wraps the OAuth2 provider's views with authentik's CORS answers."""

    def __init__(self, store: Store, claims_of: Callable[[Request], dict[str, Any] | None]):
        self.store = store
        self.claims_of = claims_of  # the valid bearer token's claims, for userinfo

    def _provider(self, **match: Any) -> dict[str, Any] | None:
        providers = self.store.collection("ak_providers")
        return next((p for p in providers if all(p.get(k) == v for k, v in match.items())), None)

    def _origins(self, provider: dict[str, Any] | None) -> list[str]:
        return [str(r["url"]) for r in (provider or {}).get("redirect_uris", [])]

    def _of_slug(self, slug: str) -> list[str]:
        applications = self.store.collection("ak_applications")
        app = next((a for a in applications if a.get("slug") == slug), None)
        pk = (app or {}).get("provider")
        return self._origins(self._provider(pk=pk) if pk is not None else None)

    def token(self, handler: Handler) -> Handler:
        async def answer(request: Request) -> Response:
            if request.method == "OPTIONS":
                return cors_allow(request, token_response({}), [])
            client_id = _client_id(request, await read_form(request))
            origins = self._origins(self._provider(client_id=client_id)) if client_id else []
            return cors_allow(request, await handler(request), origins)

        return answer

    def userinfo(self, handler: Handler) -> Handler:
        async def answer(request: Request) -> Response:
            if request.method == "OPTIONS":
                return cors_allow(request, token_response({}), [])
            claims = self.claims_of(request) or {}
            client_id = str(claims.get("azp", ""))
            origins = self._origins(self._provider(client_id=client_id)) if client_id else []
            return cors_allow(request, await handler(request), origins)

        return answer

    def discovery(self, handler: Handler) -> Handler:
        async def answer(request: Request) -> Response:
            origins = self._of_slug(request.path_params["slug"])
            if request.method == "OPTIONS":
                return cors_allow(request, Response(headers={"Allow": "GET, OPTIONS"}), origins)
            return cors_allow(request, await handler(request), origins)

        return answer

    @staticmethod
    def jwks(handler: Handler) -> Handler:
        async def answer(request: Request) -> Response:
            response = await handler(request)
            response.headers["Access-Control-Allow-Origin"] = "*"
            return response

        return answer
