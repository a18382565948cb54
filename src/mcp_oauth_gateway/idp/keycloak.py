"""`mcp-oauth-gateway idp keycloak`: set up provider A (spec 4.2) through the admin REST API.

Why a thin httpx client rather than python-keycloak: we make about fifteen calls, and the exact
wire behaviour is what matters (201 + `Location`, 409 `errorMessage`, 401 on a 60 s admin token).
python-keycloak hides those behind its own exceptions and a silent 401 retry, pulls in requests,
httpx, jwcrypto and aiofiles, and would make the dev IdP's emulation untestable against the
calls we actually send. The token policy is the same as python-keycloak's: refresh at 90 % of
`expires_in`, refresh and retry once on a 401, fall back to the password grant when the refresh
token is no longer active.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

import httpx

from .resources import GatewayValues
from .steps import Progress, StepError, describe

REALM = "master"
POLICY_TYPE = "org.keycloak.services.clientregistration.policy.ClientRegistrationPolicy"


@dataclass
class KeycloakOptions:
    url: str
    admin_user: str
    admin_password: str
    resource: str
    users: list[tuple[str, str | None]] = field(default_factory=list)  # (username, email)
    user_password: str | None = None
    scope: str = "mcp"
    group: str = "users"
    allow_anonymous_dcr: bool = False
    backend: str = "http://127.0.0.1:8000/mcp"
    mode: str = "Facade"
    gateway_client_id: str = "mcp-gateway"


class KeycloakAdmin:
    """Admin REST calls with the token policy described in the module docstring."""

    def __init__(self, http: httpx.Client, options: KeycloakOptions, progress: Progress):
        self.http = http
        self.options = options
        self.progress = progress
        self.base = options.url.rstrip("/")
        self._token: str | None = None
        self._refresh: str | None = None
        self._refresh_at = 0.0

    def _grant(self, form: dict[str, str]) -> httpx.Response:
        return self.http.post(f"{self.base}/realms/{REALM}/protocol/openid-connect/token",
                              data={"client_id": "admin-cli", **form})

    def login(self) -> int:
        """Password grant as `admin-cli`; returns the token lifetime in seconds."""
        response = self._grant({"grant_type": "password", "username": self.options.admin_user,
                                "password": self.options.admin_password})
        if response.status_code != 200:
            raise self.progress.fail(f"admin login as {self.options.admin_user!r} was refused "
                                     f"({describe(response)}); check the admin user and "
                                     f"KEYCLOAK_ADMIN_PASSWORD")
        return self._keep(response.json())

    def _keep(self, body: dict[str, Any]) -> int:
        self._token = body["access_token"]
        self._refresh = body.get("refresh_token")
        lifetime = int(body.get("expires_in", 60))
        self._refresh_at = time.monotonic() + 0.9 * lifetime
        return lifetime

    def _renew(self, why: str) -> None:
        self.progress.say(f"admin token {why}; refreshing")
        if self._refresh:
            response = self._grant({"grant_type": "refresh_token",
                                    "refresh_token": self._refresh})
            if response.status_code == 200:
                self._keep(response.json())
                return
        self.login()

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """An admin call; on 401 the token is refreshed and the call sent once more."""
        if time.monotonic() >= self._refresh_at:
            self._renew("is about to expire")
        url = f"{self.base}/admin/realms/{REALM}{path}"
        response = self.http.request(method, url, headers=self._auth(), **kwargs)
        if response.status_code == 401:
            self._renew("was rejected (401)")
            response = self.http.request(method, url, headers=self._auth(), **kwargs)
        return response

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"}

    def expect(self, response: httpx.Response, *ok: int) -> httpx.Response:
        """Return the response when its status is one of `ok`, else fail the step."""
        if response.status_code not in ok:
            raise self.progress.fail(f"{response.request.method} "
                                     f"{response.request.url.path} answered "
                                     f"{describe(response)}")
        return response


def _created_id(response: httpx.Response) -> str:
    location = response.headers.get("Location", "")
    return location.rstrip("/").rsplit("/", 1)[-1]


def _mappers(options: KeycloakOptions) -> list[dict[str, Any]]:
    return [
        {"name": "mcp-audience", "protocol": "openid-connect",
         "protocolMapper": "oidc-audience-mapper", "consentRequired": False,
         "config": {"included.custom.audience": options.resource,
                    "access.token.claim": "true", "id.token.claim": "false"}},
        {"name": "groups", "protocol": "openid-connect",
         "protocolMapper": "oidc-group-membership-mapper", "consentRequired": False,
         "config": {"claim.name": "groups", "full.path": "false",
                    "access.token.claim": "true", "id.token.claim": "true",
                    "userinfo.token.claim": "true"}},
    ]


STEPS = ["admin token", "client scope", "default scope", "group", "users", "membership",
         "registration policies", "gateway client", "discovery"]


def provision(options: KeycloakOptions, http: httpx.Client, progress: Progress) -> GatewayValues:
    """Run spec 4.2 in order, idempotently; returns what the gateway needs."""
    admin = KeycloakAdmin(http, options, progress)

    progress.begin("admin token")
    progress.say(f"password grant for {options.admin_user!r} via admin-cli at {admin.base}")
    progress.say(f"ok (token lives {admin.login()} s; refreshed as needed)")

    progress.begin("client scope")
    scopes = admin.expect(admin.call("GET", "/client-scopes"), 200).json()
    scope = next((s for s in scopes if s.get("name") == options.scope), None)
    if scope is None:
        body = {"name": options.scope, "protocol": "openid-connect",
                "attributes": {"include.in.token.scope": "true",
                               "display.on.consent.screen": "true"},
                "protocolMappers": _mappers(options)}
        scope_id = _created_id(admin.expect(admin.call("POST", "/client-scopes", json=body), 201))
        progress.say(f"created {options.scope!r} ({scope_id}) with the audience and group mappers")
    else:
        scope_id = scope["id"]
        existing = {m.get("name"): m for m in scope.get("protocolMappers", [])}
        added = []
        for mapper in _mappers(options):
            current = existing.get(mapper["name"])
            if current is None:
                admin.expect(admin.call("POST", f"/client-scopes/{scope_id}/protocol-mappers/"
                                        "models", json=mapper), 201)
                added.append(mapper["name"])
            elif current.get("config", {}).get("included.custom.audience",
                                               options.resource) != options.resource:
                raise progress.fail(
                    f"client scope {options.scope!r} already has mapper {mapper['name']!r} "
                    f"with audience {current['config']['included.custom.audience']!r}, not "
                    f"{options.resource!r}; remove that mapper or pass the same --resource")
        progress.say(f"{options.scope!r} exists ({scope_id})" +
                     (f"; added mappers {added}" if added else "; unchanged"))

    progress.begin("default scope")
    defaults = admin.expect(admin.call("GET", "/default-default-client-scopes"), 200).json()
    if any(d.get("id") == scope_id for d in defaults):
        progress.say(f"{options.scope!r} is already a default scope for all clients; unchanged")
    else:
        admin.expect(admin.call("PUT", f"/default-default-client-scopes/{scope_id}"), 204)
        progress.say(f"{options.scope!r} is now a default scope for current and future clients")

    progress.begin("group")
    found = admin.expect(admin.call("GET", "/groups", params={"search": options.group,
                                                              "exact": "true"}), 200).json()
    group = next((g for g in found if g.get("name") == options.group), None)
    if group is None:
        group_id = _created_id(admin.expect(admin.call("POST", "/groups",
                                                       json={"name": options.group}), 201))
        progress.say(f"created {options.group!r} ({group_id})")
    else:
        group_id = group["id"]
        progress.say(f"{options.group!r} exists ({group_id}); unchanged")

    progress.begin("users")
    user_ids: dict[str, str] = {}
    for username, email in options.users:
        found = admin.expect(admin.call("GET", "/users", params={"username": username,
                                                                 "exact": "true"}), 200).json()
        match = next((u for u in found if u.get("username", "").lower() == username.lower()),
                     None)
        if match is not None:
            user_ids[username] = match["id"]
            progress.say(f"{username!r} exists; unchanged (its password is left as it is)")
            continue
        if not options.user_password:
            raise progress.fail(f"user {username!r} does not exist and no password was given; "
                                "set KEYCLOAK_USER_PASSWORD")
        body = {"username": username, "enabled": True, "emailVerified": bool(email),
                "firstName": username.title(), "lastName": "User",
                "credentials": [{"type": "password", "value": options.user_password,
                                 "temporary": False}]}
        if email:
            body["email"] = email
        user_ids[username] = _created_id(admin.expect(admin.call("POST", "/users", json=body),
                                                      201))
        progress.say(f"created {username!r}")
    if not options.users:
        progress.say("no --user given; nothing to do")

    progress.begin("membership")
    for username, user_id in user_ids.items():
        groups = admin.expect(admin.call("GET", f"/users/{user_id}/groups"), 200).json()
        if any(g.get("id") == group_id for g in groups):
            progress.say(f"{username!r} is already in {options.group!r}; unchanged")
            continue
        admin.expect(admin.call("PUT", f"/users/{user_id}/groups/{group_id}"), 204)
        progress.say(f"added {username!r} to {options.group!r}")

    progress.begin("registration policies")
    if options.allow_anonymous_dcr:
        components = admin.expect(admin.call("GET", "/components",
                                             params={"type": POLICY_TYPE}), 200).json()
        doomed = [c for c in components if c.get("providerId") == "trusted-hosts" or
                  (c.get("providerId") == "allowed-client-templates" and
                   c.get("subType") == "anonymous")]
        for component in doomed:
            admin.expect(admin.call("DELETE", f"/components/{component['id']}"), 204, 404)
            progress.say(f"deleted {component.get('name')!r} ({component['providerId']}, "
                         f"{component.get('subType')}) — local tests only")
        if not doomed:
            progress.say("anonymous registration already allowed; unchanged")
    else:
        progress.say("left as they are (pass --allow-anonymous-dcr for local tests only)")

    progress.begin("gateway client")
    client_id = None
    if options.mode == "Broker":
        client_id = options.gateway_client_id
        callback = options.resource.rstrip("/") + "/oauth/callback"
        found = admin.expect(admin.call("GET", "/clients", params={"clientId": client_id}),
                             200).json()
        if found:
            uris = found[0].get("redirectUris") or []
            if callback not in uris and not any(u.endswith("*") and callback.startswith(u[:-1])
                                                for u in uris):
                raise progress.fail(f"client {client_id!r} exists but does not allow the "
                                    f"gateway callback {callback}; add it to its redirect URIs")
            progress.say(f"public client {client_id!r} exists; unchanged")
        else:
            admin.expect(admin.call("POST", "/clients", json={
                "clientId": client_id, "name": "MCP OAuth gateway (broker)",
                "publicClient": True, "standardFlowEnabled": True,
                "directAccessGrantsEnabled": False, "serviceAccountsEnabled": False,
                "redirectUris": [callback], "protocol": "openid-connect",
                "attributes": {"pkce.code.challenge.method": "S256"}}), 201)
            progress.say(f"created public client {client_id!r} for the gateway, callback "
                         f"{callback}")
    else:
        progress.say("not needed in Facade mode (MCP clients register through DCR)")

    progress.begin("discovery")
    response = http.get(f"{admin.base}/realms/{REALM}/.well-known/openid-configuration")
    if response.status_code != 200:
        raise progress.fail(f"GET discovery answered {describe(response)}")
    document = response.json()
    issuer, jwks_uri = document.get("issuer"), document.get("jwks_uri")
    if not isinstance(issuer, str) or not isinstance(jwks_uri, str):
        raise progress.fail("the discovery document has no issuer or jwks_uri")
    jwks_path = httpx.URL(jwks_uri).path
    progress.say(f"issuer {issuer}, JWKS path {jwks_path}")
    return GatewayValues(provider="Keycloak", idp_url=admin.base, issuer=issuer,
                         jwks_path=jwks_path, audiences=(options.resource,),
                         client_id=client_id, resource=options.resource,
                         backend=options.backend, group=options.group, mode=options.mode)


__all__ = ["STEPS", "KeycloakOptions", "StepError", "provision"]
