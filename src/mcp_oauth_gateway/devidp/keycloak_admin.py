"""The admin REST API subset the provisioning tool uses (`/admin/realms/master/…`): the realm
named, the bearer token checked (401 `HTTP 401 Unauthorized` for a token that is not a live one
of the realm, expired 60 s admin tokens included; 403 for a user who is not the admin), then the
handler for the method and path."""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

from joserfc.jwk import RSAKey
from starlette.requests import Request
from starlette.responses import Response

from .keycloak_admin_clients import ClientsAdmin
from .keycloak_admin_http import not_found
from .keycloak_admin_scopes import ScopesAdmin
from .keycloak_admin_users import UsersAdmin
from .keycloak_client_scopes import ClientScopes
from .keycloak_paths import REALM
from .keycloak_realm import Realm
from .keycloak_registration import Registration
from .keycloak_users import Users
from .oidc import OpenIdProvider, json_response
from .store import Store

AdminHandler = Callable[[Request, list[str]], Awaitable[Response]]


def _table(
    realm: Realm,
    scopes: ScopesAdmin,
    users: UsersAdmin,
    clients: ClientsAdmin,
    client_scopes: ClientScopes,
    registration: Registration,
) -> list[tuple[str, str, AdminHandler]]:
    """(method, path under /admin/realms/master, handler) of the admin API subset."""
    return [
        ("GET", "", realm.get),
        ("PUT", "", realm.put),
        ("POST", "logout-all", realm.logout_all),
        ("GET", "client-scopes", scopes.list_scopes),
        ("POST", "client-scopes", scopes.create_scope),
        ("GET", "client-scopes/{id}", scopes.get_scope),
        ("GET", "client-scopes/{id}/protocol-mappers/models", scopes.list_mappers),
        ("POST", "client-scopes/{id}/protocol-mappers/models", scopes.add_mapper),
        ("GET", "default-default-client-scopes", scopes.list_default_default),
        ("PUT", "default-default-client-scopes/{id}", scopes.add_default_default),
        ("GET", "groups", users.list_groups),
        ("POST", "groups", users.create_group),
        ("GET", "users", users.list_users),
        ("POST", "users", users.create_user),
        ("GET", "users/{id}/groups", users.user_groups),
        ("PUT", "users/{id}/groups/{id}", users.join_group),
        ("POST", "users/{id}/logout", realm.logout_user),
        ("GET", "clients", clients.list_clients),
        ("POST", "clients", clients.create_client),
        ("PUT", "clients/{id}", clients.update_client),
        ("GET", "clients/{id}/default-client-scopes", client_scopes.list_default),
        ("PUT", "clients/{id}/default-client-scopes/{id}", client_scopes.add_default),
        ("GET", "clients/{id}/optional-client-scopes", client_scopes.list_optional),
        ("PUT", "clients/{id}/optional-client-scopes/{id}", client_scopes.add_optional),
        ("GET", "components", registration.list_components),
        ("POST", "components", registration.create_component),
        ("PUT", "components/{id}", registration.update_component),
        ("DELETE", "components/{id}", registration.delete_component),
    ]


class Admin:
    """`/admin/realms/{realm}/…`, for the realm's admin."""

    def __init__(
        self,
        store: Store,
        provider: OpenIdProvider,
        realm: Realm,
        key: RSAKey,
        users: Users,
        client_scopes: ClientScopes,
        registration: Registration,
    ):
        self.provider = provider
        self.realm = realm
        self.key = key
        self.users = users
        table = _table(
            realm,
            ScopesAdmin(store),
            UsersAdmin(store, users),
            ClientsAdmin(store, client_scopes),
            client_scopes,
            registration,
        )
        one = "([^/]+)"
        self._routes = [
            (method, re.compile(pattern.replace("{id}", one)), handler)
            for method, pattern, handler in table
        ]

    def _denied(self, request: Request) -> Response | None:
        claims = self.provider.bearer_claims(request, self.key)
        if claims is None or self.realm.refused(claims):
            return json_response({"error": "HTTP 401 Unauthorized"}, 401)
        user = self.users.find(id=str(claims.get("sub", "")))
        if user is None or not user.get("admin"):
            return json_response({"error": "unknown_error"}, 403)
        return None

    async def admin(self, request: Request) -> Response:
        """Dispatch `/admin/realms/{realm}/…`."""
        realm = request.path_params["realm"]
        if realm != REALM:
            return not_found("Realm not found.")
        denied = self._denied(request)
        if denied is not None:
            return denied
        rest = request.path_params.get("rest", "").strip("/")
        for method, pattern, handler in self._routes:
            match = pattern.fullmatch(rest)
            if match and method == request.method:
                return await handler(request, list(match.groups()))
        return not_found("HTTP 404 Not Found")
