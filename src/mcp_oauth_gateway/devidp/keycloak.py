"""Keycloak flavour of the dev identity provider: the `master` realm's OpenID endpoints, Dynamic
Client Registration guarded by the default registration policies, and the admin REST subset the
provisioning tool uses, answering with Keycloak's status codes and bodies (201 + `Location`,
409 `errorMessage`, 401 `HTTP 401 Unauthorized` for expired 60 s admin tokens).

This module wires the realm together: what a fresh realm holds (`keycloak_seed`), its users
(`keycloak_users`), clients (`keycloak_clients`) and client scopes (`keycloak_client_scopes`),
the token contents (`keycloak_tokens`), the OpenID endpoints (`keycloak_discovery`,
`keycloak_authorize`, `keycloak_userinfo`, `keycloak_revoke`, the token endpoint behind
`keycloak_cors`), registration (`keycloak_registration`), the realm's settings and sessions
(`keycloak_realm`) and the admin API (`keycloak_admin`)."""

from __future__ import annotations

from typing import Any

from joserfc.jwk import OctKey, RSAKey
from starlette.requests import Request
from starlette.routing import Route

from ..oauth_scopes import scope_tokens
from ..provider_kinds import ProviderKind
from . import keycloak_exchange, keycloak_tokens
from .keycloak_admin import Admin
from .keycloak_authorize import KeycloakAuthorize
from .keycloak_client_scopes import ClientScopes
from .keycloak_clients import client_record, oauth_client
from .keycloak_cors import TokenEndpointCors, any_origin
from .keycloak_discovery import Discovery
from .keycloak_paths import DISCOVERY, OIDC, REALM, REALM_ID, REALM_PATH, REGISTRATION
from .keycloak_realm import Realm
from .keycloak_registration import Registration
from .keycloak_revoke import Revocation
from .keycloak_seed import seed
from .keycloak_userinfo import Userinfo
from .keycloak_users import Users
from .oidc import OAuthClient, OpenIdProvider, Subject
from .settings import DevIdpSettings
from .store import Record, Store


class KeycloakFlavour:
    """Realm state, the admin API and the token contents of a Keycloak `master` realm."""

    kind = ProviderKind.KEYCLOAK
    interaction_prefix = f"{REALM_PATH}/login-actions"
    grant_not_allowed_error = (400, "unauthorized_client")
    # TokenManager.parseScopeParameter: `scope.split(" ")`, U+0020 alone.
    scope_tokens = staticmethod(scope_tokens)

    def __init__(self, store: Store, settings: DevIdpSettings):
        self.store = store
        self.settings = settings
        self.provider = OpenIdProvider(self, keycloak_tokens.KEYCLOAK_ERRORS)
        self.realm = Realm(store, self.provider, REALM_ID, settings.access_token_ttl)
        self.client_scopes = ClientScopes(store)
        self.registration = Registration(store, self.client_scopes, REALM_PATH)
        self.users = Users(store)
        seed(store, settings)
        self._key = RSAKey.import_key(self.store.value("kc_key"))
        self._hmac = OctKey.import_key(self.store.value("kc_hmac"))  # signs refresh tokens
        self.token_cors = TokenEndpointCors(self.provider, self._client_record)
        self._authorize = KeycloakAuthorize(
            self.provider.authorize, self.find_client, self._scope_names, REALM_PATH
        )
        self._userinfo = Userinfo(REALM, self._valid_claims, self._client_record)
        self._revocation = Revocation(self.provider, self.realm, self._key)
        self._discovery = Discovery(store, self._key)
        self._keycloak_ways(self.provider)
        self._admin = Admin(
            store,
            self.provider,
            self.realm,
            self._key,
            self.users,
            self.client_scopes,
            self.registration,
        )

    def _keycloak_ways(self, provider: OpenIdProvider) -> None:
        """What Keycloak does its own way in the shared OpenID provider."""
        provider.extras = keycloak_tokens.response_members(
            self.realm.not_before, provider.refresh_tokens, self._hmac
        )
        provider.denied_description = None
        provider.session_state = True
        provider.rotates_refresh_tokens = self.realm.revokes_refresh_tokens
        provider.refresh_scope_check = self._authorize.check_refresh_scope

    def _client_record(self, client_id: str) -> Record | None:
        return client_record(self.store, client_id)

    def _scope_names(self, client_id: str) -> set[str]:
        record, scopes = self._client_record(client_id), self.client_scopes
        return set(scopes.names([*scopes.default_ids(record), *scopes.optional_ids(record)]))

    def _valid_claims(self, request: Request) -> dict[str, Any] | None:
        """The claims of the request's valid access token of a session still open."""
        claims = self.provider.bearer_claims(request, self._key)
        return None if claims is None or self.realm.refused(claims) else claims

    # --- Flavour protocol (token contents) ------------------------------------------------

    def issuer(self, base: str, client: OAuthClient) -> str:
        """`<base>/realms/master` (no trailing slash)."""
        return f"{base}{REALM_PATH}"

    def find_client(self, client_id: str) -> OAuthClient | None:
        """A client of the realm (admin-cli or dynamically registered)."""
        record = self._client_record(client_id)
        return None if record is None else oauth_client(record)

    def authenticate(self, username: str, password: str) -> Subject | None:
        """The enabled user with these credentials."""
        return self.users.authenticate(username, password)

    def subject_by_id(self, subject_id: str) -> Subject | None:
        """Reload a user."""
        return self.users.subject_by_id(subject_id)

    def service_subject(self, client: OAuthClient) -> Subject:
        """The client's service-account user (created on first use, as Keycloak does)."""
        return self.users.service_subject(client)

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
        value = (self._client_record(client_id) or {}).get("attributes", {}).get(name)
        return value if isinstance(value, str) else None

    def token_exchange(
        self, base: str, client: OAuthClient, form: dict[str, str], audiences: list[str]
    ) -> dict[str, Any]:
        """Standard token exchange (V2), as Keycloak ≥ 26.2 does it."""
        return keycloak_exchange.exchange(self, base, client, form, audiences)

    def access_token_ttl(self, client: OAuthClient) -> int:
        """The master realm's `accessTokenLifespan` (60 s unless set through the admin API)."""
        return self.realm.access_token_lifespan()

    def token_claims(
        self, client: OAuthClient, subject: Subject, scopes: list[str], resource: str | None
    ) -> dict[str, Any]:
        """Claims from the client scopes the request applies (keycloak_tokens)."""
        record = self._client_record(client.client_id)
        applied = self.client_scopes.applied(record, scopes)
        user = self.users.find(id=subject.id) or {}
        return keycloak_tokens.access_claims(client, record, subject, user, applied, scopes)

    def id_token_claims(
        self, client: OAuthClient, access: dict[str, Any], standard: dict[str, Any]
    ) -> dict[str, Any]:
        """Keycloak's ID token (keycloak_tokens)."""
        return keycloak_tokens.id_claims(access, standard)

    # --- routes ---------------------------------------------------------------------------

    def preflight_methods(self) -> dict[str, str]:
        """`Access-Control-Allow-Methods` of each endpoint's preflight answer."""
        return {
            f"{OIDC}/token": "POST, OPTIONS",
            REGISTRATION: "DELETE, POST, GET, OPTIONS, PUT",
            f"{OIDC}/userinfo": "GET, HEAD, OPTIONS",
            f"{OIDC}/revoke": "POST, OPTIONS",
            DISCOVERY: "GET",
            f"{OIDC}/certs": "GET",
        }

    def routes(self) -> list[Route]:
        """The Starlette routes of this flavour."""
        provider, admin = self.provider, self._admin.admin
        return [
            Route(DISCOVERY, any_origin(self._discovery.discovery)),
            Route(f"{OIDC}/certs", any_origin(self._discovery.jwks)),
            Route(f"{OIDC}/auth", self._authorize.authorize),
            Route(f"{OIDC}/token", self.token_cors.token, methods=["POST"]),
            Route(f"{OIDC}/userinfo", self._userinfo.userinfo, methods=["GET", "POST"]),
            Route(f"{OIDC}/revoke", self._revocation.revoke, methods=["POST"]),
            Route(REGISTRATION, self.registration.register, methods=["POST"]),
            Route(
                f"{self.interaction_prefix}/{{uid}}", provider.interaction, methods=["GET", "POST"]
            ),
            Route("/admin/realms/{realm}", admin, methods=["GET", "PUT"]),
            Route(
                "/admin/realms/{realm}/{rest:path}", admin, methods=["GET", "POST", "PUT", "DELETE"]
            ),
        ]
