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

from ..authorization_server_modes import AuthorizationServerMode
from ..provider_kinds import ProviderKind
from ..urls import shown_url
from . import exchange, keycloak_exchange
from .resources import GatewayValues
from .steps import Progress, Step, StepError, describe, names, run_steps

# The admin logs in to the master realm (where Keycloak's bootstrap admin lives) whatever realm
# is set up.
ADMIN_REALM = "master"
POLICY_TYPE = "org.keycloak.services.clientregistration.policy.ClientRegistrationPolicy"


@dataclass
class KeycloakOptions:
    """What to provision in a Keycloak realm, and where (the passwords included)."""

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
    mode: AuthorizationServerMode = AuthorizationServerMode.FACADE
    gateway_client_id: str = "mcp-gateway"
    # Broker: more redirect URIs for the gateway's client than its sign-in callback (another
    # route's callback, the connect pages' `<MCP path>/connect/signed-in`); missing ones are
    # added to an existing client.
    extra_redirect_uris: tuple[str, ...] = ()
    # The spec's layout is the master realm; any other is created when missing.
    realm: str = "master"
    # --token-exchange-client / --token-exchange-audience (docs/token-exchange.md §1.5)
    exchange: exchange.ExchangeOptions | None = None


class KeycloakAdmin:
    """Admin REST calls with the token policy described in the module docstring."""

    def __init__(self, http: httpx.Client, options: KeycloakOptions, progress: Progress) -> None:
        self.http = http
        self.options = options
        self.progress = progress
        self.base = options.url.rstrip("/")
        self._token: str | None = None
        self._refresh: str | None = None
        self._refresh_at = 0.0

    def _grant(self, form: dict[str, str]) -> httpx.Response:
        return self.http.post(
            f"{self.base}/realms/{ADMIN_REALM}/protocol/openid-connect/token",
            data={"client_id": "admin-cli", **form},
        )

    def login(self) -> int:
        """Password grant as `admin-cli`; returns the token lifetime in seconds."""
        response = self._grant(
            {
                "grant_type": "password",
                "username": self.options.admin_user,
                "password": self.options.admin_password,
            }
        )
        if response.status_code != 200:
            raise self.progress.fail(
                f"admin login as {self.options.admin_user!r} was refused "
                f"({describe(response)}); check the admin user and "
                f"KEYCLOAK_ADMIN_PASSWORD"
            )
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
            response = self._grant({"grant_type": "refresh_token", "refresh_token": self._refresh})
            if response.status_code == 200:
                self._keep(response.json())
                return
        self.login()

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        """An admin call; on 401 the token is refreshed and the call sent once more."""
        if time.monotonic() >= self._refresh_at:
            self._renew("is about to expire")
        url = f"{self.base}/admin/realms/{self.options.realm}{path}"
        response = self.http.request(method, url, headers=self._auth(), **kwargs)
        if response.status_code == 401:
            self._renew("was rejected (401)")
            response = self.http.request(method, url, headers=self._auth(), **kwargs)
        return response

    def token_request(self, form: dict[str, str], client: tuple[str, str]) -> httpx.Response:
        """A request to the set-up realm's token endpoint as `client` (id, secret)."""
        return self.http.post(
            f"{self.base}/realms/{self.options.realm}/protocol/openid-connect/token",
            data=form,
            auth=client,
        )

    def auth_header(self) -> dict[str, str]:
        """The admin token as an Authorization header (for calls outside the realm's path)."""
        return self._auth()

    def _auth(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self._token}"}

    def expect(self, response: httpx.Response, *ok: int) -> httpx.Response:
        """Return the response when its status is one of `ok`, else fail the step."""
        if response.status_code not in ok:
            raise self.progress.fail(
                f"{response.request.method} "
                f"{response.request.url.path} answered "
                f"{describe(response)}"
            )
        return response


def _created_id(response: httpx.Response) -> str:
    location = str(response.headers.get("Location", ""))
    return location.rstrip("/").rsplit("/", 1)[-1]


def _mappers(options: KeycloakOptions) -> list[dict[str, Any]]:
    return [
        {
            "name": "mcp-audience",
            "protocol": "openid-connect",
            "protocolMapper": "oidc-audience-mapper",
            "consentRequired": False,
            "config": {
                "included.custom.audience": options.resource,
                "access.token.claim": "true",
                "id.token.claim": "false",
            },
        },
        {
            "name": "groups",
            "protocol": "openid-connect",
            "protocolMapper": "oidc-group-membership-mapper",
            "consentRequired": False,
            "config": {
                "claim.name": "groups",
                "full.path": "false",
                "access.token.claim": "true",
                "id.token.claim": "true",
                "userinfo.token.claim": "true",
            },
        },
    ]


@dataclass
class _Run:
    """What one provisioning run has found or made so far, step by step."""

    admin: KeycloakAdmin
    options: KeycloakOptions
    progress: Progress
    http: httpx.Client
    scope_id: str = ""
    group_id: str = ""
    user_ids: dict[str, str] = field(default_factory=dict)
    client_id: str | None = None
    issuer: str = ""
    jwks_path: str = ""
    exchange: exchange.ExchangeValues | None = None

    def get(self, path: str, **params: str) -> Any:
        """The JSON body of an admin GET that must answer 200."""
        return self.admin.expect(self.admin.call("GET", path, params=params), 200).json()


def _admin_token(run: _Run) -> None:
    run.progress.say(
        f"password grant for {run.options.admin_user!r} via admin-cli at "
        f"{shown_url(run.admin.base)}"
    )
    run.progress.say(f"ok (token lives {run.admin.login()} s; refreshed as needed)")


def _realm(run: _Run) -> None:
    realm, admin = run.options.realm, run.admin
    if realm == ADMIN_REALM:
        run.progress.say(f"{realm!r} (the admin's own realm, always there)")
        return
    found = admin.call("GET", "")
    if found.status_code == 200:
        run.progress.say(f"{realm!r} exists; unchanged")
        return
    admin.expect(found, 404)
    created = admin.http.post(
        f"{admin.base}/admin/realms",
        headers=admin.auth_header(),
        json={"realm": realm, "enabled": True},
    )
    admin.expect(created, 201)
    run.progress.say(f"created {realm!r}")


def _new_scope(run: _Run) -> None:
    options = run.options
    body = {
        "name": options.scope,
        "protocol": "openid-connect",
        "attributes": {"include.in.token.scope": "true", "display.on.consent.screen": "true"},
        "protocolMappers": _mappers(options),
    }
    created = run.admin.expect(run.admin.call("POST", "/client-scopes", json=body), 201)
    run.scope_id = _created_id(created)
    run.progress.say(
        f"created {options.scope!r} ({run.scope_id}) with the audience and group mappers"
    )


def _complete_scope(run: _Run, scope: dict[str, Any]) -> None:
    """Add the mappers an existing scope lacks; refuse one whose audience differs."""
    options, admin = run.options, run.admin
    run.scope_id = scope["id"]
    existing = {m.get("name"): m for m in scope.get("protocolMappers", [])}
    added = []
    for mapper in _mappers(options):
        current = existing.get(mapper["name"])
        if current is None:
            admin.expect(
                admin.call(
                    "POST", f"/client-scopes/{run.scope_id}/protocol-mappers/models", json=mapper
                ),
                201,
            )
            added.append(mapper["name"])
        elif (
            current.get("config", {}).get("included.custom.audience", options.resource)
            != options.resource
        ):
            raise run.progress.fail(
                f"client scope {options.scope!r} already has mapper {mapper['name']!r} "
                f"with audience {current['config']['included.custom.audience']!r}, not "
                f"{options.resource!r}; remove that mapper or pass the same --resource"
            )
    run.progress.say(
        f"{options.scope!r} exists ({run.scope_id})"
        + (f"; added mappers {added}" if added else "; unchanged")
    )


def _client_scope(run: _Run) -> None:
    scope = next((s for s in run.get("/client-scopes") if s.get("name") == run.options.scope), None)
    if scope is None:
        _new_scope(run)
    else:
        _complete_scope(run, scope)


def _default_scope(run: _Run) -> None:
    scope = run.options.scope
    if any(d.get("id") == run.scope_id for d in run.get("/default-default-client-scopes")):
        run.progress.say(f"{scope!r} is already a default scope for all clients; unchanged")
        return
    run.admin.expect(run.admin.call("PUT", f"/default-default-client-scopes/{run.scope_id}"), 204)
    run.progress.say(f"{scope!r} is now a default scope for current and future clients")


def _group(run: _Run) -> None:
    name = run.options.group
    # A search also matches subgroups (returned as their top-level ancestor): keep only a
    # top-level group of exactly this name.
    found = run.get("/groups", search=name, exact="true")
    group = next((g for g in found if g.get("name") == name), None)
    if group is not None:
        run.group_id = group["id"]
        run.progress.say(f"{name!r} exists ({run.group_id}); unchanged")
        return
    created = run.admin.expect(run.admin.call("POST", "/groups", json={"name": name}), 201)
    run.group_id = _created_id(created)
    run.progress.say(f"created {name!r} ({run.group_id})")


def _new_user(run: _Run, username: str, email: str | None) -> str:
    if not run.options.user_password:
        raise run.progress.fail(
            f"user {username!r} does not exist and no password was given; "
            "set KEYCLOAK_USER_PASSWORD"
        )
    body: dict[str, Any] = {
        "username": username,
        "enabled": True,
        "emailVerified": bool(email),
        "firstName": username.title(),
        "lastName": "User",
        "credentials": [
            {"type": "password", "value": run.options.user_password, "temporary": False}
        ],
    }
    if email:
        body["email"] = email
    created = run.admin.expect(run.admin.call("POST", "/users", json=body), 201)
    run.progress.say(f"created {username!r}")
    return _created_id(created)


def _users(run: _Run) -> None:
    for username, email in run.options.users:
        found = run.get("/users", username=username, exact="true")
        # Keycloak stores usernames in lower case and matches them case-insensitively.
        match = next((u for u in found if u.get("username", "").lower() == username.lower()), None)
        if match is None:
            run.user_ids[username] = _new_user(run, username, email)
            continue
        run.user_ids[username] = match["id"]
        run.progress.say(f"{username!r} exists; unchanged (its password is left as it is)")
    if not run.options.users:
        run.progress.say("no --user given; nothing to do")


def _membership(run: _Run) -> None:
    group = run.options.group
    for username, user_id in run.user_ids.items():
        if any(g.get("id") == run.group_id for g in run.get(f"/users/{user_id}/groups")):
            run.progress.say(f"{username!r} is already in {group!r}; unchanged")
            continue
        run.admin.expect(run.admin.call("PUT", f"/users/{user_id}/groups/{run.group_id}"), 204)
        run.progress.say(f"added {username!r} to {group!r}")


def _registration_policies(run: _Run) -> None:
    if not run.options.allow_anonymous_dcr:
        run.progress.say("left as they are (pass --allow-anonymous-dcr for local tests only)")
        return
    doomed = [
        c
        for c in run.get("/components", type=POLICY_TYPE)
        if c.get("providerId") == "trusted-hosts"
        or (c.get("providerId") == "allowed-client-templates" and c.get("subType") == "anonymous")
    ]
    for component in doomed:
        run.admin.expect(run.admin.call("DELETE", f"/components/{component['id']}"), 204, 404)
        run.progress.say(
            f"deleted {component.get('name')!r} ({component['providerId']}, "
            f"{component.get('subType')}) — local tests only"
        )
    if not doomed:
        run.progress.say("anonymous registration already allowed; unchanged")


def _allows(uris: list[str], callback: str) -> bool:
    """Whether Keycloak would accept `callback` against these redirect URIs (`*` suffix)."""
    return callback in uris or any(u.endswith("*") and callback.startswith(u[:-1]) for u in uris)


def _add_redirects(run: _Run, client: dict[str, Any], missing: list[str]) -> None:
    """Add `missing` to an existing client's redirect URIs (keeping the ones it has)."""
    uris = [*(client.get("redirectUris") or []), *missing]
    client_id = run.options.gateway_client_id
    run.admin.expect(
        run.admin.call("PUT", f"/clients/{client['id']}", json={**client, "redirectUris": uris}),
        204,
    )
    run.progress.record(f"added redirect URIs {missing} to client {client_id!r}")
    run.progress.say(f"public client {client_id!r} exists; added redirect URIs {missing}")


def _gateway_client(run: _Run) -> None:
    options = run.options
    if options.mode is not AuthorizationServerMode.BROKER:
        run.progress.say("not needed in Facade mode (MCP clients register through DCR)")
        return
    client_id = run.client_id = options.gateway_client_id
    callback = options.resource.rstrip("/") + "/oauth/callback"
    found = [c for c in run.get("/clients", clientId=client_id) if c.get("clientId") == client_id]
    if found:
        allowed = found[0].get("redirectUris") or []
        if not _allows(allowed, callback):
            raise run.progress.fail(
                f"client {client_id!r} exists but does not allow the "
                f"gateway callback {callback}; add it to its redirect URIs"
            )
        missing = [u for u in options.extra_redirect_uris if not _allows(allowed, u)]
        if missing:
            _add_redirects(run, found[0], missing)
            return
        run.progress.say(f"public client {client_id!r} exists; unchanged")
        return
    redirects = [callback, *(u for u in options.extra_redirect_uris if u != callback)]
    run.admin.expect(
        run.admin.call(
            "POST",
            "/clients",
            json={
                "clientId": client_id,
                "name": "MCP OAuth gateway (broker)",
                "publicClient": True,
                "standardFlowEnabled": True,
                "directAccessGrantsEnabled": False,
                "serviceAccountsEnabled": False,
                "redirectUris": redirects,
                "protocol": "openid-connect",
                "attributes": {"pkce.code.challenge.method": "S256"},
            },
        ),
        201,
    )
    run.progress.say(
        f"created public client {client_id!r} for the gateway, redirect URIs {redirects}"
        if len(redirects) > 1
        else f"created public client {client_id!r} for the gateway, callback {callback}"
    )


def _token_exchange(run: _Run) -> None:
    options = run.options.exchange
    if options is None:
        run.progress.say("not asked for (--token-exchange-client)")
        return
    run.exchange = keycloak_exchange.provision(run.admin, options, run.scope_id, run.progress)


def _discovery(run: _Run) -> None:
    realm = run.options.realm
    response = run.http.get(f"{run.admin.base}/realms/{realm}/.well-known/openid-configuration")
    if response.status_code != 200:
        raise run.progress.fail(f"GET discovery answered {describe(response)}")
    document = response.json()
    issuer, jwks_uri = document.get("issuer"), document.get("jwks_uri")
    if not isinstance(issuer, str) or not isinstance(jwks_uri, str):
        raise run.progress.fail("the discovery document has no issuer or jwks_uri")
    run.issuer, run.jwks_path = issuer, httpx.URL(jwks_uri).path
    run.progress.say(f"issuer {shown_url(run.issuer)}, JWKS path {run.jwks_path}")


_STEPS: tuple[Step[_Run], ...] = (
    Step("admin token", _admin_token),
    Step("realm", _realm),
    Step("client scope", _client_scope),
    Step("default scope", _default_scope),
    Step("group", _group),
    Step("users", _users),
    Step("membership", _membership),
    Step("registration policies", _registration_policies),
    Step("gateway client", _gateway_client),
    Step("token exchange", _token_exchange),
    Step("discovery", _discovery),
)
STEPS = names(_STEPS)


def provision(options: KeycloakOptions, http: httpx.Client, progress: Progress) -> GatewayValues:
    """Run spec 4.2 in order, idempotently; returns what the gateway needs."""
    run = _Run(KeycloakAdmin(http, options, progress), options, progress, http)
    run_steps(_STEPS, run, progress)
    return GatewayValues(
        provider=ProviderKind.KEYCLOAK,
        idp_url=run.admin.base,
        issuer=run.issuer,
        jwks_path=run.jwks_path,
        audiences=(options.resource,),
        client_id=run.client_id,
        resource=options.resource,
        backend=options.backend,
        group=options.group,
        mode=options.mode,
        exchange=exchange.for_policy(run.exchange),
    )


__all__ = ["STEPS", "KeycloakOptions", "StepError", "provision"]
