"""Which verified JWTs are access tokens, per identity provider (docs/access-tokens.md).

An ID token is signed by the same key and, at some providers, carries the same `iss` and `aud`
as an access token, so signature and claim checks alone accept it. Each provider marks its
access tokens differently; one rule per provider, chosen once when the policy is loaded, says
whether a token is one. Pure functions on the already-verified header and claims: no network.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

from ..provider_kinds import ProviderKind

# RFC 9068 §2.1: this header `typ` marks a JWT access token whoever issued it.
AT_JWT_TYPES = frozenset({"at+jwt", "application/at+jwt"})
SEND_ACCESS_TOKEN = "send the access_token from the token response"
# Keycloak's `typ` claim values (TokenUtil) and what the client most likely sent instead.
KEYCLOAK_KINDS = {
    "ID": "an ID token",
    "Refresh": "a refresh token",
    "Offline": "an offline refresh token",
    "Logout": "a logout token",
}
# OpenID Connect Core §3.1.3.6 / §3.3.2.11: hashes that only ID tokens carry.
ID_TOKEN_ONLY_CLAIMS = ("at_hash", "c_hash")
# Keycloak's `typ` claim of a DPoP-bound access token (RFC 9449; DPoPUtil.DPOP_TOKEN_TYPE).
DPOP_TYP = "DPoP"


class AccessTokenRule(Protocol):
    @property
    def kind(self) -> ProviderKind | None:
        """The provider kind the rule is for (None: any OpenID provider)."""
        ...

    def refusal(self, header: Mapping[str, object], claims: Mapping[str, object]) -> str | None:
        """None when the token is an access token; otherwise why it is not (safe to show)."""
        ...


def has_at_jwt_header(header: Mapping[str, object]) -> bool:
    """Whether the JOSE header says RFC 9068 access token (`typ: at+jwt`)."""
    typ = header.get("typ")
    return isinstance(typ, str) and typ.lower() in AT_JWT_TYPES


def _marks_access_token(typ: object, claims: Mapping[str, object]) -> bool:
    """Whether a `typ` claim marks an access token: `Bearer`, or `DPoP` on a token bound to a
    key (`cnf.jkt`, whose proof the JWT stage then checks on every request)."""
    if typ == "Bearer":
        return True
    cnf = claims.get("cnf")
    return typ == DPOP_TYP and isinstance(cnf, dict) and isinstance(cnf.get("jkt"), str)


def _typ_claim_refusal(typ: object, provider: str) -> str:
    # The wording keeps "typ " in every message: the metrics reason table labels it "type".
    if typ == DPOP_TYP:
        return (
            "typ claim 'DPoP' marks a DPoP-bound access token, but this one has no cnf.jkt: "
            "a token claiming a binding it lacks is refused, never taken as a bearer token"
        )
    kind = KEYCLOAK_KINDS.get(typ) if isinstance(typ, str) else None
    if kind is not None:
        return f"this is {kind} (typ claim {typ!r}), not an access token: {SEND_ACCESS_TOKEN}"
    return (
        f"typ claim {typ!r} is not 'Bearer', so this is not {provider} access token: "
        f"{SEND_ACCESS_TOKEN}"
    )


@dataclass(frozen=True, slots=True)
class KeycloakRule:
    """Keycloak: access tokens carry the claim `typ: Bearer`, or `typ: DPoP` when bound to a
    key (ID tokens `ID`, refresh tokens `Refresh`/`Offline`, logout tokens `Logout`), or the
    header `typ: at+jwt` when the client enables RFC 9068 access-token headers."""

    kind: ProviderKind | None = ProviderKind.KEYCLOAK

    def refusal(self, header: Mapping[str, object], claims: Mapping[str, object]) -> str | None:
        """None for a Keycloak access token; otherwise why it is not one."""
        if has_at_jwt_header(header):
            return None
        typ = claims.get("typ")
        if typ is None:
            return (
                "token has no typ claim 'Bearer' (Keycloak marks access tokens with it) and "
                f"no header typ at+jwt, so it is not an access token: {SEND_ACCESS_TOKEN}"
            )
        if _marks_access_token(typ, claims):
            return None
        return _typ_claim_refusal(typ, "a Keycloak")


@dataclass(frozen=True, slots=True)
class AuthentikRule:
    """authentik: the access token is the ID token's claims plus `azp` (the client id) and `uid`
    (a random id), both with header `typ: JWT`; so an access token has both and an ID token
    neither. `nonce` and `aud` do not tell them apart."""

    kind: ProviderKind | None = ProviderKind.AUTHENTIK

    def refusal(self, header: Mapping[str, object], claims: Mapping[str, object]) -> str | None:
        """None for an authentik access token; otherwise why it is not one."""
        if has_at_jwt_header(header):
            return None
        missing = [name for name in ("uid", "azp") if claims.get(name) is None]
        if not missing:
            return None
        lacking = " and ".join(missing)
        return (
            f"this is an ID token (it has no {lacking} claim, which authentik puts only in "
            f"access tokens, and its header typ is not at+jwt), not an access token: "
            f"{SEND_ACCESS_TOKEN}"
        )


@dataclass(frozen=True, slots=True)
class GenericRule:
    """Any other OpenID provider: header `typ: at+jwt` is an access token; otherwise refuse what
    is clearly something else (a `typ` claim other than `Bearer`, or `at_hash`/`c_hash`) and
    accept the rest, which cannot be told apart without knowing the provider."""

    kind: ProviderKind | None = None

    def refusal(self, header: Mapping[str, object], claims: Mapping[str, object]) -> str | None:
        """None unless the token is marked as something other than an access token."""
        if has_at_jwt_header(header):
            return None
        typ = claims.get("typ")
        if typ is not None and not _marks_access_token(typ, claims):
            return _typ_claim_refusal(typ, "an")
        for name in ID_TOKEN_ONLY_CLAIMS:
            if name in claims:
                return (
                    f"this is an ID token (it has an {name} claim, which only ID tokens "
                    f"carry, and its header typ is not at+jwt), not an access token: "
                    f"{SEND_ACCESS_TOKEN}"
                )
        return None


KEYCLOAK = KeycloakRule()
AUTHENTIK = AuthentikRule()
GENERIC = GenericRule()
RULES: dict[ProviderKind, AccessTokenRule] = {
    ProviderKind.KEYCLOAK: KEYCLOAK,
    ProviderKind.AUTHENTIK: AUTHENTIK,
}


def access_token_rule(kind: ProviderKind | None) -> AccessTokenRule:
    """The rule for a provider kind (None: a generic OpenID provider)."""
    return RULES[kind] if kind is not None else GENERIC
