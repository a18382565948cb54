"""Third-party authorization servers for the tests of users' own sign-in to MCP servers that
enforce their own OAuth, apart from every route's identity provider: npm `oidc-provider`
(tests/node/upstream_as.mjs, a process of its own) and real Keycloak (a realm of its own in the
session's Keycloak). Both behind one interface (`AuthServer`), so that tests can swap them.

Each has a confidential client and a public client (PKCE) whose redirect URIs are given when it
starts, users alice and bob, refresh tokens rotated on every use (the used one refused after),
RFC 7009 revocation, RFC 7662 introspection, RFC 9207 `iss` in authorization responses, access
tokens whose `aud` is the MCP server's URL, and a login form and a consent page."""

from __future__ import annotations

import json
import secrets
from abc import ABC, abstractmethod
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any

import httpx

from connect_flow import Login
from support import NODE_DIR, Process, free_port, node, wait_for_port

# carol signs in nowhere else: a provider that remembers consent (Keycloak) still asks her.
USERS = {"alice": "alice-upstream-pw", "bob": "bob-upstream-pw", "carol": "carol-upstream-pw"}
SCOPES = ("mcp:read", "mcp:write")
# What a Keycloak AS records (its default list leaves refreshes out).
KEYCLOAK_EVENTS = (
    "LOGIN",
    "LOGIN_ERROR",
    "CODE_TO_TOKEN",
    "CODE_TO_TOKEN_ERROR",
    "REFRESH_TOKEN",
    "REFRESH_TOKEN_ERROR",
    "REVOKE_GRANT",
    "LOGOUT",
)


@dataclass(frozen=True)
class OAuthClient:
    """A client registered at an upstream AS (`client_secret` None: a public client)."""

    client_id: str
    client_secret: str | None = None
    auth_method: str = "client_secret_basic"  # or client_secret_post; "none" when public

    @property
    def public(self) -> bool:
        return self.client_secret is None


@dataclass
class AuthServer(ABC):
    """An upstream authorization server, running."""

    kind: str
    issuer: str
    confidential: OAuthClient
    public: OAuthClient
    resource_server: OAuthClient  # what the MCP server introspects with
    redirect_uris: tuple[str, ...]
    access_token_ttl: int  # seconds, as `set_access_token_ttl` last set it
    scopes: tuple[str, ...] = SCOPES
    users: dict[str, str] = field(default_factory=lambda: dict(USERS))

    @cached_property
    def metadata(self) -> dict[str, Any]:
        """Its OpenID discovery document."""
        answer = httpx.get(f"{self.issuer}/.well-known/openid-configuration", timeout=30)
        assert answer.status_code == 200, answer.text
        document: dict[str, Any] = answer.json()
        return document

    def endpoint(self, name: str) -> str:
        """`<name>_endpoint` (or `jwks_uri` for "jwks") from its metadata."""
        key = "jwks_uri" if name == "jwks" else f"{name}_endpoint"
        value: str = self.metadata[key]
        return value

    def login(self, user: str, password: str | None = None) -> Login:
        """What `user` types on its login form (the right password unless given another)."""
        return Login(user, self.users[user] if password is None else password, self.origin)

    @property
    def origin(self) -> str:
        split = httpx.URL(self.issuer)
        return f"{split.scheme}://{split.netloc.decode()}"

    @abstractmethod
    def subject(self, user: str) -> str:
        """The `sub` of `user`'s tokens."""

    @abstractmethod
    def set_access_token_ttl(self, seconds: int) -> None:
        """Access tokens issued from now on live `seconds` (refreshes included)."""

    @abstractmethod
    def revoke_user(self, user: str) -> None:
        """Every grant of `user` ends at the AS, as when the user or an operator revokes access
        there: refresh tokens are refused, and introspection says the access tokens are not
        active (self-contained JWTs stay valid until they expire)."""

    @abstractmethod
    def refreshes(self) -> list[dict[str, Any]]:
        """Every refresh_token grant the AS answered, oldest first: {"ok", "client_id"}."""


@dataclass
class OidcProviderAS(AuthServer):
    """tests/node/upstream_as.mjs, a process of its own (stopped by `oidc_provider_as`)."""

    admin_token: str = ""
    process: Process | None = None
    token_format: str = "jwt"

    def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        headers = {"Authorization": f"Bearer {self.admin_token}"}
        answer = httpx.request(
            method, f"{self.origin}/admin{path}", headers=headers, timeout=30, **kwargs
        )
        assert answer.status_code == 200, answer.text
        return answer

    def subject(self, user: str) -> str:
        return user

    def set_access_token_ttl(self, seconds: int) -> None:
        self.admin("POST", "/ttl", json={"seconds": seconds})
        self.access_token_ttl = seconds

    def revoke_user(self, user: str) -> None:
        self.admin("POST", "/revoke", json={"sub": user})

    def events(self) -> list[dict[str, Any]]:
        """What happened at the AS, oldest first (token grants, consumed refresh tokens…)."""
        found: list[dict[str, Any]] = self.admin("GET", "/events").json()
        return found

    def grants(self) -> list[dict[str, Any]]:
        """The live grants: {"grant", "accountId", "clientId"}."""
        found: list[dict[str, Any]] = self.admin("GET", "/grants").json()
        return found

    def refreshes(self) -> list[dict[str, Any]]:
        return [
            {"ok": e["status"] == 200, "client_id": e.get("client_id"), "error": e.get("error")}
            for e in self.events()
            if e["event"] == "token" and e.get("grant_type") == "refresh_token"
        ]


@contextmanager
def oidc_provider_as(
    logs: Path,
    directory: Path,
    resource: str,
    redirect_uris: Sequence[str],
    token_format: str = "jwt",
    access_token_ttl: int = 3600,
    issuer_path: str = "",
    name: str = "upstream-as",
    confidential_auth: str = "client_secret_basic",
) -> Iterator[OidcProviderAS]:
    """npm oidc-provider as the upstream AS of the MCP server at `resource`: tokens for it are
    `token_format` ("jwt": aud = resource; "opaque": to introspect)."""
    port = free_port()
    server = OidcProviderAS(
        kind="oidc-provider",
        issuer=f"http://127.0.0.1:{port}{issuer_path}",
        confidential=OAuthClient(
            "gateway-confidential", secrets.token_urlsafe(24), confidential_auth
        ),
        public=OAuthClient("gateway-public", auth_method="none"),
        resource_server=OAuthClient("upstream-mcp-server", secrets.token_urlsafe(24)),
        redirect_uris=tuple(redirect_uris),
        access_token_ttl=access_token_ttl,
        admin_token=secrets.token_urlsafe(24),
        token_format=token_format,
    )
    config = {
        "port": port,
        "issuerPath": issuer_path,
        "accessTokenTtl": server.access_token_ttl,
        "adminToken": server.admin_token,
        "resources": {resource: {"scope": " ".join(server.scopes), "format": token_format}},
        "users": server.users,
        "clients": [
            {
                "client_id": server.confidential.client_id,
                "client_secret": server.confidential.client_secret,
                "auth_method": server.confidential.auth_method,
                "redirect_uris": list(redirect_uris),
            },
            {"client_id": server.public.client_id, "redirect_uris": list(redirect_uris)},
            {
                "client_id": server.resource_server.client_id,
                "client_secret": server.resource_server.client_secret,
                "introspection_only": True,
            },
        ],
    }
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.json"
    path.write_text(json.dumps(config))
    server.process = Process(
        name, [node(), str(NODE_DIR / "upstream_as.mjs")], logs, env={"CONFIG": str(path)}
    )
    try:
        wait_for_port(port, server.process)
        yield server
    finally:
        server.process.stop()


@dataclass
class KeycloakAS(AuthServer):
    """A realm of the session's real Keycloak (`keycloak_support.RealKeycloak`)."""

    keycloak: Any = None
    realm: str = "upstream"

    def admin(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        return self.keycloak.admin(method, path, self.realm, **kwargs)  # type: ignore[no-any-return]

    def user_id(self, user: str) -> str:
        found = self.admin("GET", "/users", params={"username": user, "exact": "true"})
        assert found.status_code == 200, found.text
        return str(found.json()[0]["id"])

    def subject(self, user: str) -> str:
        return self.user_id(user)

    def set_access_token_ttl(self, seconds: int) -> None:
        done = self.admin("PUT", "", json={"accessTokenLifespan": seconds})
        assert done.status_code == 204, done.text
        self.access_token_ttl = seconds

    def revoke_user(self, user: str) -> None:
        user_id = self.user_id(user)
        done = self.admin("POST", f"/users/{user_id}/logout")
        assert done.status_code == 204, done.text
        consents = self.admin("GET", f"/users/{user_id}/consents")
        for consent in consents.json():
            removed = self.admin("DELETE", f"/users/{user_id}/consents/{consent['clientId']}")
            assert removed.status_code == 204, removed.text

    def refreshes(self) -> list[dict[str, Any]]:
        found = self.admin(
            "GET", "/events", params={"type": ["REFRESH_TOKEN", "REFRESH_TOKEN_ERROR"]}
        )
        assert found.status_code == 200, found.text
        events = sorted(found.json(), key=lambda e: e["time"])  # Keycloak lists newest first
        return [
            {
                "ok": e["type"] == "REFRESH_TOKEN",
                "client_id": e.get("clientId"),
                "error": e.get("error"),
            }
            for e in events
        ]


def _audience_scope(name: str, resource: str | None, server_client: str) -> dict[str, Any]:
    """A client scope in the token's `scope`; with `resource`, it adds that audience and the MCP
    server's own client (Keycloak 26.6.2 and later introspect a token only for a client in its
    `aud`)."""
    claims = {
        "access.token.claim": "true",
        "id.token.claim": "false",
        "introspection.token.claim": "true",
    }
    mappers = []
    if resource is not None:
        audiences = (
            ("included.custom.audience", resource),
            ("included.client.audience", server_client),
        )
        mappers = [
            {
                "name": f"audience-{index}",
                "protocol": "openid-connect",
                "protocolMapper": "oidc-audience-mapper",
                "config": {key: value, **claims},
            }
            for index, (key, value) in enumerate(audiences)
        ]
    return {
        "name": name,
        "protocol": "openid-connect",
        "attributes": {"include.in.token.scope": "true", "display.on.consent.screen": "true"},
        "protocolMappers": mappers,
    }


def _keycloak_client(client: OAuthClient, redirects: Sequence[str], consent: bool) -> dict:
    confidential = not client.public
    return {
        "clientId": client.client_id,
        "enabled": True,
        "publicClient": not confidential,
        **({"secret": client.client_secret} if confidential else {}),
        "standardFlowEnabled": bool(redirects),
        "directAccessGrantsEnabled": False,
        "redirectUris": list(redirects),
        "consentRequired": consent and bool(redirects),
        "attributes": {"pkce.code.challenge.method": "S256"} if redirects else {},
    }


@contextmanager
def keycloak_as(
    keycloak: Any,
    resource: str,
    redirect_uris: Sequence[str],
    realm: str = "upstream",
    access_token_ttl: int = 300,
    consent: bool = True,
) -> Iterator[KeycloakAS]:
    """A realm `realm` of the session's real Keycloak as the upstream AS of the MCP server at
    `resource` (deleted at the end): its scopes are default client scopes, `mcp:read` adding
    `resource` to the access token's `aud`; refresh tokens rotated (revokeRefreshToken,
    reuse 0); events on (refreshes); consent asked when `consent`."""
    server = KeycloakAS(
        kind="keycloak",
        issuer=keycloak.issuer(realm),
        confidential=OAuthClient("gateway-confidential", secrets.token_urlsafe(24)),
        public=OAuthClient("gateway-public", auth_method="none"),
        resource_server=OAuthClient("upstream-mcp-server", secrets.token_urlsafe(24)),
        redirect_uris=tuple(redirect_uris),
        access_token_ttl=access_token_ttl,
        keycloak=keycloak,
        realm=realm,
    )
    keycloak.new_realm(realm)
    try:
        settings = {
            "revokeRefreshToken": True,
            "refreshTokenMaxReuse": 0,
            "accessTokenLifespan": server.access_token_ttl,
            "eventsEnabled": True,
            "enabledEventTypes": list(KEYCLOAK_EVENTS),
        }
        done = server.admin("PUT", "", json=settings)
        assert done.status_code == 204, done.text
        for index, scope in enumerate(server.scopes):
            body = _audience_scope(
                scope, resource if index == 0 else None, server.resource_server.client_id
            )
            made = server.admin("POST", "/client-scopes", json=body)
            assert made.status_code == 201, made.text
            scope_id = made.headers["location"].rsplit("/", 1)[-1]
            added = server.admin("PUT", f"/default-default-client-scopes/{scope_id}")
            assert added.status_code == 204, added.text
        for client, redirects in (
            (server.confidential, redirect_uris),
            (server.public, redirect_uris),
            (server.resource_server, ()),
        ):
            made = server.admin(
                "POST", "/clients", json=_keycloak_client(client, redirects, consent)
            )
            assert made.status_code == 201, made.text
        for user, password in server.users.items():
            keycloak.add_user(user, realm, password=password)
        yield server
    finally:
        gone = keycloak.admin("DELETE", "", realm)
        assert gone.status_code == 204, gone.text
        keycloak.realms.discard(realm)
