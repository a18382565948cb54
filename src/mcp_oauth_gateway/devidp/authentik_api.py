"""authentik's API v3 subset (`/api/v3/…`): the bootstrap token checked (403 as DRF answers it),
the start-up phases' objects brought up to date, then the view for the method and path; a view's
field errors become DRF's 400."""

from __future__ import annotations

import hmac
import re
from collections.abc import Callable

from starlette.requests import Request
from starlette.responses import Response

from .authentik_applications import ApplicationsApi
from .authentik_core import CoreApi
from .authentik_drf import FieldErrors, Handler
from .authentik_flows import FlowsApi
from .authentik_providers import ProvidersApi
from .authentik_state import AuthentikState
from .oidc import json_response


class AuthentikApi:
    """Dispatches `/api/v3/…` to the views of each kind of object."""

    def __init__(self, state: AuthentikState, reconcile: Callable[[], None]):
        self.state = state
        self.reconcile = reconcile  # the start-up phases' objects, created when due
        self._routes = self._table(
            FlowsApi(state), ProvidersApi(state), ApplicationsApi(state), CoreApi(state)
        )

    @staticmethod
    def _table(
        flows: FlowsApi, providers: ProvidersApi, applications: ApplicationsApi, core: CoreApi
    ) -> list[tuple[str, re.Pattern[str], Handler]]:
        one = "([^/]+)"
        table: list[tuple[str, str, Handler]] = [
            ("GET", "/flows/instances/", flows.list_flows),
            ("GET", "/crypto/certificatekeypairs/", flows.list_keypairs),
            ("GET", "/propertymappings/provider/scope/", flows.list_mappings),
            ("GET", "/providers/oauth2/", providers.list_providers),
            ("POST", "/providers/oauth2/", providers.create_provider),
            ("GET", "/providers/oauth2/{}/", providers.get_provider),
            ("PATCH", "/providers/oauth2/{}/", providers.patch_provider),
            ("GET", "/core/applications/", applications.list_applications),
            ("POST", "/core/applications/", applications.create_application),
            ("GET", "/core/applications/{}/", applications.get_application),
            ("GET", "/core/groups/", core.list_groups),
            ("POST", "/core/groups/", core.create_group),
            ("GET", "/core/groups/{}/", core.get_group),
            ("POST", "/core/groups/{}/add_user/", core.add_user),
            ("GET", "/core/users/", core.list_users),
        ]
        return [(m, re.compile(re.escape(p).replace(re.escape("{}"), one)), h) for m, p, h in table]

    def _denied(self, request: Request) -> Response | None:
        auth = request.headers.get("authorization", "")
        if not auth.lower().startswith("bearer ") or not auth[7:].strip():
            return json_response({"detail": "Authentication credentials were not provided."}, 403)
        if not hmac.compare_digest(
            auth[7:].strip().encode(), self.state.settings.bootstrap_token.encode()
        ):
            return json_response({"detail": "Token invalid/expired"}, 403)
        return None

    async def api(self, request: Request) -> Response:
        """Dispatch `/api/v3/…` (DRF conventions)."""
        denied = self._denied(request)
        if denied is not None:
            return denied
        self.reconcile()
        path = "/" + request.path_params["rest"].strip("/") + "/"
        for method, pattern, handler in self._routes:
            match = pattern.fullmatch(path)
            if match and method == request.method:
                try:
                    return await handler(request, *match.groups())
                except FieldErrors as exc:
                    return json_response(exc.errors, 400)
        return json_response({"detail": "Not found."}, 404)
