"""CORS as Keycloak 26.7 answers it (probed on the real server).

- A preflight (`OPTIONS` with `Origin`) to any realm endpoint is answered 200 for every origin,
  with the endpoint's methods, Keycloak's fixed list of allowed headers and a max age of an hour;
  without `Origin`, a bare 200.
- Discovery and the key set echo any `Origin`, with credentials.
- The token endpoint checks the `Origin` against the authenticated client's web origins: an
  origin outside them gets 403 `{"error":"Invalid origin"}` with no CORS headers, and the grant is
  not looked at; an allowed one gets the origin echoed with credentials and
  `Access-Control-Expose-Headers: Access-Control-Allow-Methods`. A failed client authentication
  echoes any origin; `unsupported_grant_type` carries no CORS headers at all.
- A client's web origins: its `webOrigins`, where `+` stands for its redirect URIs' origins and
  `*` for every origin (a registered client gets its redirect URIs' origins)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from urllib.parse import urlsplit

from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

from .oidc import OAuthError, OpenIdProvider, json_response, oauth_error, read_form
from .store import Record

ALLOW_HEADERS = (
    "Origin, Access-Control-Request-Method, X-Requested-With, Accept, "
    "Access-Control-Request-Headers, DPoP, Content-Type, Authorization"
)
_GRANTS = frozenset(
    {
        "authorization_code",
        "refresh_token",
        "client_credentials",
        "password",
        "urn:ietf:params:oauth:grant-type:token-exchange",
    }
)


def origin_of(uri: str) -> str | None:
    """`scheme://host[:port]` of an absolute URI."""
    parts = urlsplit(uri)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None


def web_origins(record: Record | None) -> list[str]:
    """A client's web origins, `+` resolved to its redirect URIs' origins."""
    origins: list[str] = []
    record = record or {}
    for value in record.get("webOrigins", []):
        found = [origin_of(u) for u in record["redirectUris"]] if value == "+" else [value]
        origins += [o for o in found if o and o not in origins]
    return origins


def origin_allowed(record: Record | None, origin: str) -> bool:
    """Whether a browser at `origin` may call the token endpoint for this client."""
    return "*" in (record or {}).get("webOrigins", []) or origin in web_origins(record)


def echo(response: Response, origin: str | None, *, expose: bool = False) -> Response:
    """Allow `origin` (with credentials) on an actual response."""
    if origin is not None:
        response.headers["Access-Control-Allow-Origin"] = origin
        response.headers["Access-Control-Allow-Credentials"] = "true"
        if expose:
            response.headers["Access-Control-Expose-Headers"] = "Access-Control-Allow-Methods"
    return response


class Preflight:
    """Answers `OPTIONS` on the realm's endpoints before routing, as Keycloak does."""

    def __init__(self, app: ASGIApp, methods: dict[str, str]):
        self.app = app
        self.methods = methods  # path → Access-Control-Allow-Methods

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        methods = self.methods.get(scope.get("path", ""))
        if scope["type"] != "http" or scope["method"] != "OPTIONS" or methods is None:
            await self.app(scope, receive, send)
            return
        origin = Request(scope).headers.get("origin")
        response = Response(status_code=200)
        if origin is not None:
            response.headers.update(
                {
                    "Access-Control-Allow-Origin": origin,
                    "Access-Control-Allow-Methods": methods,
                    "Access-Control-Allow-Credentials": "true",
                    "Access-Control-Allow-Headers": ALLOW_HEADERS,
                    "Access-Control-Max-Age": "3600",
                }
            )
        await response(scope, receive, send)


def any_origin(
    handler: Callable[[Request], Awaitable[Response]],
) -> Callable[[Request], Awaitable[Response]]:
    """A GET endpoint that echoes every origin (discovery, the key set)."""

    async def answer(request: Request) -> Response:
        return echo(await handler(request), request.headers.get("origin"))

    return answer


class TokenEndpointCors:
    """The token endpoint behind Keycloak's origin check."""

    def __init__(self, provider: OpenIdProvider, client_record: Callable[[str], Record | None]):
        self.provider = provider
        self.client_record = client_record

    async def token(self, request: Request) -> Response:
        origin = request.headers.get("origin")
        if origin is None:
            return await self.provider.token(request)
        form = await read_form(request)
        if form.get("grant_type") not in _GRANTS:
            return await self.provider.token(request)
        try:
            client = self.provider.client_from_request(request, form)
        except OAuthError as exc:
            return echo(oauth_error(exc), origin, expose=True)
        if not origin_allowed(self.client_record(client.client_id), origin):
            return json_response({"error": "Invalid origin"}, 403)
        return echo(await self.provider.token(request), origin, expose=True)
