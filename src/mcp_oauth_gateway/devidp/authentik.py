"""authentik flavour of the dev identity provider: API v3 subset (DRF conventions: pagination
envelope, 400 field errors, 403 for bad tokens), the start-up phases of a fresh install (503
while migrations run, empty lookups until the worker has applied its blueprints), and per-
application OpenID endpoints with `aud` = client id and `groups` from the `profile` mapping.

The application list behaves as authentik's does (`ApplicationViewSet.list`, 2025.12 to 2026.5):
each user's result page is cached for 24 h under the user and page number only, so the filters of
a later request are ignored; an empty page is never served from the cache; `superuser_full_list=
true` and a non-empty `search` bypass it; creating an application and saving a user or a group
clear it for everyone (`post_save` signals). Adding a user to a group is not a save; nor, here,
is a sign-in (authentik saves the user's `last_login` then; the dev IdP keeps the cache)."""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
import string
import time
import uuid
from collections.abc import Awaitable, Callable
from datetime import UTC, datetime
from typing import Any

import orjson
from joserfc.jwk import RSAKey
from starlette.requests import Request
from starlette.responses import Response
from starlette.routing import Route

from ..oauth_scopes import whitespace_tokens
from . import authentik_exchange
from .authentik_cors import AuthentikCors
from .oidc import OAuthClient, OpenIdProvider, Subject, json_response
from .settings import DevIdpSettings
from .store import Record, Store, check_password, hash_password, new_id, new_signing_key

API = "/api/v3"
# An API view: the request and the path's captured parts (a pk or slug) to a response.
Handler = Callable[..., Awaitable[Response]]
# authentik caches each user's application list page for a day (`timeout=86400`).
APP_LIST_CACHE_SECONDS = 86400.0
APP_SEARCH_FIELDS = (
    "name",
    "slug",
    "meta_launch_url",
    "meta_description",
    "meta_publisher",
    "group",
)
RESERVED_SLUGS = frozenset({"authorize", "token", "device", "userinfo", "introspect", "revoke"})
GRANT_TYPES = frozenset(
    {
        "authorization_code",
        "implicit",
        "hybrid",
        "refresh_token",
        "client_credentials",
        "password",
        "urn:ietf:params:oauth:grant-type:device_code",
        authentik_exchange.GRANT,
    }
)
# Token exchange is off unless a provider lists it (authentik 2026.8).
DEFAULT_GRANT_TYPES = GRANT_TYPES - {authentik_exchange.GRANT}
SUB_MODES = frozenset(
    {"hashed_user_id", "user_id", "user_uuid", "user_username", "user_email", "user_upn"}
)
FLOWS = [  # slug, name, designation, authentication
    (
        "default-provider-authorization-implicit-consent",
        "Authorize Application",
        "authorization",
        "require_authenticated",
    ),
    (
        "default-provider-authorization-explicit-consent",
        "Authorize Application",
        "authorization",
        "require_authenticated",
    ),
    ("default-provider-invalidation-flow", "Logged out of application", "invalidation", "none"),
    ("default-invalidation-flow", "Default Invalidation Flow", "invalidation", "none"),
    ("default-authentication-flow", "Welcome to authentik!", "authentication", "none"),
]
SCOPES = [  # scope_name, managed suffix, name
    ("openid", "scope-openid", "authentik default OAuth Mapping: OpenID 'openid'"),
    ("email", "scope-email", "authentik default OAuth Mapping: OpenID 'email'"),
    ("profile", "scope-profile", "authentik default OAuth Mapping: OpenID 'profile'"),
    (
        "entitlements",
        "scope-entitlements",
        "authentik default OAuth Mapping: Application Entitlements",
    ),
    (
        "offline_access",
        "scope-offline_access",
        "authentik default OAuth Mapping: OpenID 'offline_access'",
    ),
    (
        "goauthentik.io/api",
        "scope-authentik_api",
        "authentik default OAuth Mapping: authentik API access",
    ),
]
# The OpenID endpoints, as paths under the server's base URL; `{slug}` is the application's.
DISCOVERY_ENDPOINTS = (
    ("authorization_endpoint", "/application/o/authorize/"),
    ("token_endpoint", "/application/o/token/"),
    ("userinfo_endpoint", "/application/o/userinfo/"),
    ("end_session_endpoint", "/application/o/{slug}/end-session/"),
    ("introspection_endpoint", "/application/o/introspect/"),
    ("revocation_endpoint", "/application/o/revoke/"),
    ("jwks_uri", "/application/o/{slug}/jwks/"),
)
# What every application advertises, in authentik's key order; `scopes_supported` is replaced by
# the provider's own (replacing an entry keeps its place in that order).
DISCOVERY_METADATA: dict[str, object] = {
    "response_types_supported": [
        "code",
        "id_token",
        "id_token token",
        "code token",
        "code id_token",
        "code id_token token",
    ],
    "response_modes_supported": ["query", "fragment", "form_post"],
    "grant_types_supported": [
        "authorization_code",
        "refresh_token",
        "implicit",
        "client_credentials",
        "password",
        "urn:ietf:params:oauth:grant-type:device_code",
    ],
    "subject_types_supported": ["public"],
    "id_token_signing_alg_values_supported": ["RS256"],
    "scopes_supported": ["openid"],
    "token_endpoint_auth_methods_supported": [
        "client_secret_post",
        "client_secret_basic",
    ],
    "code_challenge_methods_supported": ["plain", "S256"],
    "claims_supported": [
        "sub",
        "iss",
        "aud",
        "exp",
        "iat",
        "auth_time",
        "acr",
        "amr",
        "nonce",
        "email",
        "email_verified",
        "name",
        "given_name",
        "preferred_username",
        "nickname",
        "groups",
    ],
    "authorization_response_iss_parameter_supported": True,
}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _generate_id(length: int = 40) -> str:
    alphabet = string.ascii_letters + string.digits
    return "".join(secrets.choice(alphabet) for _ in range(length))


def _discovery_document(base: str, slug: str, scopes: list[str]) -> dict[str, object]:
    """The OpenID configuration of the application `slug` whose provider maps `scopes`."""
    endpoints = {name: base + path.format(slug=slug) for name, path in DISCOVERY_ENDPOINTS}
    return {
        "issuer": f"{base}/application/o/{slug}/",
        **endpoints,
        **DISCOVERY_METADATA,
        "scopes_supported": sorted({"openid", *scopes}),
    }


def page_of(request: Request) -> tuple[int, int] | None:
    """The requested page number and size (None when they are not numbers)."""
    try:
        page = max(1, int(request.query_params.get("page", "1")))
        size = min(100, max(1, int(request.query_params.get("page_size", "20"))))
    except ValueError:
        return None
    return page, size


def envelope(count: int, page: int, size: int, chunk: list[Record]) -> Response:
    """DRF's paginated envelope for one page of `count` objects (`next`/`previous` are 0 when
    absent)."""
    total_pages = max(1, -(-count // size))
    start = (page - 1) * size + 1 if chunk else 0
    return json_response(
        {
            "pagination": {
                "next": page + 1 if page < total_pages else 0,
                "previous": page - 1 if page > 1 else 0,
                "count": count,
                "current": page,
                "total_pages": total_pages,
                "start_index": start,
                "end_index": start + len(chunk) - 1 if chunk else 0,
            },
            "results": chunk,
            "autocomplete": {},
        }
    )


def paginated(results: list[Record], request: Request) -> Response:
    """One page of `results` in DRF's paginated envelope."""
    paging = page_of(request)
    if paging is None:
        return json_response({"detail": "Invalid page."}, 404)
    page, size = paging
    return envelope(len(results), page, size, results[(page - 1) * size : page * size])


class FieldErrors(Exception):
    """DRF validation errors: `{"field": ["message", …]}`."""

    def __init__(self, errors: dict[str, list[str]]):
        super().__init__(str(errors))
        self.errors = errors


class AuthentikFlavour:
    """authentik's objects, its API subset and its token contents."""

    name = "authentik"
    interaction_prefix = "/if/flow/authorize"
    grant_not_allowed_error = (400, "invalid_grant")
    # authentik's authorize and token views split `scope` on any whitespace (`str.split()`):
    # imitated, so the gateway is tested against what authentik really grants.
    scope_tokens = staticmethod(whitespace_tokens)

    def token_exchange(
        self, base: str, client: OAuthClient, form: dict[str, str], audiences: list[str]
    ) -> dict[str, Any]:
        """Token exchange as authentik 2026.8 does it."""
        return authentik_exchange.exchange(self, base, client, form, audiences)

    def provider_record(self, client: OAuthClient) -> dict[str, Any]:
        """The stored provider behind a client."""
        provider = self._find("ak_providers", pk=client.context["provider"])
        assert provider is not None
        return provider

    def clients_trusted_by(self, client: OAuthClient) -> list[OAuthClient]:
        """The providers in a provider's `jwt_federation_providers`, bound to applications."""
        out = []
        for pk in self.provider_record(client).get("jwt_federation_providers", []):
            trusted = self._find("ak_providers", pk=pk)
            found = self.find_client(trusted["client_id"]) if trusted else None
            if found is not None:
                out.append(found)
        return out

    def subject_by_token_sub(self, client: OAuthClient, sub: str) -> Subject | None:
        """The user whose `sub` at this provider (by its sub mode) is `sub`."""
        for user in self.store.collection("ak_users"):
            subject = self._subject(user)
            if self.token_claims(client, subject, [], None)["sub"] == sub:
                return subject
        return None

    def __init__(
        self, store: Store, settings: DevIdpSettings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.store = store
        self.settings = settings
        self.provider = OpenIdProvider(self)
        # Start-up phases and cache expiry read this clock (tests replace it to skip time).
        self.clock = clock
        self.started = clock()
        self._phases_begun = False
        # (user pk, page number) -> (expires at, application pks); in memory, as authentik's
        # cache is separate from the objects (a dev IdP restart empties it).
        self._app_lists: dict[tuple[int, int], tuple[float, list[str]]] = {}
        self._keys: dict[str, RSAKey] = {}
        self._routes = self._api_routes()
        self._seed_users()

    # --- start-up phases ------------------------------------------------------------------

    def _elapsed(self) -> float:
        return self.clock() - self.started

    def migrating(self) -> bool:
        """Whether the server still runs its database migrations (answers 503)."""
        if not self._phases_begun:
            # Timed from the first request that is not a liveness probe, not from process
            # start: a client that comes late (a busy machine) still meets every phase.
            self._phases_begun = True
            self.started = self.clock()
        return self._elapsed() < self.settings.migrations_seconds

    def _reconcile(self) -> None:
        """Create what the web process and the worker create, once their time has come."""
        worker = self._elapsed() - self.settings.migrations_seconds
        if worker < 0:
            return
        changed = False
        if not self.store.collection("ak_keypairs"):
            self.store.collection("ak_keypairs").append(
                {
                    "pk": new_id(),
                    "name": "authentik Self-signed Certificate",
                    "managed": None,
                    "jwk": new_signing_key("ak"),
                    "created": _now(),
                }
            )
            changed = True
        # The worker applies blueprints in two steps, so a client sees partial results.
        if worker >= self.settings.worker_seconds / 2:
            changed |= self._ensure_flows()
            changed |= self._ensure_mappings(SCOPES[:1])
        if worker >= self.settings.worker_seconds:
            changed |= self._ensure_mappings(SCOPES)
        if changed:
            self.store.save()

    def _ensure_flows(self) -> bool:
        flows = self.store.collection("ak_flows")
        if flows:
            return False
        for slug, name, designation, authentication in FLOWS:
            flows.append(
                {
                    "pk": new_id(),
                    "slug": slug,
                    "name": name,
                    "title": name,
                    "designation": designation,
                    "authentication": authentication,
                }
            )
        return True

    def _ensure_mappings(self, wanted: list[tuple[str, str, str]]) -> bool:
        mappings = self.store.collection("ak_mappings")
        present = {m["managed"] for m in mappings}
        changed = False
        for scope_name, suffix, name in wanted:
            managed = f"goauthentik.io/providers/oauth2/{suffix}"
            if managed not in present:
                mappings.append(
                    {
                        "pk": new_id(),
                        "managed": managed,
                        "name": name,
                        "scope_name": scope_name,
                        "expression": "return {}",
                        "description": "",
                    }
                )
                changed = True
        return changed

    def _seed_users(self) -> None:
        users = self.store.collection("ak_users")
        names = ["akadmin", *self.settings.seed_users]
        for username in names:
            if any(u["username"] == username for u in users):
                continue
            users.append(
                {
                    "pk": len(users) + 1,
                    "username": username,
                    "name": "authentik Default Admin"
                    if username == "akadmin"
                    else username.title(),
                    "email": f"{username}@example.com",
                    "uuid": new_id(),
                    "type": "internal",
                    "is_active": True,
                    "password": hash_password(self.settings.seed_password),
                    "date_joined": _now(),
                }
            )
        self.store.save()

    # --- the application list cache -------------------------------------------------------

    def _forget_application_lists(self) -> None:
        """What authentik's `post_save` handlers do when an application is created or a user,
        group or policy is saved: drop every user's cached application list pages."""
        self._app_lists.clear()

    def _cached_page(self, user_pk: int, page: int) -> list[str]:
        """The application pks cached for this user and page ([] when none or expired)."""
        expires, pks = self._app_lists.get((user_pk, page), (0.0, []))
        return pks if self.clock() < expires else []

    def _cache_page(self, user_pk: int, page: int, pks: list[str]) -> None:
        self._app_lists[(user_pk, page)] = (self.clock() + APP_LIST_CACHE_SECONDS, pks)

    # --- lookups --------------------------------------------------------------------------

    def _find(self, collection: str, **match: Any) -> Record | None:
        for item in self.store.collection(collection):
            if all(item.get(k) == v for k, v in match.items()):
                return item
        return None

    def _provider_by_client(self, client_id: str) -> Record | None:
        return self._find("ak_providers", client_id=client_id)

    def _application_of(self, provider: Record) -> Record | None:
        return self._find("ak_applications", provider=provider["pk"])

    def _key_for(self, keypair_pk: str | None) -> RSAKey | None:
        if keypair_pk is None:
            return None
        if keypair_pk not in self._keys:
            keypair = self._find("ak_keypairs", pk=keypair_pk)
            if keypair is None:
                return None
            self._keys[keypair_pk] = RSAKey.import_key(keypair["jwk"])
        return self._keys[keypair_pk]

    # --- Flavour protocol -----------------------------------------------------------------

    def issuer(self, base: str, client: OAuthClient) -> str:
        """`<base>/application/o/<slug>/` (per-provider issuer, trailing slash)."""
        return f"{base}/application/o/{client.context['slug']}/"

    def find_client(self, client_id: str) -> OAuthClient | None:
        """The provider with this client id, if an application uses it."""
        provider = self._provider_by_client(client_id)
        if provider is None:
            return None
        application = self._application_of(provider)
        if application is None:
            return None
        flow = self._find("ak_flows", pk=provider["authorization_flow"])
        return OAuthClient(
            client_id=provider["client_id"],
            public=provider["client_type"] == "public",
            secret=provider["client_secret"],
            redirect_uris=tuple(
                (r["matching_mode"], r["url"])
                for r in provider["redirect_uris"]
                if r.get("redirect_uri_type", "authorization") == "authorization"
            ),
            grant_types=frozenset(provider["grant_types"]),
            consent=bool(flow and flow["slug"].endswith("explicit-consent")),
            name=application["name"],
            context={"slug": application["slug"], "provider": provider["pk"]},
        )

    def _subject(self, user: Record) -> Subject:
        groups = tuple(
            g["name"] for g in self.store.collection("ak_groups") if user["pk"] in g["users"]
        )
        return Subject(
            id=str(user["pk"]),
            username=user["username"],
            email=user.get("email"),
            name=user.get("name"),
            groups=groups,
            service_account=user.get("type") == "service_account",
        )

    def authenticate(self, username: str, password: str) -> Subject | None:
        """An active user whose password matches."""
        user = self._find("ak_users", username=username)
        if user is None or not user.get("is_active", True):
            return None
        return self._subject(user) if check_password(password, user.get("password")) else None

    def subject_by_id(self, subject_id: str) -> Subject | None:
        """Reload a user by pk."""
        user = next(
            (u for u in self.store.collection("ak_users") if str(u["pk"]) == subject_id), None
        )
        return self._subject(user) if user else None

    def service_subject(self, client: OAuthClient) -> Subject:
        """`ak-<provider name>-client_credentials`, upserted as authentik does."""
        provider = self._find("ak_providers", pk=client.context["provider"])
        assert provider is not None
        username = f"ak-{provider['name']}-client_credentials"
        user = self._find("ak_users", username=username)
        if user is None:
            users = self.store.collection("ak_users")
            user = {
                "pk": max((u["pk"] for u in users), default=0) + 1,
                "username": username,
                "name": username,
                "uuid": new_id(),
                "type": "service_account",
                "is_active": True,
                "date_joined": _now(),
                "path": f"goauthentik.io/apps/{client.context['slug']}",
            }
            users.append(user)
            self.store.save()
            self._forget_application_lists()
        return self._subject(user)

    def signing_key(self, client: OAuthClient) -> RSAKey:
        """The provider's signing key pair."""
        provider = self._find("ak_providers", pk=client.context["provider"])
        key = self._key_for(provider["signing_key"] if provider else None)
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
        provider = self._find("ak_providers", pk=client.context["provider"])
        assert provider is not None
        user = self._find("ak_users", username=subject.username) or {}
        sub = {
            "user_username": subject.username,
            "user_id": subject.id,
            "user_uuid": user.get("uuid", subject.id),
            "user_email": subject.email or subject.username,
        }.get(provider["sub_mode"], hashlib.sha256(subject.username.encode()).hexdigest())
        mapped = {
            m["scope_name"]
            for m in self.store.collection("ak_mappings")
            if m["pk"] in provider["property_mappings"]
        }
        granted = [s for s in scopes if s in mapped]
        claims: dict[str, Any] = {
            "sub": sub,
            "aud": client.client_id,
            "azp": client.client_id,
            "uid": secrets.token_hex(16),
            "scope": " ".join(granted),
            "acr": "goauthentik.io/providers/oauth2/default",
        }
        if provider.get("include_claims_in_id_token", True):
            if "email" in granted:
                claims["email"] = subject.email
                claims["email_verified"] = False
            if "profile" in granted:
                claims.update(
                    {
                        "name": subject.name,
                        "given_name": subject.name,
                        "preferred_username": subject.username,
                        "nickname": subject.username,
                        "groups": list(subject.groups),
                    }
                )
        return claims

    def id_token_claims(
        self, client: OAuthClient, access: dict[str, Any], standard: dict[str, Any]
    ) -> dict[str, Any]:
        """authentik's ID token: the access token is the ID token plus `azp` and `uid`
        (IDToken.to_access_token), so the ID token is the access token's claims without them.
        `jti` is the dev IdP's own bookkeeping of access tokens, not an authentik claim."""
        claims = {
            name: value for name, value in access.items() if name not in ("azp", "uid", "jti")
        }
        claims["auth_time"] = standard["auth_time"]
        return claims

    # --- API authentication ---------------------------------------------------------------

    def _denied(self, request: Request) -> Response | None:
        auth = request.headers.get("authorization", "")
        if not auth.lower().startswith("bearer ") or not auth[7:].strip():
            return json_response({"detail": "Authentication credentials were not provided."}, 403)
        if not hmac.compare_digest(
            auth[7:].strip().encode(), self.settings.bootstrap_token.encode()
        ):
            return json_response({"detail": "Token invalid/expired"}, 403)
        return None

    # --- representations ------------------------------------------------------------------

    def _flow_rep(self, flow: Record) -> Record:
        return {
            "pk": flow["pk"],
            "policybindingmodel_ptr_id": flow["pk"],
            "name": flow["name"],
            "slug": flow["slug"],
            "title": flow["title"],
            "designation": flow["designation"],
            "background": "",
            "background_url": "/static/dist/assets/images/flow_background.jpg",
            "background_themed_urls": None,
            "stages": [],
            "policies": [],
            "cache_count": 0,
            "policy_engine_mode": "any",
            "compatibility_mode": False,
            "export_url": f"{API}/flows/instances/{flow['slug']}/export/",
            "layout": "stacked",
            "denied_action": "message_continue",
            "authentication": flow["authentication"],
        }

    def _keypair_rep(self, keypair: Record) -> Record:
        key = RSAKey.import_key(keypair["jwk"])
        fingerprint = hashlib.sha256(key.thumbprint().encode()).hexdigest()
        return {
            "pk": keypair["pk"],
            "name": keypair["name"],
            "fingerprint_sha256": fingerprint,
            "fingerprint_sha1": fingerprint[:40],
            "cert_expiry": None,
            "cert_subject": None,
            "private_key_available": True,
            "key_type": "rsa",
            "certificate_download_url": f"{API}/crypto/certificatekeypairs/"
            f"{keypair['pk']}/view_certificate/?download",
            "private_key_download_url": f"{API}/crypto/certificatekeypairs/"
            f"{keypair['pk']}/view_private_key/?download",
            "managed": keypair["managed"],
        }

    def _mapping_rep(self, mapping: Record) -> Record:
        return {
            **{
                k: mapping[k]
                for k in ("pk", "managed", "name", "expression", "scope_name", "description")
            },
            "component": "ak-property-mapping-provider-scope-form",
            "verbose_name": "Scope Mapping",
            "verbose_name_plural": "Scope Mappings",
            "meta_model_name": "authentik_providers_oauth2.scopemapping",
        }

    def _provider_rep(self, provider: Record) -> Record:
        application = self._application_of(provider)
        return {
            **{k: v for k, v in provider.items() if k != "created"},
            "component": "ak-provider-oauth2-form",
            "assigned_application_slug": application["slug"] if application else None,
            "assigned_application_name": application["name"] if application else None,
            "assigned_backchannel_application_slug": None,
            "assigned_backchannel_application_name": None,
            "verbose_name": "OAuth2/OpenID Provider",
            "verbose_name_plural": "OAuth2/OpenID Providers",
            "meta_model_name": "authentik_providers_oauth2.oauth2provider",
        }

    def _provider_brief(self, provider: Record) -> Record:
        rep = self._provider_rep(provider)
        keep = (
            "pk",
            "name",
            "authentication_flow",
            "authorization_flow",
            "invalidation_flow",
            "property_mappings",
            "component",
            "assigned_application_slug",
            "assigned_application_name",
            "assigned_backchannel_application_slug",
            "assigned_backchannel_application_name",
            "verbose_name",
            "verbose_name_plural",
            "meta_model_name",
        )
        return {k: rep.get(k) for k in keep}

    def _application_rep(self, app: Record) -> Record:
        provider = self._find("ak_providers", pk=app["provider"]) if app["provider"] else None
        return {
            "pk": app["pk"],
            "name": app["name"],
            "slug": app["slug"],
            "provider": app["provider"],
            "provider_obj": self._provider_brief(provider) if provider else None,
            "backchannel_providers": [],
            "backchannel_providers_obj": [],
            "launch_url": None,
            "open_in_new_tab": False,
            "meta_launch_url": "",
            "meta_icon": "",
            "meta_icon_url": None,
            "meta_icon_themed_urls": None,
            "meta_description": "",
            "meta_publisher": "",
            "policy_engine_mode": "any",
            "group": "",
            "meta_hide": False,
        }

    def _partial_user(self, user: Record) -> Record:
        return {
            "pk": user["pk"],
            "username": user["username"],
            "name": user["name"],
            "is_active": user.get("is_active", True),
            "last_login": None,
            "email": user.get("email", ""),
            "attributes": {},
            "uid": self._uid(user),
        }

    @staticmethod
    def _uid(user: Record) -> str:
        return hashlib.sha256(f"{user['pk']}-{user['username']}".encode()).hexdigest()

    def _group_rep(self, group: Record) -> Record:
        members = [u for u in self.store.collection("ak_users") if u["pk"] in group["users"]]
        return {
            "pk": group["pk"],
            "num_pk": group["num_pk"],
            "name": group["name"],
            "is_superuser": False,
            "parents": [],
            "parents_obj": [],
            "users": group["users"],
            "users_obj": [self._partial_user(u) for u in members],
            "attributes": {},
            "roles": [],
            "roles_obj": [],
            "inherited_roles_obj": [],
            "children": [],
            "children_obj": [],
        }

    def _user_rep(self, user: Record) -> Record:
        groups = [g for g in self.store.collection("ak_groups") if user["pk"] in g["users"]]
        return {
            "pk": user["pk"],
            "username": user["username"],
            "name": user["name"],
            "is_active": user.get("is_active", True),
            "last_login": None,
            "date_joined": user.get("date_joined", _now()),
            "is_superuser": user["username"] == "akadmin",
            "groups": [g["pk"] for g in groups],
            "groups_obj": [
                {
                    "pk": g["pk"],
                    "num_pk": g["num_pk"],
                    "name": g["name"],
                    "is_superuser": False,
                    "parents": [],
                    "attributes": {},
                }
                for g in groups
            ],
            "roles": [],
            "roles_obj": [],
            "email": user.get("email", ""),
            "avatar": "data:image/svg+xml;base64,",
            "attributes": {},
            "uid": self._uid(user),
            "path": user.get("path", "users"),
            "type": user.get("type", "internal"),
            "uuid": user["uuid"],
            "password_change_date": user.get("date_joined", _now()),
            "last_updated": user.get("date_joined", _now()),
        }

    # --- API ------------------------------------------------------------------------------

    async def _body(self, request: Request) -> Record:
        try:
            body = orjson.loads(await request.body())
        except orjson.JSONDecodeError as exc:
            raise FieldErrors({"non_field_errors": [f"JSON parse error - {exc}"]}) from exc
        if not isinstance(body, dict):
            raise FieldErrors(
                {
                    "non_field_errors": [
                        f"Invalid data. Expected a dictionary, but got {type(body).__name__}."
                    ]
                }
            )
        return body

    async def api(self, request: Request) -> Response:
        """Dispatch `/api/v3/…` (DRF conventions)."""
        denied = self._denied(request)
        if denied is not None:
            return denied
        self._reconcile()
        path = "/" + request.path_params["rest"].strip("/") + "/"
        for method, pattern, handler in self._routes:
            match = pattern.fullmatch(path)
            if match and method == request.method:
                try:
                    return await handler(request, *match.groups())
                except FieldErrors as exc:
                    return json_response(exc.errors, 400)
        return json_response({"detail": "Not found."}, 404)

    def _api_routes(self) -> list[tuple[str, re.Pattern[str], Handler]]:
        one = "([^/]+)"
        table: list[tuple[str, str, Handler]] = [
            ("GET", "/flows/instances/", self._list_flows),
            ("GET", "/crypto/certificatekeypairs/", self._list_keypairs),
            ("GET", "/propertymappings/provider/scope/", self._list_mappings),
            ("GET", "/providers/oauth2/", self._list_providers),
            ("POST", "/providers/oauth2/", self._create_provider),
            ("GET", "/providers/oauth2/{}/", self._get_provider),
            ("PATCH", "/providers/oauth2/{}/", self._patch_provider),
            ("GET", "/core/applications/", self._list_applications),
            ("POST", "/core/applications/", self._create_application),
            ("GET", "/core/applications/{}/", self._get_application),
            ("GET", "/core/groups/", self._list_groups),
            ("POST", "/core/groups/", self._create_group),
            ("GET", "/core/groups/{}/", self._get_group),
            ("POST", "/core/groups/{}/add_user/", self._add_user),
            ("GET", "/core/users/", self._list_users),
        ]
        return [(m, re.compile(re.escape(p).replace(re.escape("{}"), one)), h) for m, p, h in table]

    async def _list_flows(self, request: Request) -> Response:
        slug = request.query_params.get("slug")
        flows = [f for f in self.store.collection("ak_flows") if slug is None or f["slug"] == slug]
        return paginated([self._flow_rep(f) for f in flows], request)

    async def _list_keypairs(self, request: Request) -> Response:
        keypairs = self.store.collection("ak_keypairs")
        return paginated([self._keypair_rep(k) for k in keypairs], request)

    async def _list_mappings(self, request: Request) -> Response:
        q = request.query_params
        managed = q.getlist("managed")
        items = [
            m
            for m in self.store.collection("ak_mappings")
            if ("scope_name" not in q or m["scope_name"] == q["scope_name"])
            and (not managed or m["managed"] in managed)
            and ("name" not in q or m["name"] == q["name"])
        ]
        items.sort(key=lambda m: (m["scope_name"], m["name"]))
        return paginated([self._mapping_rep(m) for m in items], request)

    async def _list_providers(self, request: Request) -> Response:
        q = request.query_params
        items = [
            p
            for p in self.store.collection("ak_providers")
            if ("name" not in q or p["name"] == q["name"])
            and ("client_id" not in q or p["client_id"] == q["client_id"])
        ]
        return paginated([self._provider_rep(p) for p in items], request)

    async def _get_provider(self, request: Request, pk: str) -> Response:
        provider = next(
            (p for p in self.store.collection("ak_providers") if str(p["pk"]) == pk), None
        )
        if provider is None:
            return json_response({"detail": "No OAuth2Provider matches the given query."}, 404)
        return json_response(self._provider_rep(provider))

    async def _patch_provider(self, request: Request, pk: str) -> Response:
        provider = next(
            (p for p in self.store.collection("ak_providers") if str(p["pk"]) == pk), None
        )
        if provider is None:
            return json_response({"detail": "No OAuth2Provider matches the given query."}, 404)
        body = await self._body(request)
        unsupported = sorted(
            set(body) - {"redirect_uris", "grant_types", "jwt_federation_providers"}
        )
        if unsupported:
            # The dev IdP only emulates the partial update the provisioning tool sends.
            raise FieldErrors(
                {k: ["The dev identity provider cannot change this field."] for k in unsupported}
            )
        if "redirect_uris" in body:
            provider["redirect_uris"] = self._redirect_entries(body.get("redirect_uris"))
        errors: dict[str, list[str]] = {}
        if "grant_types" in body:
            provider["grant_types"] = self._provider_choices(
                {"grant_types": body["grant_types"], "client_id": "-"}, errors
            )["grant_types"]
            errors.pop("client_id", None)
        if "jwt_federation_providers" in body:
            provider["jwt_federation_providers"] = self._federation(body, errors)
        if errors:
            raise FieldErrors(errors)
        self.store.save()
        return json_response(self._provider_rep(provider))

    def _federation(self, body: Record, errors: dict[str, list[str]]) -> list[int]:
        """`jwt_federation_providers`: pks of existing OAuth2 providers."""
        value = body.get("jwt_federation_providers", [])
        if not isinstance(value, list):
            errors["jwt_federation_providers"] = ['Expected a list of items but got type "str".']
            return []
        missing = [pk for pk in value if self._find("ak_providers", pk=pk) is None]
        if missing:
            errors["jwt_federation_providers"] = [
                f'Invalid pk "{pk}" - object does not exist.' for pk in missing
            ]
        return [pk for pk in value if pk not in missing]

    @staticmethod
    def _redirect_entries(value: Any) -> list[Record]:
        errors = []
        entries = value if isinstance(value, list) else []
        if not isinstance(value, list):
            errors.append('Expected a list of items but got type "str".')
        for entry in entries:
            if (
                not isinstance(entry, dict)
                or entry.get("matching_mode") not in ("strict", "regex")
                or not isinstance(entry.get("url"), str)
            ):
                errors.append("Each redirect URI needs matching_mode (strict|regex) and url.")
                continue
            if entry["matching_mode"] == "regex":
                try:
                    re.compile(entry["url"])
                except re.error:
                    errors.append(f"Invalid Regex Pattern: {entry['url']}")
        if errors:
            raise FieldErrors({"redirect_uris": errors})
        return [
            {
                "matching_mode": e["matching_mode"],
                "url": e["url"],
                "redirect_uri_type": e.get("redirect_uri_type", "authorization"),
            }
            for e in entries
        ]

    def _related(
        self, errors: dict[str, list[str]], field: str, value: Any, collection: str, nullable: bool
    ) -> Any:
        if value is None or value == "":
            if not nullable:
                errors[field] = ["This field may not be null."]
            return None
        if not isinstance(value, str):
            errors[field] = [f"Incorrect type. Expected pk value, received {type(value).__name__}."]
            return None
        try:
            uuid.UUID(value)
        except ValueError:
            errors[field] = [f"“{value}” is not a valid UUID."]
            return None
        if self._find(collection, pk=value) is None:
            errors[field] = [f'Invalid pk "{value}" - object does not exist.']
            return None
        return value

    def _provider_relations(self, body: Record, errors: dict[str, list[str]]) -> Record:
        """Name, flows, signing key and property mappings of a new provider, checked."""
        for field in ("name", "authorization_flow", "invalidation_flow", "redirect_uris"):
            if field not in body:
                errors[field] = ["This field is required."]
        name = body.get("name")
        if "name" in body and (not isinstance(name, str) or not name.strip()):
            errors["name"] = ["This field may not be blank."]
        elif isinstance(name, str) and self._find("ak_providers", name=name):
            errors["name"] = ["provider with this name already exists."]
        fields: Record = {
            f: self._related(errors, f, body.get(f), "ak_flows", nullable=False)
            for f in ("authorization_flow", "invalidation_flow")
            if f in body
        }
        fields["signing_key"] = self._related(
            errors, "signing_key", body.get("signing_key"), "ak_keypairs", nullable=True
        )
        mappings = body.get("property_mappings", [])
        mapping_errors = []
        if not isinstance(mappings, list):
            mapping_errors.append('Expected a list of items but got type "str".')
            mappings = []
        for pk in mappings:
            if not isinstance(pk, str) or self._find("ak_mappings", pk=pk) is None:
                mapping_errors.append(f'Invalid pk "{pk}" - object does not exist.')
        if mapping_errors:
            errors["property_mappings"] = mapping_errors
        return {**fields, "name": name, "property_mappings": mappings}

    def _provider_choices(self, body: Record, errors: dict[str, list[str]]) -> Record:
        """Client type, grant types, sub mode, redirect URIs and client id, checked."""
        client_type = body.get("client_type", "confidential")
        if client_type not in ("confidential", "public"):
            errors["client_type"] = [f'"{client_type}" is not a valid choice.']
        grants = body.get("grant_types", sorted(DEFAULT_GRANT_TYPES))
        if not isinstance(grants, list) or any(g not in GRANT_TYPES for g in grants):
            errors["grant_types"] = [
                f'"{g}" is not a valid choice.'
                for g in (grants if isinstance(grants, list) else [grants])
                if g not in GRANT_TYPES
            ]
        sub_mode = body.get("sub_mode", "hashed_user_id")
        if sub_mode not in SUB_MODES:
            errors["sub_mode"] = [f'"{sub_mode}" is not a valid choice.']
        redirect_uris: list[Record] = []
        if "redirect_uris" in body:
            try:
                redirect_uris = self._redirect_entries(body["redirect_uris"])
            except FieldErrors as exc:
                errors.update(exc.errors)
        client_id = body.get("client_id") or _generate_id()
        if self._provider_by_client(client_id):
            errors["client_id"] = ["OAuth2/OpenID Provider with this Client ID already exists."]
        return {
            "client_type": client_type,
            "grant_types": grants,
            "sub_mode": sub_mode,
            "redirect_uris": redirect_uris,
            "client_id": client_id,
        }

    async def _create_provider(self, request: Request) -> Response:
        body = await self._body(request)
        errors: dict[str, list[str]] = {}
        fields = {**self._provider_relations(body, errors), **self._provider_choices(body, errors)}
        if errors:
            raise FieldErrors(errors)
        providers = self.store.collection("ak_providers")
        provider = {
            "pk": max((p["pk"] for p in providers), default=0) + 1,
            "name": fields["name"],
            "authentication_flow": body.get("authentication_flow"),
            "authorization_flow": fields["authorization_flow"],
            "invalidation_flow": fields["invalidation_flow"],
            "property_mappings": fields["property_mappings"],
            "client_type": fields["client_type"],
            "grant_types": fields["grant_types"],
            "client_id": fields["client_id"],
            "client_secret": body.get("client_secret") or _generate_id(128),
            "access_code_validity": "minutes=1",
            "access_token_validity": "hours=1",
            "refresh_token_validity": "days=30",
            "refresh_token_threshold": "seconds=0",
            "include_claims_in_id_token": bool(body.get("include_claims_in_id_token", True)),
            "signing_key": fields["signing_key"],
            "encryption_key": None,
            "redirect_uris": fields["redirect_uris"],
            "logout_uri": "",
            "logout_method": "backchannel",
            "sub_mode": fields["sub_mode"],
            "issuer_mode": "per_provider",
            "jwt_federation_sources": [],
            "jwt_federation_providers": self._federation(body, errors),
        }
        if errors:
            raise FieldErrors(errors)
        providers.append(provider)
        self.store.save()
        return json_response(self._provider_rep(provider), 201)

    def _filtered_applications(self, request: Request) -> list[Record]:
        """The list's queryset: exact filters, `search` over the search fields, by name."""
        q = request.query_params
        terms = [t for t in re.split(r"[\s,]+", q.get("search", "").lower()) if t]
        reps = [self._application_rep(a) for a in self.store.collection("ak_applications")]
        items = [
            a
            for a in reps
            if all(str(a[f] or "") == q[f] for f in APP_SEARCH_FIELDS if q.get(f))
            and all(any(t in str(a[f] or "").lower() for f in APP_SEARCH_FIELDS) for t in terms)
        ]
        return sorted(items, key=lambda a: a["name"])

    async def _list_applications(self, request: Request) -> Response:
        """authentik's custom list: see the module docstring for its cache."""
        q = request.query_params
        items = self._filtered_applications(request)
        if q.get("superuser_full_list", "").lower() == "true":
            return paginated(items, request)  # the bootstrap token's user is a superuser
        paging = page_of(request)
        if paging is None:
            return json_response({"detail": "Invalid page."}, 404)
        page, size = paging
        chunk = items[(page - 1) * size : page * size]
        if q.get("search", "") == "":
            user = self._find("ak_users", username="akadmin")
            user_pk = user["pk"] if user else 0
            # authentik tests the cached list for truth: an empty page is computed every time.
            cached = self._cached_page(user_pk, page)
            if not cached:
                cached = [a["pk"] for a in chunk]
                self._cache_page(user_pk, page, cached)
            # The cached objects are re-read (`_expand_applications`), so they are current.
            current = {a["pk"]: a for a in self.store.collection("ak_applications")}
            chunk = [self._application_rep(current[pk]) for pk in cached if pk in current]
        if q.get("only_with_launch_url", "").lower() == "true":
            chunk = [a for a in chunk if a["launch_url"]]
        # The envelope counts the filtered queryset while the results come from the cache.
        return envelope(len(items), page, size, chunk)

    async def _get_application(self, request: Request, slug: str) -> Response:
        app = self._find("ak_applications", slug=slug)
        if app is None:
            return json_response({"detail": "No Application matches the given query."}, 404)
        return json_response(self._application_rep(app))

    def _slug_errors(self, slug: str) -> list[str]:
        if not re.fullmatch(r"[-a-zA-Z0-9_]+", slug):
            return ["Enter a valid “slug” consisting of letters, numbers, underscores or hyphens."]
        if slug in RESERVED_SLUGS:
            return [f"The slug '{slug}' is reserved and cannot be used for applications."]
        if self._find("ak_applications", slug=slug):
            return ["Application with this slug already exists."]
        return []

    def _provider_errors(self, provider: Any) -> list[str]:
        if not isinstance(provider, int) or self._find("ak_providers", pk=provider) is None:
            return [f'Invalid pk "{provider}" - object does not exist.']
        if self._find("ak_applications", provider=provider):
            return ["Application with this provider already exists."]
        return []

    async def _create_application(self, request: Request) -> Response:
        body = await self._body(request)
        errors: dict[str, list[str]] = {}
        for field in ("name", "slug"):
            if not isinstance(body.get(field), str) or not body[field].strip():
                errors[field] = (
                    ["This field is required."]
                    if field not in body
                    else ["This field may not be blank."]
                )
        slug, provider = body.get("slug"), body.get("provider")
        if isinstance(slug, str) and slug and (slug_errors := self._slug_errors(slug)):
            errors["slug"] = slug_errors
        if provider is not None and (provider_errors := self._provider_errors(provider)):
            errors["provider"] = provider_errors
        if errors:
            raise FieldErrors(errors)
        app = {"pk": new_id(), "name": body["name"], "slug": slug, "provider": provider}
        self.store.collection("ak_applications").append(app)
        self.store.save()
        self._forget_application_lists()
        return json_response(self._application_rep(app), 201)

    async def _list_groups(self, request: Request) -> Response:
        name = request.query_params.get("name")
        items = [g for g in self.store.collection("ak_groups") if name is None or g["name"] == name]
        return paginated([self._group_rep(g) for g in items], request)

    async def _get_group(self, request: Request, pk: str) -> Response:
        group = self._find("ak_groups", pk=pk)
        if group is None:
            return json_response({"detail": "No Group matches the given query."}, 404)
        return json_response(self._group_rep(group))

    async def _create_group(self, request: Request) -> Response:
        body = await self._body(request)
        name = body.get("name")
        if not isinstance(name, str) or not name.strip():
            raise FieldErrors(
                {
                    "name": [
                        "This field is required."
                        if "name" not in body
                        else "This field may not be blank."
                    ]
                }
            )
        if self._find("ak_groups", name=name):
            raise FieldErrors({"name": ["Group with this name already exists."]})
        groups = self.store.collection("ak_groups")
        group = {"pk": new_id(), "num_pk": len(groups) + 1000, "name": name, "users": []}
        groups.append(group)
        self.store.save()
        self._forget_application_lists()
        return json_response(self._group_rep(group), 201)

    async def _add_user(self, request: Request, group_pk: str) -> Response:
        group = self._find("ak_groups", pk=group_pk)
        if group is None:
            return json_response({"detail": "No Group matches the given query."}, 404)
        body = await self._body(request)
        if "pk" not in body:
            raise FieldErrors({"pk": ["This field is required."]})
        user = self._find("ak_users", pk=body["pk"])
        if user is None:
            return json_response({"detail": "Not found."}, 404)
        if user["pk"] not in group["users"]:
            group["users"].append(user["pk"])
            self.store.save()
        return Response(status_code=204)

    async def _list_users(self, request: Request) -> Response:
        username = request.query_params.get("username")
        items = [
            u
            for u in self.store.collection("ak_users")
            if username is None or u["username"] == username
        ]
        return paginated([self._user_rep(u) for u in items], request)

    # --- OpenID endpoints -----------------------------------------------------------------

    def _application(self, slug: str) -> tuple[Record, Record] | None:
        app = self._find("ak_applications", slug=slug)
        if app is None or app["provider"] is None:
            return None
        provider = self._find("ak_providers", pk=app["provider"])
        return (app, provider) if provider else None

    async def discovery(self, request: Request) -> Response:
        """Per-application OpenID configuration (no `registration_endpoint`: no DCR)."""
        found = self._application(request.path_params["slug"])
        if found is None:
            return json_response({"detail": "Not found."}, 404)
        app, provider = found
        scopes = [
            m["scope_name"]
            for m in self.store.collection("ak_mappings")
            if m["pk"] in provider["property_mappings"]
        ]
        base = str(request.base_url).rstrip("/")
        return json_response(_discovery_document(base, app["slug"], scopes))

    async def jwks(self, request: Request) -> Response:
        """The application's provider's public signing key."""
        found = self._application(request.path_params["slug"])
        if found is None:
            return json_response({"detail": "Not found."}, 404)
        key = self._key_for(found[1]["signing_key"])
        # authentik leaves out `keys` when the provider has no key at all.
        return json_response({"keys": [key.as_dict(private=False)]} if key else {})

    def bearer_claims(self, request: Request) -> dict[str, Any] | None:
        """The claims of the valid access token the request carries, if any."""
        for keypair in self.store.collection("ak_keypairs"):
            key = self._key_for(keypair["pk"])
            claims = self.provider.bearer_claims(request, key) if key else None
            if claims is not None:
                return claims
        return None

    async def userinfo(self, request: Request) -> Response:
        """Claims of a valid access token."""
        claims = self.bearer_claims(request)
        if claims is None:
            return json_response({"error": "invalid_token"}, 401)
        keep = _USERINFO_CLAIMS
        return json_response({k: claims[k] for k in keep if k in claims})

    async def token(self, request: Request) -> Response:
        """The token endpoint (400 `invalid_grant` for grant types the provider lacks)."""
        return await self.provider.token(request)

    def routes(self) -> list[Route]:
        """The Starlette routes of this flavour."""
        provider, cors = self.provider, AuthentikCors(self.store, self.bearer_claims)
        discovery = cors.discovery(self.discovery)
        return [
            Route("/application/o/{slug}/.well-known/openid-configuration", discovery),
            Route("/application/o/{slug}/jwks/", cors.jwks(self.jwks)),
            Route("/application/o/authorize/", provider.authorize),
            Route("/application/o/token/", cors.token(self.token), methods=["POST", "OPTIONS"]),
            Route(
                "/application/o/userinfo/",
                cors.userinfo(self.userinfo),
                methods=["GET", "POST", "OPTIONS"],
            ),
            Route(
                f"{self.interaction_prefix}/{{uid}}", provider.interaction, methods=["GET", "POST"]
            ),
            Route(API + "/{rest:path}", self.api, methods=["GET", "POST", "PATCH"]),
        ]


_USERINFO_CLAIMS: tuple[str, ...] = ("sub", "email", "email_verified", "name", "given_name")
_USERINFO_CLAIMS += ("preferred_username", "nickname", "groups")


def starting_response(request: Request) -> Response:
    """What authentik's router answers while migrations run: 503 with `Retry-After: 5`."""
    accept = request.headers.get("accept", "")
    headers = {"Retry-After": "5"}
    if "application/json" in accept:
        return json_response({"error": "authentik starting"}, 503, headers)
    if "text/html" in accept:
        return Response(
            "<html><body><h1>authentik is starting…</h1></body></html>",
            503,
            headers,
            media_type="text/html",
        )
    return Response("authentik starting", 503, headers, media_type="text/plain")
