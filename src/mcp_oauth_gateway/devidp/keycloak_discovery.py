"""The `master` realm's OpenID configuration (with `registration_endpoint`: anonymous DCR) and
its key set, as Keycloak 26 publishes them (the parts the dev IdP serves)."""

from __future__ import annotations

from joserfc.jwk import RSAKey
from starlette.requests import Request
from starlette.responses import Response

from .keycloak_paths import OIDC, REALM_PATH, REGISTRATION
from .oidc import json_response
from .store import Store

_CLAIMS = [
    *("iss", "sub", "aud", "exp", "iat", "auth_time", "name", "given_name"),
    *("family_name", "preferred_username", "email", "acr", "azp", "nonce"),
]


def discovery_document(base: str, scopes: list[str]) -> dict[str, object]:
    """The realm's OpenID configuration at `base`, its client scopes named `scopes`."""
    return {
        "issuer": f"{base}{REALM_PATH}",
        "authorization_endpoint": f"{base}{OIDC}/auth",
        "token_endpoint": f"{base}{OIDC}/token",
        "userinfo_endpoint": f"{base}{OIDC}/userinfo",
        "revocation_endpoint": f"{base}{OIDC}/revoke",
        "jwks_uri": f"{base}{OIDC}/certs",
        "registration_endpoint": f"{base}{REGISTRATION}",
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
        # Keycloak does not list `none` (public clients work all the same); the JWT and TLS
        # methods it lists, the dev IdP does not serve.
        "token_endpoint_auth_methods_supported": [
            "client_secret_basic",
            "client_secret_post",
        ],
        "code_challenge_methods_supported": ["S256"],
        "scopes_supported": ["openid", *scopes],
        "claims_supported": list(_CLAIMS),
        "authorization_response_iss_parameter_supported": True,
    }


class Discovery:
    """`…/.well-known/openid-configuration` and `…/protocol/openid-connect/certs`."""

    def __init__(self, store: Store, key: RSAKey):
        self.store = store
        self.key = key

    async def discovery(self, request: Request) -> Response:
        """The realm's OpenID configuration, with `registration_endpoint`."""
        base = str(request.base_url).rstrip("/")
        scopes = [s["name"] for s in self.store.collection("kc_scopes")]
        return json_response(discovery_document(base, scopes))

    async def jwks(self, request: Request) -> Response:
        """The realm's public keys."""
        return json_response({"keys": [self.key.as_dict(private=False)]})
