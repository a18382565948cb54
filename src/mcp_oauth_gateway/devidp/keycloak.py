"""Keycloak flavour of the dev identity provider: the `master` realm's OpenID endpoints, Dynamic
Client Registration guarded by the default registration policies, and the admin REST subset the
provisioning tool uses, answering with Keycloak's status codes and bodies (201 + `Location`,
409 `errorMessage`, 401 `HTTP 401 Unauthorized` for expired 60 s admin tokens)."""

from __future__ import annotations

import re
import secrets
import time
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
from joserfc.jwk import OctKey, RSAKey
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..oauth_scopes import scope_tokens
from . import keycloak_clients, keycloak_exchange, keycloak_tokens
from .keycloak_authorize import KeycloakAuthorize
from .keycloak_client_scopes import BUILTIN_SCOPES, ClientScopes
from .keycloak_cors import TokenEndpointCors, any_origin
from .keycloak_realm import Realm
from .keycloak_registration import Registration, seed_policies
from .keycloak_revoke import Revocation
from .keycloak_userinfo import Userinfo
from .oidc import OAuthClient, OpenIdProvider, Subject, json_response
from .settings import DevIdpSettings
from .store import Record, Store, check_password, hash_password, new_id, new_signing_key

AdminHandler = Callable[[Request, list[str]], Awaitable[Response]]
REALM = "master"
REALM_ID = "master-realm-id"
OIDC = f"/realms/{REALM}/protocol/openid-connect"
ADMIN = f"/admin/realms/{REALM}"


def _error(status: int, message: str) -> Response:
    """Keycloak's `ErrorRepresentation` (business errors)."""
    return json_response({"errorMessage": message}, status)


def _not_found(message: str) -> Response:
    return json_response({"error": message}, 404)


def _created(request: Request, collection: str, new: str) -> Response:
    base = str(request.base_url).rstrip("/")
    return Response(status_code=201, headers={"Location": f"{base}{ADMIN}/{collection}/{new}"})


class KeycloakFlavour:
    """Realm state, the admin API and the token contents of a Keycloak `master` realm."""

    name = "keycloak"
    interaction_prefix = f"/realms/{REALM}/login-actions"
    grant_not_allowed_error = (400, "unauthorized_client")
    # TokenManager.parseScopeParameter: `scope.split(" ")`, U+0020 alone.
    scope_tokens = staticmethod(scope_tokens)

    def __init__(self, store: Store, settings: DevIdpSettings):
        self.store = store
        self.settings = settings
        self.provider = OpenIdProvider(self, keycloak_tokens.KEYCLOAK_ERRORS)
        self.realm = Realm(store, self.provider, REALM_ID, settings.access_token_ttl)
        self.client_scopes = ClientScopes(store)
        self.registration = Registration(store, self.client_scopes, f"/realms/{REALM}")
        self._seed()
        self._key = RSAKey.import_key(self.store.value("kc_key"))
        self._hmac = OctKey.import_key(self.store.value("kc_hmac"))  # signs refresh tokens
        self.token_cors = TokenEndpointCors(self.provider, self._client_record)
        self._authorize = KeycloakAuthorize(
            self.provider.authorize, self.find_client, self._scope_names, f"/realms/{REALM}"
        )
        self._userinfo = Userinfo(REALM, self._valid_claims, self._client_record)
        self._revocation = Revocation(self.provider, self.realm, self._key)
        self._keycloak_ways(self.provider)
        one = "([^/]+)"
        self._admin_routes = [
            (method, re.compile(pattern.replace("{id}", one)), handler)
            for method, pattern, handler in self._admin_table()
        ]

    def _keycloak_ways(self, provider: OpenIdProvider) -> None:
        """What Keycloak does its own way in the shared OpenID provider."""
        provider.extras = keycloak_tokens.response_members(
            self.realm.not_before, provider.refresh_tokens, self._hmac
        )
        provider.denied_description = None
        provider.session_state = True
        provider.rotates_refresh_tokens = self.realm.revokes_refresh_tokens
        provider.refresh_scope_check = self._authorize.check_refresh_scope

    def _admin_table(self) -> list[tuple[str, str, AdminHandler]]:
        """(method, path under /admin/realms/master, handler) of the admin API subset."""
        return [
            ("GET", "", self.realm.get),
            ("PUT", "", self.realm.put),
            ("POST", "logout-all", self.realm.logout_all),
            ("GET", "client-scopes", self._list_scopes),
            ("POST", "client-scopes", self._create_scope),
            ("GET", "client-scopes/{id}", self._get_scope),
            ("GET", "client-scopes/{id}/protocol-mappers/models", self._list_mappers),
            ("POST", "client-scopes/{id}/protocol-mappers/models", self._add_mapper),
            ("GET", "default-default-client-scopes", self._list_default_default),
            ("PUT", "default-default-client-scopes/{id}", self._add_default_default),
            ("GET", "groups", self._list_groups),
            ("POST", "groups", self._create_group),
            ("GET", "users", self._list_users),
            ("POST", "users", self._create_user),
            ("GET", "users/{id}/groups", self._user_groups),
            ("PUT", "users/{id}/groups/{id}", self._join_group),
            ("POST", "users/{id}/logout", self.realm.logout_user),
            ("GET", "clients", self._list_clients),
            ("POST", "clients", self._create_client),
            ("PUT", "clients/{id}", self._update_client),
            ("GET", "clients/{id}/default-client-scopes", self.client_scopes.list_default),
            ("PUT", "clients/{id}/default-client-scopes/{id}", self.client_scopes.add_default),
            ("GET", "clients/{id}/optional-client-scopes", self.client_scopes.list_optional),
            (
                "PUT",
                "clients/{id}/optional-client-scopes/{id}",
                self.client_scopes.add_optional,
            ),
            ("GET", "components", self._list_components),
            ("POST", "components", self.registration.create_component),
            ("PUT", "components/{id}", self.registration.update_component),
            ("DELETE", "components/{id}", self._delete_component),
        ]

    # --- state ----------------------------------------------------------------------------

    def _seed(self) -> None:
        store = self.store
        if store.value("kc_key") is None:
            store.data["kc_key"] = new_signing_key("kc")
        if store.value("kc_hmac") is None:
            hmac_key = OctKey.generate_key(512, parameters={"kid": new_id()})
            store.data["kc_hmac"] = hmac_key.as_dict(private=True)
        users = store.collection("kc_users")
        admin = self.settings.admin_username.lower()
        if not any(u["username"] == admin for u in users):
            users.append(
                {
                    "id": new_id(),
                    "username": admin,
                    "enabled": True,
                    "emailVerified": False,
                    "createdTimestamp": int(time.time() * 1000),
                    "password": hash_password(self.settings.admin_password),
                    "groups": [],
                    "admin": True,
                }
            )
        scopes = store.collection("kc_scopes")
        if not scopes:
            for name, (default, in_token) in BUILTIN_SCOPES.items():
                scope: Record = {
                    "id": new_id(),
                    "name": name,
                    "protocol": "openid-connect",
                    "attributes": {"include.in.token.scope": str(in_token).lower()},
                    "protocolMappers": [],
                }
                scopes.append(scope)
                if default:
                    store.ids("kc_default_default").append(scope["id"])
        seed_policies(store, REALM_ID)
        clients = store.collection("kc_clients")
        if not any(c["clientId"] == "admin-cli" for c in clients):
            clients.append(
                {
                    "id": new_id(),
                    "clientId": "admin-cli",
                    "name": "admin-cli",
                    "publicClient": True,
                    "secret": None,
                    "redirectUris": [],
                    "grantTypes": ["password", "refresh_token"],
                    "consentRequired": False,
                    "webOrigins": [],
                }
            )
        store.save()

    def _user(self, **match: str) -> Record | None:
        for user in self.store.collection("kc_users"):
            if all(str(user.get(k, "")).lower() == v.lower() for k, v in match.items()):
                return user
        return None

    def _group(self, group_id: str) -> Record | None:
        return next((g for g in self.store.collection("kc_groups") if g["id"] == group_id), None)

    def _scope(self, scope_id: str) -> Record | None:
        return next((s for s in self.store.collection("kc_scopes") if s["id"] == scope_id), None)

    # --- Flavour protocol (token contents) ------------------------------------------------

    def issuer(self, base: str, client: OAuthClient) -> str:
        """`<base>/realms/master` (no trailing slash)."""
        return f"{base}/realms/{REALM}"

    def find_client(self, client_id: str) -> OAuthClient | None:
        """A client of the realm (admin-cli or dynamically registered)."""
        record = self._client_record(client_id)
        if record is None:
            return None
        uris = tuple(
            ("wildcard" if u.endswith("*") else "strict", u) for u in record["redirectUris"]
        )
        return OAuthClient(
            client_id=record["clientId"],
            public=record["publicClient"],
            secret=record["secret"],
            redirect_uris=uris,
            grant_types=frozenset(record["grantTypes"]),
            consent=record.get("consentRequired", False),
            name=record.get("name") or record["clientId"],
        )

    def _subject(self, user: Record) -> Subject:
        names = [g["name"] for gid in user.get("groups", []) if (g := self._group(gid))]
        full = " ".join(filter(None, [user.get("firstName"), user.get("lastName")])) or None
        return Subject(
            id=user["id"],
            username=user["username"],
            email=user.get("email"),
            name=full,
            groups=tuple(names),
            service_account=user.get("serviceAccountClientId") is not None,
        )

    def authenticate(self, username: str, password: str) -> Subject | None:
        """The enabled user with these credentials."""
        user = self._user(username=username)
        if user is None or not user.get("enabled", True):
            return None
        if not check_password(password, user.get("password")):
            return None
        return self._subject(user)

    def subject_by_id(self, subject_id: str) -> Subject | None:
        """Reload a user."""
        user = self._user(id=subject_id)
        return self._subject(user) if user else None

    def service_subject(self, client: OAuthClient) -> Subject:
        """The client's service-account user (created on first use, as Keycloak does)."""
        username = f"service-account-{client.client_id}".lower()
        user = self._user(username=username)
        if user is None:
            user = {
                "id": new_id(),
                "username": username,
                "enabled": True,
                "groups": [],
                "serviceAccountClientId": client.client_id,
                "createdTimestamp": int(time.time() * 1000),
            }
            self.store.collection("kc_users").append(user)
            self.store.save()
        return self._subject(user)

    def signing_key(self, client: OAuthClient) -> RSAKey:
        """The realm's RS256 key."""
        return self._key

    def signing_key_of_realm(self) -> RSAKey:
        """The realm's RS256 key (every client's tokens are signed with it)."""
        return self._key

    def session_ended(self, claims: dict[str, Any]) -> bool:
        """Whether a token's session was ended (a user's logout, logout-all)."""
        return self.realm.refused(claims)

    def client_attribute(self, client_id: str, name: str) -> str | None:
        """A client's attribute (`standard.token.exchange.enabled`, …)."""
        record = next(
            (c for c in self.store.collection("kc_clients") if c["clientId"] == client_id), None
        )
        value = (record or {}).get("attributes", {}).get(name)
        return value if isinstance(value, str) else None

    def token_exchange(
        self, base: str, client: OAuthClient, form: dict[str, str], audiences: list[str]
    ) -> dict[str, Any]:
        """Standard token exchange (V2), as Keycloak ≥ 26.2 does it."""
        return keycloak_exchange.exchange(self, base, client, form, audiences)

    def access_token_ttl(self, client: OAuthClient) -> int:
        """The master realm's `accessTokenLifespan` (60 s unless set through the admin API)."""
        return self.realm.access_token_lifespan()

    def _scope_names(self, client_id: str) -> set[str]:
        record, scopes = self._client_record(client_id), self.client_scopes
        return set(scopes.names([*scopes.default_ids(record), *scopes.optional_ids(record)]))

    def _client_record(self, client_id: str) -> Record | None:
        return next(
            (c for c in self.store.collection("kc_clients") if c["clientId"] == client_id), None
        )

    def token_claims(
        self, client: OAuthClient, subject: Subject, scopes: list[str], resource: str | None
    ) -> dict[str, Any]:
        """Claims from the client scopes the request applies (keycloak_tokens)."""
        record = self._client_record(client.client_id)
        applied = self.client_scopes.applied(record, scopes)
        user = self._user(id=subject.id) or {}
        return keycloak_tokens.access_claims(client, record, subject, user, applied, scopes)

    def id_token_claims(
        self, client: OAuthClient, access: dict[str, Any], standard: dict[str, Any]
    ) -> dict[str, Any]:
        """Keycloak's ID token (keycloak_tokens)."""
        return keycloak_tokens.id_claims(access, standard)

    # --- admin authentication -------------------------------------------------------------

    def _admin(self, request: Request) -> Response | None:
        claims = self.provider.bearer_claims(request, self._key)
        if claims is None or self.realm.refused(claims):
            return json_response({"error": "HTTP 401 Unauthorized"}, 401)
        user = self._user(id=str(claims.get("sub", "")))
        if user is None or not user.get("admin"):
            return json_response({"error": "unknown_error"}, 403)
        return None

    # --- admin API ------------------------------------------------------------------------

    async def _body(self, request: Request) -> Record | Response:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError:
            return _error(400, "Unrecognized field or malformed JSON")
        if not isinstance(body, dict):
            return _error(400, "Unrecognized field or malformed JSON")
        return body

    async def admin(self, request: Request) -> Response:
        """Dispatch `/admin/realms/{realm}/…`."""
        realm = request.path_params["realm"]
        if realm != REALM:
            return _not_found("Realm not found.")
        denied = self._admin(request)
        if denied is not None:
            return denied
        rest = request.path_params.get("rest", "").strip("/")
        for method, pattern, handler in self._admin_routes:
            match = pattern.fullmatch(rest)
            if match and method == request.method:
                return await handler(request, list(match.groups()))
        return _not_found("HTTP 404 Not Found")

    async def _list_scopes(self, request: Request, parts: list[str]) -> Response:
        return json_response(self.store.collection("kc_scopes"))

    async def _get_scope(self, request: Request, parts: list[str]) -> Response:
        scope = self._scope(parts[0])
        return json_response(scope) if scope else _not_found("Could not find client scope")

    async def _create_scope(self, request: Request, parts: list[str]) -> Response:
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        name = body.get("name")
        if not isinstance(name, str) or not name or not name.isascii() or " " in name:
            return _error(400, f'Unexpected name "{name}" for ClientScope')
        if any(s["name"] == name for s in self.store.collection("kc_scopes")):
            return _error(409, f"Client Scope {name} already exists")
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
        return _created(request, "client-scopes", scope["id"])

    async def _list_mappers(self, request: Request, parts: list[str]) -> Response:
        scope = self._scope(parts[0])
        return (
            json_response(scope["protocolMappers"])
            if scope
            else _not_found("Could not find client scope")
        )

    async def _add_mapper(self, request: Request, parts: list[str]) -> Response:
        scope = self._scope(parts[0])
        if scope is None:
            return _not_found("Could not find client scope")
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        if any(m.get("name") == body.get("name") for m in scope["protocolMappers"]):
            return _error(409, "Protocol mapper exists with same name")
        mapper = {**body, "id": new_id()}
        scope["protocolMappers"].append(mapper)
        self.store.save()
        return _created(
            request, f"client-scopes/{scope['id']}/protocol-mappers/models", mapper["id"]
        )

    async def _list_default_default(self, request: Request, parts: list[str]) -> Response:
        out = []
        for scope_id in self.store.ids("kc_default_default"):
            scope = self._scope(scope_id)
            if scope:
                out.append({"id": scope["id"], "name": scope["name"]})
        return json_response(out)

    async def _add_default_default(self, request: Request, parts: list[str]) -> Response:
        scope = self._scope(parts[0])
        if scope is None:
            return _not_found("Client scope not found")
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

    def _group_rep(self, group: Record) -> Record:
        return {
            "id": group["id"],
            "name": group["name"],
            "path": f"/{group['name']}",
            "subGroupCount": 0,
            "subGroups": [],
            "attributes": {},
            "realmRoles": [],
            "clientRoles": {},
            "access": {"view": True, "manage": True},
        }

    async def _list_groups(self, request: Request, parts: list[str]) -> Response:
        search = request.query_params.get("search")
        exact = request.query_params.get("exact", "false") == "true"
        groups = self.store.collection("kc_groups")
        if search is not None:
            groups = [
                g
                for g in groups
                if (g["name"] == search if exact else search.lower() in g["name"].lower())
            ]
        return json_response([self._group_rep(g) for g in groups])

    async def _create_group(self, request: Request, parts: list[str]) -> Response:
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        name = body.get("name")
        if not isinstance(name, str) or not name.strip():
            return _error(400, "Group name is missing")
        if any(g["name"] == name for g in self.store.collection("kc_groups")):
            return _error(409, f"Top level group named '{name}' already exists.")
        group = {"id": new_id(), "name": name}
        self.store.collection("kc_groups").append(group)
        self.store.save()
        return _created(request, "groups", group["id"])

    def _user_rep(self, user: Record) -> Record:
        keep = (
            "id",
            "username",
            "enabled",
            "emailVerified",
            "createdTimestamp",
            "firstName",
            "lastName",
            "email",
        )
        rep = {k: user[k] for k in keep if k in user}
        rep.setdefault("emailVerified", False)
        rep["totp"] = False
        rep["access"] = {"manage": True}
        return rep

    async def _list_users(self, request: Request, parts: list[str]) -> Response:
        username = request.query_params.get("username")
        exact = request.query_params.get("exact", "false") == "true"
        users = [
            u for u in self.store.collection("kc_users") if not u.get("serviceAccountClientId")
        ]
        if username is not None:
            wanted = username.lower()
            users = [
                u for u in users if (u["username"] == wanted if exact else wanted in u["username"])
            ]
        return json_response([self._user_rep(u) for u in users])

    async def _create_user(self, request: Request, parts: list[str]) -> Response:
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        username = body.get("username")
        if not isinstance(username, str) or not username.strip():
            return _error(400, "User name is missing")
        username = username.lower()
        if self._user(username=username):
            return _error(409, "User exists with same username")
        email = body.get("email")
        if email and self._user(email=email):
            return _error(409, "User exists with same email")
        user: Record = {
            "id": new_id(),
            "username": username,
            "enabled": bool(body.get("enabled", False)),
            "emailVerified": bool(body.get("emailVerified", False)),
            "createdTimestamp": int(time.time() * 1000),
            "groups": [],
        }
        for name in ("email", "firstName", "lastName"):
            if isinstance(body.get(name), str):
                user[name] = body[name]
        for credential in body.get("credentials") or []:
            if credential.get("type") == "password" and isinstance(credential.get("value"), str):
                user["password"] = hash_password(credential["value"])
        self.store.collection("kc_users").append(user)
        self.store.save()
        return _created(request, "users", user["id"])

    async def _user_groups(self, request: Request, parts: list[str]) -> Response:
        user = self._user(id=parts[0])
        if user is None:
            return _not_found("User not found")
        return json_response(
            [
                {"id": g["id"], "name": g["name"], "path": f"/{g['name']}"}
                for gid in user["groups"]
                if (g := self._group(gid))
            ]
        )

    async def _join_group(self, request: Request, parts: list[str]) -> Response:
        user = self._user(id=parts[0])
        if user is None:
            return _not_found("User not found")
        group = self._group(parts[1])
        if group is None:
            return _not_found("Group not found")
        if group["id"] not in user["groups"]:
            user["groups"].append(group["id"])
            self.store.save()
        return Response(status_code=204)

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

    async def _list_clients(self, request: Request, parts: list[str]) -> Response:
        wanted = request.query_params.get("clientId")
        return json_response(
            [
                self._client_rep(c)
                for c in self.store.collection("kc_clients")
                if wanted is None or c["clientId"] == wanted
            ]
        )

    async def _create_client(self, request: Request, parts: list[str]) -> Response:
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        client_id = body.get("clientId")
        if not isinstance(client_id, str) or not client_id:
            return _error(400, "Client id is missing")
        if self.find_client(client_id) is not None:
            return _error(409, f"Client {client_id} already exists")
        grants = []
        if body.get("standardFlowEnabled", True):
            grants += ["authorization_code", "refresh_token"]
        if body.get("directAccessGrantsEnabled"):
            grants.append("password")
        if body.get("serviceAccountsEnabled"):
            grants.append("client_credentials")
        public = bool(body.get("publicClient", False))
        record = {
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
        self.client_scopes.assign_at_creation(record)
        self.store.collection("kc_clients").append(record)
        self.store.save()
        return _created(request, "clients", str(record["id"]))

    async def _update_client(self, request: Request, parts: list[str]) -> Response:
        record = next((c for c in self.store.collection("kc_clients") if c["id"] == parts[0]), None)
        if record is None:
            return _not_found("Could not find client")
        body = await self._body(request)
        if isinstance(body, Response):
            return body
        keycloak_clients.update_client(record, body)
        self.store.save()
        return Response(status_code=204)

    async def _list_components(self, request: Request, parts: list[str]) -> Response:
        kind = request.query_params.get("type")
        name = request.query_params.get("name")
        items = [
            c
            for c in self.store.collection("kc_components")
            if (kind is None or c["providerType"] == kind) and (name is None or c["name"] == name)
        ]
        return json_response(items)

    async def _delete_component(self, request: Request, parts: list[str]) -> Response:
        components = self.store.collection("kc_components")
        target = next((c for c in components if c["id"] == parts[0]), None)
        if target is None:
            return _not_found("Could not find component")
        components.remove(target)
        self.store.save()
        return Response(status_code=204)

    # --- OpenID endpoints -----------------------------------------------------------------

    async def discovery(self, request: Request) -> Response:
        """The realm's OpenID configuration, with `registration_endpoint`."""
        base = str(request.base_url).rstrip("/")
        issuer = f"{base}/realms/{REALM}"
        return json_response(
            {
                "issuer": issuer,
                "authorization_endpoint": f"{base}{OIDC}/auth",
                "token_endpoint": f"{base}{OIDC}/token",
                "userinfo_endpoint": f"{base}{OIDC}/userinfo",
                "revocation_endpoint": f"{base}{OIDC}/revoke",
                "jwks_uri": f"{base}{OIDC}/certs",
                "registration_endpoint": (
                    f"{base}/realms/{REALM}/clients-registrations/openid-connect"
                ),
                "grant_types_supported": [
                    "authorization_code",
                    "refresh_token",
                    "password",
                    "client_credentials",
                ],
                "response_types_supported": ["code"],
                "response_modes_supported": ["query"],
                "subject_types_supported": ["public"],
                "id_token_signing_alg_values_supported": ["RS256"],
                # Keycloak does not list `none` (public clients work all the same); the JWT and
                # TLS methods it lists, the dev IdP does not serve.
                "token_endpoint_auth_methods_supported": [
                    "client_secret_basic",
                    "client_secret_post",
                ],
                "code_challenge_methods_supported": ["S256"],
                "scopes_supported": [
                    "openid",
                    *[s["name"] for s in self.store.collection("kc_scopes")],
                ],
                "claims_supported": [
                    *("iss", "sub", "aud", "exp", "iat", "auth_time", "name", "given_name"),
                    *("family_name", "preferred_username", "email", "acr", "azp", "nonce"),
                ],
                "authorization_response_iss_parameter_supported": True,
            }
        )

    async def jwks(self, request: Request) -> Response:
        """The realm's public keys."""
        return json_response({"keys": [self._key.as_dict(private=False)]})

    def _valid_claims(self, request: Request) -> dict[str, Any] | None:
        """The claims of the request's valid access token of a session still open."""
        claims = self.provider.bearer_claims(request, self._key)
        return None if claims is None or self.realm.refused(claims) else claims

    def preflight_methods(self) -> dict[str, str]:
        """`Access-Control-Allow-Methods` of each endpoint's preflight answer."""
        return {
            f"{OIDC}/token": "POST, OPTIONS",
            f"/realms/{REALM}/clients-registrations/openid-connect": (
                "DELETE, POST, GET, OPTIONS, PUT"
            ),
            f"{OIDC}/userinfo": "GET, HEAD, OPTIONS",
            f"{OIDC}/revoke": "POST, OPTIONS",
            f"/realms/{REALM}/.well-known/openid-configuration": "GET",
            f"{OIDC}/certs": "GET",
        }

    def routes(self) -> list[Route]:
        """The Starlette routes of this flavour."""
        provider = self.provider
        return [
            Route(f"/realms/{REALM}/.well-known/openid-configuration", any_origin(self.discovery)),
            Route(f"{OIDC}/certs", any_origin(self.jwks)),
            Route(f"{OIDC}/auth", self._authorize.authorize),
            Route(f"{OIDC}/token", self.token_cors.token, methods=["POST"]),
            Route(f"{OIDC}/userinfo", self._userinfo.userinfo, methods=["GET", "POST"]),
            Route(f"{OIDC}/revoke", self._revocation.revoke, methods=["POST"]),
            Route(
                f"/realms/{REALM}/clients-registrations/openid-connect",
                self.registration.register,
                methods=["POST"],
            ),
            Route(
                f"{self.interaction_prefix}/{{uid}}", provider.interaction, methods=["GET", "POST"]
            ),
            Route("/admin/realms/{realm}", self.admin, methods=["GET", "PUT"]),
            Route(
                "/admin/realms/{realm}/{rest:path}",
                self.admin,
                methods=["GET", "POST", "PUT", "DELETE"],
            ),
        ]
