"""Anonymous Dynamic Client Registration (RFC 7591) in the Keycloak flavour, guarded by the
realm's default registration policies and answered as Keycloak 26.7 answers (probed on the real
server): the client gets its redirect URIs' origins as web origins, consent required, no full
scope, and either the realm's default client scopes or, when the request names a `scope`,
exactly those as optional scopes (of the realm's defaults only `basic`). A request with an
`Origin` header is refused (403 `Invalid origin`, no CORS headers) unless the anonymous
"Allowed Registration Web Origins" policy lists that origin. The policies are the realm's
components, which the admin API lists, creates, updates and deletes (`…/components`)."""

from __future__ import annotations

import secrets
import time
from typing import Any

import orjson
from starlette.requests import Request
from starlette.responses import Response

from ..oauth_scopes import scope_tokens
from .keycloak_client_scopes import ClientScopes
from .keycloak_cors import origin_of
from .keycloak_dcr_body import grant_types, read_registration, response_types
from .oidc import json_response
from .store import Record, Store, new_id

POLICY_TYPE = "org.keycloak.services.clientregistration.policy.ClientRegistrationPolicy"
_DEFAULT_POLICIES = [
    (
        "Trusted Hosts",
        "trusted-hosts",
        "anonymous",
        {
            "trusted-hosts": [],
            "host-sending-registration-request-must-match": ["true"],
            "client-uris-must-match": ["true"],
        },
    ),
    ("Consent Required", "consent-required", "anonymous", {}),
    ("Full Scope Disabled", "scope", "anonymous", {}),
    ("Max Clients Limit", "max-clients", "anonymous", {"max-clients": ["200"]}),
    ("Allowed Protocol Mapper Types", "allowed-protocol-mappers", "anonymous", {}),
    (
        "Allowed Client Scopes",
        "allowed-client-templates",
        "anonymous",
        {"allowed-client-scopes": [], "allow-default-scopes": ["true"]},
    ),
    ("Allowed Registration Web Origins", "registration-web-origins", "anonymous", {}),
    ("Allowed Protocol Mapper Types", "allowed-protocol-mappers", "authenticated", {}),
    (
        "Allowed Client Scopes",
        "allowed-client-templates",
        "authenticated",
        {"allowed-client-scopes": [], "allow-default-scopes": ["true"]},
    ),
    ("Allowed Registration Web Origins", "registration-web-origins", "authenticated", {}),
]


def seed_policies(store: Store, realm_id: str) -> None:
    """The ten registration policies of a fresh Keycloak 26 master realm."""
    if store.collection("kc_components"):
        return
    for name, provider, sub, config in _DEFAULT_POLICIES:
        store.collection("kc_components").append(
            {
                "id": new_id(),
                "name": name,
                "providerId": provider,
                "providerType": POLICY_TYPE,
                "parentId": realm_id,
                "subType": sub,
                "config": config,
            }
        )


def _error(status: int, error: str, description: str) -> Response:
    """An RFC 7591 error body, as Keycloak's client-registration service sends it."""
    return json_response({"error": error, "error_description": description}, status)


def _policy_rejection(policy: str, details: str) -> Response:
    """The 403 for a registration one of the realm's anonymous policies refuses."""
    return _error(
        403,
        "insufficient_scope",
        f"Policy '{policy}' rejected request to client-registration service. Details: {details}",
    )


class Registration:
    """The realm's `clients-registrations/openid-connect` endpoint."""

    def __init__(self, store: Store, scopes: ClientScopes, realm_path: str):
        self.store = store
        self.scopes = scopes
        self.realm_path = realm_path

    def policy(self, provider_id: str) -> Record | None:
        """The realm's anonymous registration policy of this kind, if it is still there."""
        return next(
            (
                c
                for c in self.store.collection("kc_components")
                if c["providerId"] == provider_id and c["subType"] == "anonymous"
            ),
            None,
        )

    async def create_component(self, request: Request, parts: list[str]) -> Response:
        """`POST /admin/realms/master/components`: a registration policy (201 + `Location`)."""
        body = await self._json(request)
        if body is None:
            return json_response({"error": "unknown_error"}, 400)
        component = {
            "id": new_id(),
            "name": body.get("name"),
            "providerId": body.get("providerId"),
            "providerType": body.get("providerType", POLICY_TYPE),
            "parentId": body.get("parentId"),
            "subType": body.get("subType"),
            "config": body.get("config") or {},
        }
        self.store.collection("kc_components").append(component)
        self.store.save()
        base = str(request.base_url).rstrip("/")
        location = f"{base}/admin{self.realm_path}/components/{component['id']}"
        return Response(status_code=201, headers={"Location": location})

    @staticmethod
    async def _json(request: Request) -> dict[str, Any] | None:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return None
        return body if isinstance(body, dict) else None

    async def update_component(self, request: Request, parts: list[str]) -> Response:
        """`PUT /admin/realms/master/components/{id}`: a policy's name and configuration."""
        target = next(
            (c for c in self.store.collection("kc_components") if c["id"] == parts[0]), None
        )
        if target is None:
            return json_response({"error": "Could not find component"}, 404)
        body = await self._json(request)
        if body is None:
            return json_response({"error": "unknown_error"}, 400)
        for field in ("name", "config"):
            if field in body and body[field] is not None:
                target[field] = body[field]
        self.store.save()
        return Response(status_code=204)

    async def list_components(self, request: Request, parts: list[str]) -> Response:
        """`GET /admin/realms/master/components` (by `type` and `name`)."""
        kind = request.query_params.get("type")
        name = request.query_params.get("name")
        items = [
            c
            for c in self.store.collection("kc_components")
            if (kind is None or c["providerType"] == kind) and (name is None or c["name"] == name)
        ]
        return json_response(items)

    async def delete_component(self, request: Request, parts: list[str]) -> Response:
        """`DELETE /admin/realms/master/components/{id}`: 204, or 404."""
        components = self.store.collection("kc_components")
        target = next((c for c in components if c["id"] == parts[0]), None)
        if target is None:
            return json_response({"error": "Could not find component"}, 404)
        components.remove(target)
        self.store.save()
        return Response(status_code=204)

    def allowed_origins(self) -> list[str]:
        """Origins a browser may register from (the anonymous web-origins policy's list)."""
        policy = self.policy("registration-web-origins")
        origins = (policy or {}).get("config", {}).get("web-origins", [])
        return [o for o in origins if isinstance(o, str)]

    async def register(self, request: Request) -> Response:
        """Anonymous registration, with CORS for an origin the policy allows."""
        origin = request.headers.get("origin")
        if origin is not None and origin not in self.allowed_origins():
            return json_response({"error": "Invalid origin"}, 403)
        response = await self._register(request)
        if origin is not None:
            response.headers["Access-Control-Allow-Origin"] = origin
            response.headers["Access-Control-Allow-Credentials"] = "true"
        return response

    async def _register(self, request: Request) -> Response:
        if self.policy("trusted-hosts") is not None:
            return _policy_rejection("Trusted Hosts", "Host not trusted.")
        body = read_registration(await request.body())
        if isinstance(body, Response):
            return body
        if self._scopes_rejected(body.get("scope")):
            return _policy_rejection(
                "Allowed Client Scopes", "Not permitted to use specified clientScope"
            )
        method = body.get("token_endpoint_auth_method") or "client_secret_basic"
        record = self._new_client(body, method == "none", body.get("redirect_uris") or [])
        return json_response(self._answer(request, record, method), 201)

    def _scopes_rejected(self, scope: object) -> bool:
        # Allowed: the realm's default and optional client scopes and the policy's own list;
        # any other name is refused, `openid` (no client scope) included.
        templates = self.policy("allowed-client-templates")
        if templates is None or not isinstance(scope, str):
            return False
        realm = [*self.store.ids("kc_default_default"), *self.scopes.realm_optional()]
        allowed = set(self.scopes.names(realm))
        allowed |= set(templates["config"].get("allowed-client-scopes", []))
        return any(s not in allowed for s in scope_tokens(scope))

    def _new_client(self, body: dict[str, Any], public: bool, uris: list[str]) -> Record:
        grants = grant_types(body)
        origins = [o for o in dict.fromkeys(origin_of(u) for u in uris) if o]
        record: Record = {
            "id": new_id(),
            "clientId": new_id(),
            "name": body.get("client_name"),
            "publicClient": public,
            "secret": None if public else secrets.token_urlsafe(24),
            "redirectUris": uris,
            "webOrigins": origins,
            "grantTypes": grants,
            "consentRequired": self.policy("consent-required") is not None,
            "fullScopeAllowed": self.policy("scope") is None,
        }
        scope = body.get("scope")
        self.scopes.assign_at_creation(record, scope if isinstance(scope, str) else None)
        self.store.collection("kc_clients").append(record)
        self.store.save()
        return record

    def _answer(self, request: Request, record: Record, method: str) -> Record:
        """The registered client's metadata, with the secret only for a confidential client."""
        base = str(request.base_url).rstrip("/")
        out: Record = {
            "redirect_uris": record["redirectUris"],
            "token_endpoint_auth_method": method,
            "grant_types": record["grantTypes"],
            "response_types": response_types(record["grantTypes"]),
            "client_id": record["clientId"],
            "client_name": record["name"],
            "scope": " ".join(self.scopes.names(self.scopes.optional_ids(record))),
            "subject_type": "public",
            "request_uris": [],
            "tls_client_certificate_bound_access_tokens": False,
            "dpop_bound_access_tokens": False,
            "post_logout_redirect_uris": record["redirectUris"],
            "client_id_issued_at": int(time.time()),
            "registration_client_uri": f"{base}{self.realm_path}/clients-registrations/"
            f"openid-connect/{record['clientId']}",
            "registration_access_token": secrets.token_urlsafe(32),
            "backchannel_logout_session_required": False,
            "require_pushed_authorization_requests": False,
            "frontchannel_logout_session_required": False,
        }
        if record["secret"]:
            out["client_secret"] = record["secret"]
            out["client_secret_expires_at"] = 0
        return out
