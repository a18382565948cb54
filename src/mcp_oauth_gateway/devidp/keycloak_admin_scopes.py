"""The realm's client scopes in the admin REST API (`/admin/realms/master/client-scopes`, their
protocol mappers, `default-default-client-scopes`): list, read, create (201 + `Location`, 409 for
a name taken), answered as Keycloak 26 answers."""

from __future__ import annotations

from starlette.requests import Request
from starlette.responses import Response

from .keycloak_admin_http import created, error, not_found, read_body
from .oidc import json_response
from .store import Record, Store, new_id


class ScopesAdmin:
    """The admin API's client scopes and the realm's default client scopes."""

    def __init__(self, store: Store):
        self.store = store

    def _scope(self, scope_id: str) -> Record | None:
        return next((s for s in self.store.collection("kc_scopes") if s["id"] == scope_id), None)

    async def list_scopes(self, request: Request, parts: list[str]) -> Response:
        return json_response(self.store.collection("kc_scopes"))

    async def get_scope(self, request: Request, parts: list[str]) -> Response:
        scope = self._scope(parts[0])
        return json_response(scope) if scope else not_found("Could not find client scope")

    async def create_scope(self, request: Request, parts: list[str]) -> Response:
        body = await read_body(request)
        if isinstance(body, Response):
            return body
        name = body.get("name")
        if not isinstance(name, str) or not name or not name.isascii() or " " in name:
            return error(400, f'Unexpected name "{name}" for ClientScope')
        if any(s["name"] == name for s in self.store.collection("kc_scopes")):
            return error(409, f"Client Scope {name} already exists")
        mappers = []
        for mapper in body.get("protocolMappers") or []:
            mappers.append({**mapper, "id": new_id()})
        scope = {
            "id": new_id(),
            "name": name,
            "protocol": body.get("protocol", "openid-connect"),
            "attributes": body.get("attributes") or {"include.in.token.scope": "true"},
            "protocolMappers": mappers,
        }
        if body.get("description"):
            scope["description"] = body["description"]
        self.store.collection("kc_scopes").append(scope)
        self.store.save()
        return created(request, "client-scopes", scope["id"])

    async def list_mappers(self, request: Request, parts: list[str]) -> Response:
        scope = self._scope(parts[0])
        return (
            json_response(scope["protocolMappers"])
            if scope
            else not_found("Could not find client scope")
        )

    async def add_mapper(self, request: Request, parts: list[str]) -> Response:
        scope = self._scope(parts[0])
        if scope is None:
            return not_found("Could not find client scope")
        body = await read_body(request)
        if isinstance(body, Response):
            return body
        if any(m.get("name") == body.get("name") for m in scope["protocolMappers"]):
            return error(409, "Protocol mapper exists with same name")
        mapper = {**body, "id": new_id()}
        scope["protocolMappers"].append(mapper)
        self.store.save()
        return created(
            request, f"client-scopes/{scope['id']}/protocol-mappers/models", mapper["id"]
        )

    async def list_default_default(self, request: Request, parts: list[str]) -> Response:
        out = []
        for scope_id in self.store.ids("kc_default_default"):
            scope = self._scope(scope_id)
            if scope:
                out.append({"id": scope["id"], "name": scope["name"]})
        return json_response(out)

    async def add_default_default(self, request: Request, parts: list[str]) -> Response:
        scope = self._scope(parts[0])
        if scope is None:
            return not_found("Client scope not found")
        defaults = self.store.ids("kc_default_default")
        if scope["id"] in defaults:
            # The JPA adapter inserts a second mapping row: a duplicate-key conflict.
            return json_response(
                {
                    "error": "conflict",
                    "error_description": "Conflict detected. See logs for details",
                },
                409,
            )
        defaults.append(scope["id"])
        self.store.save()
        return Response(status_code=204)
