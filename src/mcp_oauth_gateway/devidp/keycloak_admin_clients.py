"""The realm's clients in the admin REST API (`/admin/realms/master/clients`): list (by
`clientId`), create (201 + `Location`, 409 for a client id taken; the flags become grant types,
the realm's client scopes are copied in) and update (204, or 404 `Could not find client`)."""

from __future__ import annotations

import secrets

from starlette.requests import Request
from starlette.responses import Response

from .keycloak_admin_http import created, error, not_found, read_body
from .keycloak_client_scopes import ClientScopes
from .keycloak_clients import client_record, update_client
from .oidc import json_response
from .store import Record, Store, new_id


def _grants(body: Record) -> list[str]:
    """The grant types a client representation's flags stand for."""
    grants = []
    if body.get("standardFlowEnabled", True):
        grants += ["authorization_code", "refresh_token"]
    if body.get("directAccessGrantsEnabled"):
        grants.append("password")
    if body.get("serviceAccountsEnabled"):
        grants.append("client_credentials")
    return grants


def _new_client(body: Record, client_id: str) -> Record:
    grants = _grants(body)
    public = bool(body.get("publicClient", False))
    return {
        "id": new_id(),
        "clientId": client_id,
        "name": body.get("name") or client_id,
        "publicClient": public,
        "secret": None if public else (body.get("secret") or secrets.token_urlsafe(24)),
        "redirectUris": [u for u in body.get("redirectUris") or [] if isinstance(u, str)],
        "grantTypes": grants,
        "consentRequired": bool(body.get("consentRequired")),
        "fullScopeAllowed": body.get("fullScopeAllowed", True) is not False,
        "webOrigins": [o for o in body.get("webOrigins") or [] if isinstance(o, str)],
        "attributes": {
            k: v for k, v in (body.get("attributes") or {}).items() if isinstance(v, str)
        },
    }


class ClientsAdmin:
    """The admin API's clients."""

    def __init__(self, store: Store, client_scopes: ClientScopes):
        self.store = store
        self.client_scopes = client_scopes

    def _client_rep(self, record: Record) -> Record:
        scopes = self.client_scopes
        return {
            "id": record["id"],
            "clientId": record["clientId"],
            "name": record.get("name"),
            "enabled": True,
            "publicClient": record["publicClient"],
            "redirectUris": record["redirectUris"],
            "standardFlowEnabled": "authorization_code" in record["grantTypes"],
            "directAccessGrantsEnabled": "password" in record["grantTypes"],
            "serviceAccountsEnabled": "client_credentials" in record["grantTypes"],
            "consentRequired": record.get("consentRequired", False),
            "fullScopeAllowed": record.get("fullScopeAllowed", True),
            "webOrigins": record.get("webOrigins", []),
            "protocol": "openid-connect",
            "attributes": record.get("attributes", {}),
            "defaultClientScopes": scopes.names(scopes.default_ids(record)),
            "optionalClientScopes": scopes.names(scopes.optional_ids(record)),
        }

    async def list_clients(self, request: Request, parts: list[str]) -> Response:
        wanted = request.query_params.get("clientId")
        return json_response(
            [
                self._client_rep(c)
                for c in self.store.collection("kc_clients")
                if wanted is None or c["clientId"] == wanted
            ]
        )

    async def create_client(self, request: Request, parts: list[str]) -> Response:
        body = await read_body(request)
        if isinstance(body, Response):
            return body
        client_id = body.get("clientId")
        if not isinstance(client_id, str) or not client_id:
            return error(400, "Client id is missing")
        if client_record(self.store, client_id) is not None:
            return error(409, f"Client {client_id} already exists")
        record = _new_client(body, client_id)
        self.client_scopes.assign_at_creation(record)
        self.store.collection("kc_clients").append(record)
        self.store.save()
        return created(request, "clients", str(record["id"]))

    async def update_client(self, request: Request, parts: list[str]) -> Response:
        record = next((c for c in self.store.collection("kc_clients") if c["id"] == parts[0]), None)
        if record is None:
            return not_found("Could not find client")
        body = await read_body(request)
        if isinstance(body, Response):
            return body
        update_client(record, body)
        self.store.save()
        return Response(status_code=204)
