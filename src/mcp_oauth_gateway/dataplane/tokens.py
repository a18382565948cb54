"""Bearer JWT verification as pure functions: is this token valid for these rules, and why not."""

from __future__ import annotations

import binascii
from collections.abc import Mapping
from dataclasses import dataclass

import orjson
from joserfc import jws
from joserfc.errors import JoseError
from joserfc.jwa import JWSAlgModel
from joserfc.jwk import Key
from joserfc.util import urlsafe_b64decode
from typing_extensions import TypeIs

from ..controlplane.keys import ALLOWED_ALGORITHMS, REGISTRY, Keyset
from ..providers.access_tokens import GENERIC, AccessTokenRule

LEEWAY = 60
MAX_TOKEN_BYTES = 8192
_TYPES = frozenset({"jwt", "at+jwt", "application/jwt", "application/at+jwt"})
_ALLOWED_TEXT = ", ".join(sorted(ALLOWED_ALGORITHMS))


class TokenError(Exception):
    """The token is not acceptable; the message is safe to show the client."""


class UnknownKeyId(TokenError):
    """No key in the keyset has the token's `kid` (a refetch may help)."""


@dataclass(frozen=True, slots=True)
class TokenRules:
    issuer: str
    audiences: frozenset[str] | None
    leeway: int = LEEWAY
    # Which verified tokens are access tokens (an ID token has the same signature, iss and,
    # at some providers, aud); chosen per provider when the policy is loaded.
    access_token: AccessTokenRule = GENERIC


def _is_number(value: object) -> TypeIs[int | float]:
    return isinstance(value, int | float) and not isinstance(value, bool)


def check_claims(claims: Mapping[str, object], rules: TokenRules, now: float) -> None:
    """Check iss, aud, exp, nbf and iat; raise TokenError naming the first failure."""
    iss = claims.get("iss")
    if iss != rules.issuer:
        hint = ""
        if isinstance(iss, str) and iss.rstrip("/") == rules.issuer.rstrip("/"):
            hint = " (a trailing slash matters)"
        raise TokenError(f"iss {iss!r} is not the expected issuer {rules.issuer!r}{hint}")
    if rules.audiences is not None:
        aud = claims.get("aud")
        values = [aud] if isinstance(aud, str) else aud if isinstance(aud, list) else None
        if values is None:
            raise TokenError("token has no aud claim")
        if not any(isinstance(v, str) and v in rules.audiences for v in values):
            raise TokenError(
                f"aud {aud!r} does not include any accepted audience {sorted(rules.audiences)!r}"
            )
    exp = claims.get("exp")
    if not _is_number(exp):
        raise TokenError("token has no numeric exp claim")
    if now > exp + rules.leeway:
        raise TokenError("token has expired")
    nbf = claims.get("nbf")
    if nbf is not None:
        if not _is_number(nbf):
            raise TokenError("nbf claim is not a number")
        if now + rules.leeway < nbf:
            raise TokenError("token is not yet valid (nbf is in the future)")
    iat = claims.get("iat")
    if iat is not None:
        if not _is_number(iat):
            raise TokenError("iat claim is not a number")
        if iat > now + rules.leeway:
            raise TokenError("token was issued in the future (iat)")


def parse_token(token: str) -> tuple[jws.CompactSignature, dict[str, object]]:
    """Split and decode the token header; raise TokenError when it is malformed."""
    if len(token) > MAX_TOKEN_BYTES:
        raise TokenError(f"token is longer than {MAX_TOKEN_BYTES} bytes")
    if token.count(".") != 2:
        raise TokenError(
            "malformed token: expected three dot-separated parts (header.payload.signature)"
        )
    try:
        compact = jws.extract_compact(token.encode("ascii"))
        header = compact.headers()
    except (JoseError, ValueError, UnicodeError, TypeError) as exc:
        raise TokenError(f"malformed token: {getattr(exc, 'description', None) or exc}") from exc
    if not isinstance(header, dict):
        raise TokenError("malformed token: header is not a JSON object")
    return compact, header


@dataclass(frozen=True, slots=True)
class ParsedToken:
    """A token split and decoded, not yet verified: what picking its provider needs, kept so
    that verifying it does not decode it again."""

    compact: jws.CompactSignature
    header: dict[str, object]
    payload: object

    @property
    def issuer(self) -> object:
        """The `iss` it claims (unverified: only to pick whose keys check it)."""
        return self.payload.get("iss") if isinstance(self.payload, dict) else None


def parse_unverified(token: str) -> ParsedToken:
    """Split and decode a token without checking anything but its shape."""
    compact, header = parse_token(token)
    try:
        payload = orjson.loads(compact.payload)
    except orjson.JSONDecodeError as exc:
        raise TokenError("malformed token: payload is not JSON") from exc
    return ParsedToken(compact, header, payload)


def signature_verifies(
    compact: jws.CompactSignature, header: dict[str, object], verifier: JWSAlgModel, key: Key
) -> bool:
    """What joserfc's `validate_compact` decides, with the registry, the algorithm model and
    its key checks prepared at load (keys.REGISTRY, VerificationKey.verifiers): the header
    rules, joserfc's strict base64url for the signature, and the algorithm's verify."""
    try:
        REGISTRY.check_header(header)
    except (JoseError, ValueError, TypeError) as exc:
        raise TokenError(f"signature check failed: {exc}") from exc
    segments = compact.segments
    try:
        signature = urlsafe_b64decode(segments["signature"])
    except (binascii.Error, ValueError, TypeError):
        return False
    return bool(verifier.verify(segments["header"] + b"." + segments["payload"], signature, key))


def verify_token(
    token: str,
    keyset: Keyset,
    rules: TokenRules,
    now: float,
    parsed: ParsedToken | None = None,
) -> dict[str, object]:
    """Verify signature, claims and token kind; return the claims or raise TokenError."""
    compact, header = (parsed.compact, parsed.header) if parsed else parse_token(token)
    alg = header.get("alg")
    if alg not in ALLOWED_ALGORITHMS:
        raise TokenError(f"alg {alg!r} is not accepted (accepted: {_ALLOWED_TEXT})")
    typ = header.get("typ")
    if typ is not None and (not isinstance(typ, str) or typ.lower() not in _TYPES):
        raise TokenError(f"typ {typ!r} is not a JWT access token type")
    if "crit" in header:
        raise TokenError("token header has crit parameters, none of which are supported")
    kid = header.get("kid")
    if kid is not None and not isinstance(kid, str):
        raise TokenError("kid is not a string")
    key = keyset.find(kid)
    if key is None:
        raise UnknownKeyId(
            f"no key with kid {kid!r} in the issuer's keyset" if kid else "token header has no kid"
        )
    verifier = key.verifiers.get(alg)
    if verifier is None:
        raise TokenError(
            f"alg {alg} cannot be verified with key {kid!r} "
            f"(it allows {', '.join(sorted(key.algorithms))})"
        )
    if not signature_verifies(compact, header, verifier, key.key):
        raise TokenError(f"signature does not verify with key {kid!r}")
    if b"\\u0000" in compact.payload:
        # The CEL runtime reads strings only up to a NUL: "admin\u0000x" would pass
        # `"admin" in jwt.groups`. No provider issues such claims; refuse the token.
        raise TokenError("malformed token: a claim contains a NUL character (\\u0000)")
    if parsed is not None:
        claims = parsed.payload  # decoded from the very bytes just verified
    else:
        try:
            claims = orjson.loads(compact.payload)
        except orjson.JSONDecodeError as exc:
            raise TokenError("malformed token: payload is not JSON") from exc
    if not isinstance(claims, dict):
        raise TokenError("malformed token: payload is not a JSON object")
    check_claims(claims, rules, now)
    refusal = rules.access_token.refusal(header, claims)
    if refusal is not None:
        raise TokenError(refusal)
    return claims
