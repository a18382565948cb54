"""authentik's per-application OpenID endpoints: the discovery document (no
`registration_endpoint`: authentik has no DCR), the provider's key set, userinfo and the token
endpoint (400 `invalid_grant` for grant types the provider lacks)."""

from __future__ import annotations

from typing import Any

from starlette.requests import Request
from starlette.responses import Response

from .authentik_state import AuthentikState
from .oidc import OpenIdProvider, json_response
from .store import Record

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
USERINFO_CLAIMS: tuple[str, ...] = ("sub", "email", "email_verified", "name", "given_name")
USERINFO_CLAIMS += ("preferred_username", "nickname", "groups")


def discovery_document(base: str, slug: str, scopes: list[str]) -> dict[str, object]:
    """The OpenID configuration of the application `slug` whose provider maps `scopes`."""
    endpoints = {name: base + path.format(slug=slug) for name, path in DISCOVERY_ENDPOINTS}
    return {
        "issuer": f"{base}/application/o/{slug}/",
        **endpoints,
        **DISCOVERY_METADATA,
        "scopes_supported": sorted({"openid", *scopes}),
    }


class OpenIdEndpoints:
    """Discovery, key set, userinfo and token endpoints over the instance's objects."""

    def __init__(self, state: AuthentikState, provider: OpenIdProvider):
        self.state = state
        self.provider = provider

    def _application(self, slug: str) -> tuple[Record, Record] | None:
        app = self.state.find("ak_applications", slug=slug)
        if app is None or app["provider"] is None:
            return None
        provider = self.state.find("ak_providers", pk=app["provider"])
        return (app, provider) if provider else None

    async def discovery(self, request: Request) -> Response:
        """Per-application OpenID configuration (no `registration_endpoint`: no DCR)."""
        found = self._application(request.path_params["slug"])
        if found is None:
            return json_response({"detail": "Not found."}, 404)
        app, provider = found
        scopes = [
            m["scope_name"]
            for m in self.state.store.collection("ak_mappings")
            if m["pk"] in provider["property_mappings"]
        ]
        base = str(request.base_url).rstrip("/")
        return json_response(discovery_document(base, app["slug"], scopes))

    async def jwks(self, request: Request) -> Response:
        """The application's provider's public signing key."""
        found = self._application(request.path_params["slug"])
        if found is None:
            return json_response({"detail": "Not found."}, 404)
        key = self.state.key_for(found[1]["signing_key"])
        # authentik leaves out `keys` when the provider has no key at all.
        return json_response({"keys": [key.as_dict(private=False)]} if key else {})

    def bearer_claims(self, request: Request) -> dict[str, Any] | None:
        """The claims of the valid access token the request carries, if any."""
        for keypair in self.state.store.collection("ak_keypairs"):
            key = self.state.key_for(keypair["pk"])
            claims = self.provider.bearer_claims(request, key) if key else None
            if claims is not None:
                return claims
        return None

    async def userinfo(self, request: Request) -> Response:
        """Claims of a valid access token."""
        claims = self.bearer_claims(request)
        if claims is None:
            return json_response({"error": "invalid_token"}, 401)
        return json_response({k: claims[k] for k in USERINFO_CLAIMS if k in claims})

    async def token(self, request: Request) -> Response:
        """The token endpoint (400 `invalid_grant` for grant types the provider lacks)."""
        return await self.provider.token(request)
