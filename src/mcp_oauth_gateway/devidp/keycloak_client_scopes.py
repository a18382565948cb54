"""The client scopes of a Keycloak client, as the dev IdP keeps them: each client holds the ids of
its default and optional client scopes from its creation on (Keycloak copies the realm's
defaults into a new client; a client registered with a `scope` gets exactly those as optional
scopes and, of the realm's defaults, `basic` alone), and `GET`/`PUT
/admin/realms/master/clients/{id}/{default,optional}-client-scopes` read and extend them."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from ..oauth_scopes import scope_tokens
from .oidc import json_response
from .store import Record, Store

# The realm's built-in client scopes (Keycloak 26.7): name → (a realm default?, named in the
# token's `scope` claim? — the `include.in.token.scope` attribute).
BUILTIN_SCOPES = {
    "profile": (True, True),
    "email": (True, True),
    "roles": (True, False),
    "web-origins": (True, False),
    "acr": (True, False),
    "basic": (True, False),
    "offline_access": (False, True),
    "address": (False, True),
    "phone": (False, True),
    "microprofile-jwt": (False, True),
    "organization": (False, True),
}
# Kept by a client registered with a `scope`, although none of the other realm defaults are.
ALWAYS_DEFAULT = "basic"


def _not_found(message: str) -> Response:
    return json_response({"error": message}, 404)


class ClientScopes:
    """Which client scopes a client has and which of them a token request applies."""

    def __init__(self, store: Store):
        self.store = store

    def _scopes(self) -> list[Record]:
        return self.store.collection("kc_scopes")

    def realm_optional(self) -> list[str]:
        """The ids of the realm's optional client scopes."""
        return [
            s["id"] for s in self._scopes() if BUILTIN_SCOPES.get(s["name"], (True,))[0] is False
        ]

    def assign_at_creation(self, record: Record, requested: str | None = None) -> None:
        """Give a new client its scopes: the realm's defaults and optional ones, or, for a
        registration that names a `scope`, the named client scopes as optional ones."""
        if requested is None:
            record["defaultClientScopes"] = list(self.store.ids("kc_default_default"))
            record["optionalClientScopes"] = self.realm_optional()
            return
        names = scope_tokens(requested)
        record["defaultClientScopes"] = [
            s["id"] for s in self._scopes() if s["name"] == ALWAYS_DEFAULT
        ]
        record["optionalClientScopes"] = [s["id"] for s in self._scopes() if s["name"] in names]

    def default_ids(self, record: Record | None) -> list[str]:
        """A client's default scopes (a client kept from before they were recorded follows the
        realm's defaults)."""
        if record is not None and "defaultClientScopes" in record:
            ids: list[str] = record["defaultClientScopes"]
            return ids
        return list(self.store.ids("kc_default_default"))

    def optional_ids(self, record: Record | None) -> list[str]:
        """A client's optional scopes."""
        if record is not None and "defaultClientScopes" in record:
            ids: list[str] = record.get("optionalClientScopes", [])
            return ids
        return [*self.realm_optional(), *(record or {}).get("optionalClientScopes", [])]

    def applied(self, record: Record | None, requested: list[str]) -> list[Record]:
        """The client's default scopes, plus the requested ones that are optional scopes of
        the client: Keycloak ignores a requested scope the client does not have."""
        defaults = set(self.default_ids(record))
        optional = set(self.optional_ids(record))
        return [
            s
            for s in self._scopes()
            if s["id"] in defaults or (s["name"] in requested and s["id"] in optional)
        ]

    def names(self, ids: list[str]) -> list[str]:
        """The names of the scopes with these ids, in the realm's order."""
        return [s["name"] for s in self._scopes() if s["id"] in ids]

    def _listing(self, ids: list[str]) -> Response:
        return json_response(
            [{"id": s["id"], "name": s["name"]} for s in self._scopes() if s["id"] in ids]
        )

    def _client(self, client_uuid: str) -> Record | None:
        clients = self.store.collection("kc_clients")
        return next((c for c in clients if c["id"] == client_uuid), None)

    async def list_default(self, request: Request, parts: list[str]) -> Response:
        record = self._client(parts[0])
        return (
            self._listing(self.default_ids(record))
            if record
            else _not_found("Could not find client")
        )

    async def list_optional(self, request: Request, parts: list[str]) -> Response:
        record = self._client(parts[0])
        return (
            self._listing(self.optional_ids(record))
            if record
            else _not_found("Could not find client")
        )

    async def add_default(self, request: Request, parts: list[str]) -> Response:
        return self._add(parts, "defaultClientScopes")

    async def add_optional(self, request: Request, parts: list[str]) -> Response:
        return self._add(parts, "optionalClientScopes")

    def _add(self, parts: list[str], field: str) -> Response:
        record = self._client(parts[0])
        scope = next((s for s in self._scopes() if s["id"] == parts[1]), None)
        if record is None:
            return _not_found("Could not find client")
        if scope is None:
            return _not_found("Client scope not found")
        if "defaultClientScopes" not in record:
            record["optionalClientScopes"] = self.optional_ids(record)
            record["defaultClientScopes"] = self.default_ids(record)
        if scope["id"] not in record[field]:
            record[field].append(scope["id"])
            self.store.save()
        return Response(status_code=204)
