"""authentik flavour of the dev identity provider: API v3 subset (DRF conventions: pagination
envelope, 400 field errors, 403 for bad tokens), the start-up phases of a fresh install (503
while migrations run, empty lookups until the worker has applied its blueprints), and per-
application OpenID endpoints with `aud` = client id and `groups` from the `profile` mapping.

This module wires the flavour together over one shared `AuthentikState`: the start-up phases
(`authentik_startup`), the API (`authentik_api`, with the views of `authentik_flows`,
`authentik_providers`, `authentik_applications` and `authentik_core`), the token contents
(`authentik_tokens`), the OpenID endpoints (`authentik_endpoints`), their CORS
(`authentik_cors`) and token exchange (`authentik_exchange`)."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from joserfc.jwk import RSAKey
from starlette.routing import Route

from ..oauth_scopes import whitespace_tokens
from ..provider_kinds import ProviderKind
from . import authentik_exchange, authentik_tokens
from .authentik_api import AuthentikApi
from .authentik_cors import AuthentikCors
from .authentik_drf import API
from .authentik_endpoints import OpenIdEndpoints
from .authentik_startup import Startup
from .authentik_state import AuthentikState
from .oidc import OAuthClient, OpenIdProvider, Subject
from .settings import DevIdpSettings
from .store import Store, check_password


class AuthentikFlavour:
    """authentik's objects, its API subset and its token contents."""

    kind = ProviderKind.AUTHENTIK
    interaction_prefix = "/if/flow/authorize"
    grant_not_allowed_error = (400, "invalid_grant")
    # authentik's authorize and token views split `scope` on any whitespace (`str.split()`):
    # imitated, so the gateway is tested against what authentik really grants.
    scope_tokens = staticmethod(whitespace_tokens)

    def __init__(
        self, store: Store, settings: DevIdpSettings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store = store
        self.settings = settings
        self.state = AuthentikState(store, settings, clock)
        self.provider = OpenIdProvider(self)
        self.startup = Startup(self.state)
        self.endpoints = OpenIdEndpoints(self.state, self.provider)
        self.api = AuthentikApi(self.state, self.startup.reconcile)
        self.startup.seed_users()

    # --- start-up phases ------------------------------------------------------------------

    @property
    def clock(self) -> Callable[[], float]:
        """What start-up phases and cache expiry read (tests replace it to skip time)."""
        return self.state.clock

    @clock.setter
    def clock(self, clock: Callable[[], float]) -> None:
        self.state.clock = clock

    @property
    def started(self) -> float:
        """When the start-up phases began, on `clock`."""
        return self.state.started

    @started.setter
    def started(self, started: float) -> None:
        self.state.started = started

    def migrating(self) -> bool:
        """Whether the server still runs its database migrations (answers 503)."""
        return self.startup.migrating()

    # --- token exchange -------------------------------------------------------------------

    def token_exchange(
        self, base: str, client: OAuthClient, form: dict[str, str], audiences: list[str]
    ) -> dict[str, Any]:
        """Token exchange as authentik 2026.8 does it."""
        return authentik_exchange.exchange(self, base, client, form, audiences)

    def provider_record(self, client: OAuthClient) -> dict[str, Any]:
        """The stored provider behind a client."""
        provider = self.state.find("ak_providers", pk=client.context["provider"])
        assert provider is not None
        return provider

    def clients_trusted_by(self, client: OAuthClient) -> list[OAuthClient]:
        """The providers in a provider's `jwt_federation_providers`, bound to applications."""
        out = []
        for pk in self.provider_record(client).get("jwt_federation_providers", []):
            trusted = self.state.find("ak_providers", pk=pk)
            found = self.find_client(trusted["client_id"]) if trusted else None
            if found is not None:
                out.append(found)
        return out

    def subject_by_token_sub(self, client: OAuthClient, sub: str) -> Subject | None:
        """The user whose `sub` at this provider (by its sub mode) is `sub`."""
        for user in self.store.collection("ak_users"):
            subject = self.state.subject(user)
            if self.token_claims(client, subject, [], None)["sub"] == sub:
                return subject
        return None

    # --- Flavour protocol -----------------------------------------------------------------

    def issuer(self, base: str, client: OAuthClient) -> str:
        """`<base>/application/o/<slug>/` (per-provider issuer, trailing slash)."""
        return f"{base}/application/o/{client.context['slug']}/"

    def find_client(self, client_id: str) -> OAuthClient | None:
        """The provider with this client id, if an application uses it."""
        return authentik_tokens.oauth_client(self.state, client_id)

    def authenticate(self, username: str, password: str) -> Subject | None:
        """An active user whose password matches."""
        user = self.state.find("ak_users", username=username)
        if user is None or not user.get("is_active", True):
            return None
        return self.state.subject(user) if check_password(password, user.get("password")) else None

    def subject_by_id(self, subject_id: str) -> Subject | None:
        """Reload a user by pk."""
        user = next(
            (u for u in self.store.collection("ak_users") if str(u["pk"]) == subject_id), None
        )
        return self.state.subject(user) if user else None

    def service_subject(self, client: OAuthClient) -> Subject:
        """`ak-<provider name>-client_credentials`, upserted as authentik does."""
        return self.state.subject(authentik_tokens.service_user(self.state, client))

    def signing_key(self, client: OAuthClient) -> RSAKey:
        """The provider's signing key pair."""
        provider = self.state.find("ak_providers", pk=client.context["provider"])
        key = self.state.key_for(provider["signing_key"] if provider else None)
        if key is None:
            # authentik would sign HS256 with the client secret; the dev IdP refuses instead.
            raise RuntimeError("the provider has no signing key; set signing_key")
        return key

    def access_token_ttl(self, client: OAuthClient) -> int:
        """The provider's access-token validity."""
        return self.settings.access_token_ttl

    def token_claims(
        self, client: OAuthClient, subject: Subject, scopes: list[str], resource: str | None
    ) -> dict[str, Any]:
        """`aud` = client id, `sub` by `sub_mode`, scope claims from the provider's mappings."""
        return authentik_tokens.access_claims(self.state, client, subject, scopes)

    def id_token_claims(
        self, client: OAuthClient, access: dict[str, Any], standard: dict[str, Any]
    ) -> dict[str, Any]:
        """The access token's claims without `azp`, `uid` and `jti` (authentik_tokens)."""
        return authentik_tokens.id_claims(access, standard)

    # --- routes ---------------------------------------------------------------------------

    def routes(self) -> list[Route]:
        """The Starlette routes of this flavour."""
        provider, endpoints = self.provider, self.endpoints
        cors = AuthentikCors(self.store, endpoints.bearer_claims)
        discovery = cors.discovery(endpoints.discovery)
        return [
            Route("/application/o/{slug}/.well-known/openid-configuration", discovery),
            Route("/application/o/{slug}/jwks/", cors.jwks(endpoints.jwks)),
            Route("/application/o/authorize/", provider.authorize),
            Route(
                "/application/o/token/", cors.token(endpoints.token), methods=["POST", "OPTIONS"]
            ),
            Route(
                "/application/o/userinfo/",
                cors.userinfo(endpoints.userinfo),
                methods=["GET", "POST", "OPTIONS"],
            ),
            Route(
                f"{self.interaction_prefix}/{{uid}}", provider.interaction, methods=["GET", "POST"]
            ),
            Route(API + "/{rest:path}", self.api.api, methods=["GET", "POST", "PATCH"]),
        ]
