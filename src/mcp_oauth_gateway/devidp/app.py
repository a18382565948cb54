"""Build the dev identity provider's ASGI app for a flavour."""

from __future__ import annotations

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from ..provider_kinds import ProviderKind
from .authentik import AuthentikFlavour
from .authentik_startup import starting_response
from .keycloak import KeycloakFlavour
from .keycloak_cors import Preflight
from .settings import DevIdpSettings
from .store import Store

BANNER = (
    "mcp-oauth-gateway dev identity provider ({flavour} flavour) on {url}: "
    "FOR DEVELOPMENT AND TESTS ONLY, never for real users or data"
)


class _Startup:
    """authentik answers 503 (Retry-After) to everything but liveness while migrating."""

    def __init__(self, app: Starlette, flavour: AuthentikFlavour):
        self.app = app
        self.flavour = flavour

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] == "http"
            and self.flavour.migrating()
            and scope["path"] != "/-/health/live/"
        ):
            await starting_response(Request(scope, receive))(scope, receive, send)
            return
        await self.app(scope, receive, send)


def create_app(settings: DevIdpSettings) -> Preflight | _Startup:
    """The ASGI app of the requested flavour."""
    store = Store(settings.state)

    async def live(request: Request) -> Response:
        return Response(status_code=200)

    if settings.kind is ProviderKind.KEYCLOAK:
        flavour = KeycloakFlavour(store, settings)
        kc = Starlette(routes=[*flavour.routes(), Route("/health/live", live)])
        return Preflight(kc, flavour.preflight_methods())
    if settings.kind is ProviderKind.AUTHENTIK:
        ak = AuthentikFlavour(store, settings)
        app = Starlette(
            routes=[*ak.routes(), Route("/-/health/live/", live), Route("/-/health/ready/", live)]
        )
        return _Startup(app, ak)
    raise ValueError(f"the dev identity provider has no {settings.kind.flavour} flavour")
