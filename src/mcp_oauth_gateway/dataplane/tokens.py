"""Bearer JWT verification as pure functions: is this token valid for these rules, and why not."""

from __future__ import annotations

import binascii
import functools
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType
from typing import NamedTuple

import orjson
from joserfc.errors import JoseError
from typing_extensions import TypeIs

from ..controlplane.keys import ALLOWED_ALGORITHMS, REGISTRY, Keyset, SignatureCheck
from ..providers.access_tokens import GENERIC, AccessTokenRule
from ..urls import shown_url

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


# A tuple, not `int | float`: that expression builds a union object on every call, and these
# checks run on every token the cache has not seen.
NUMBER_TYPES = (int, float)


def _is_number(value: object) -> TypeIs[int | float]:
    return isinstance(value, NUMBER_TYPES) and not isinstance(value, bool)


def check_claims(claims: Mapping[str, object], rules: TokenRules, now: float) -> None:
    """Check iss, aud, exp, nbf and iat; raise TokenError naming the first failure."""
    iss = claims.get("iss")
    if iss != rules.issuer:
        hint = ""
        if isinstance(iss, str) and iss.rstrip("/") == rules.issuer.rstrip("/"):
            hint = " (a trailing slash matters)"
        expected = shown_url(rules.issuer)
        raise TokenError(f"iss {iss!r} is not the expected issuer {expected!r}{hint}")
    audiences = rules.audiences
    if audiences is not None:
        aud = claims.get("aud")
        if not isinstance(aud, (str, list)):
            raise TokenError("token has no aud claim")
        if not _names_one_of(aud, audiences):
            raise TokenError(
                f"aud {aud!r} does not include any accepted audience {sorted(audiences)!r}"
            )
    leeway = rules.leeway
    exp = claims.get("exp")
    if not _is_number(exp):
        raise TokenError("token has no numeric exp claim")
    if now > exp + leeway:
        raise TokenError("token has expired")
    nbf = claims.get("nbf")
    if nbf is not None:
        if not _is_number(nbf):
            raise TokenError("nbf claim is not a number")
        if now + leeway < nbf:
            raise TokenError("token is not yet valid (nbf is in the future)")
    iat = claims.get("iat")
    if iat is not None:
        if not _is_number(iat):
            raise TokenError("iat claim is not a number")
        if iat > now + leeway:
            raise TokenError("token was issued in the future (iat)")


def _names_one_of(aud: str | list[object], audiences: frozenset[str]) -> bool:
    """Whether `aud` (one string or a list, RFC 7519 §4.1.3) names an accepted audience."""
    if isinstance(aud, str):
        return aud in audiences
    # A loop, not any(generator): this runs on every token the cache has not seen.
    for value in aud:  # noqa: SIM110
        if isinstance(value, str) and value in audiences:
            return True
    return False


# base64url → base64 for binascii; `+`, `/` and `=` are not base64url: made invalid, as joserfc
# refuses them.
_FROM_URLSAFE = bytes.maketrans(b"-_+/=", b"+/!!!")
# The last character when one or two characters are missing from the final quantum: only these
# leave no unused bits set (joserfc refuses the others; RFC 4648 §3.5 calls them non-canonical).
_CANONICAL_LAST = (b"AEIMQUYcgkosw048", b"AQgw")


def b64url_decode(segment: bytes) -> bytes:
    """joserfc's strict base64url decoding (`joserfc.util.urlsafe_b64decode`: no padding, no
    `+`/`/`, canonical last character), with binascii's strict mode doing the rest; proven to
    decide alike in tests/unit/test_signature_equivalence.py. Raises binascii.Error."""
    pad = -len(segment) % 4
    if pad == 3:
        raise binascii.Error("invalid base64url length")
    if pad and segment[-1] not in _CANONICAL_LAST[pad - 1]:
        raise binascii.Error("non-canonical base64url")
    return binascii.a2b_base64(segment.translate(_FROM_URLSAFE) + b"=" * pad, strict_mode=True)


@dataclass(frozen=True, slots=True)
class Header:
    """A protected header as joserfc reads it, what joserfc's header rules say of it, and our
    own header rules' verdict (`refusal`), decided once per distinct header."""

    fields: Mapping[str, object]
    problem: str | None
    refusal: str | None = None
    alg: str = ""
    kid: str | None = None


def judge_header(fields: dict[str, object], problem: str | None) -> Header:
    """The header with our own verdict on it: refused before any key is looked at for its
    algorithm, token type, `crit` or the `kid`'s type, checked in that order."""
    view = MappingProxyType(fields)
    alg = fields.get("alg")
    # The type first: a list or object `alg` cannot be looked up in a set (it would raise).
    if not isinstance(alg, str) or alg not in ALLOWED_ALGORITHMS:
        return Header(view, problem, f"alg {alg!r} is not accepted (accepted: {_ALLOWED_TEXT})")
    typ = fields.get("typ")
    if typ is not None and (not isinstance(typ, str) or typ.lower() not in _TYPES):
        return Header(view, problem, f"typ {typ!r} is not a JWT access token type")
    if "crit" in fields:
        return Header(
            view, problem, "token header has crit parameters, none of which are supported"
        )
    kid = fields.get("kid")
    if kid is not None and not isinstance(kid, str):
        return Header(view, problem, "kid is not a string")
    return Header(view, problem, None, alg, kid)


@functools.lru_cache(maxsize=256)
def decode_header(segment: bytes) -> Header:
    """The header segment decoded and checked once: a provider's tokens share a few headers
    (alg, kid, typ), so the request path meets the same segments again and again. The fields
    are read-only, as they are shared. Raises TokenError when it is not a JSON object with alg."""
    try:
        fields = orjson.loads(b64url_decode(segment))
    except (binascii.Error, orjson.JSONDecodeError) as exc:
        raise TokenError(f"malformed token: Invalid header ({exc})") from exc
    if not isinstance(fields, dict):
        raise TokenError("malformed token: header is not a JSON object")
    if "alg" not in fields:
        raise TokenError("malformed token: missing_algorithm: Missing 'alg' value in header")
    if "b64" in fields and fields["b64"] is not True:
        # RFC 7797's unencoded payload needs `crit`, which no accepted token has.
        raise TokenError("malformed token: unencoded payloads (b64) are not supported")
    problem = None
    try:
        REGISTRY.check_header(fields)
    except (JoseError, ValueError, TypeError) as exc:
        problem = f"signature check failed: {exc}"
    return judge_header(fields, problem)


class CompactToken(NamedTuple):
    """A JWS compact token split and decoded as `joserfc.jws.extract_compact` would, the
    signature kept encoded until it is checked. A named tuple: as immutable as a frozen
    dataclass, built without its four `object.__setattr__` calls (one per cache miss)."""

    header: Header
    signing_input: bytes
    payload: bytes
    signature: bytes


def parse_token(token: str) -> CompactToken:
    """Split and decode the token; raise TokenError when it is malformed."""
    if len(token) > MAX_TOKEN_BYTES:
        raise TokenError(f"token is longer than {MAX_TOKEN_BYTES} bytes")
    try:
        raw = token.encode("ascii")
    except UnicodeError as exc:
        raise TokenError("malformed token: it is not ASCII") from exc
    parts = raw.split(b".")
    if len(parts) != 3:
        raise TokenError(
            "malformed token: expected three dot-separated parts (header.payload.signature)"
        )
    head, payload, signature = parts
    if len(head) > REGISTRY.max_header_length or len(signature) > REGISTRY.max_signature_length:
        raise TokenError("malformed token: its header or signature is longer than JWS allows")
    header = decode_header(head)
    try:
        decoded = b64url_decode(payload)
    except binascii.Error as exc:
        raise TokenError("malformed token: Invalid payload") from exc
    return CompactToken(header, raw[: len(head) + 1 + len(payload)], decoded, signature)


class ParsedToken(NamedTuple):
    """A token split and decoded, not yet verified: what picking its provider needs, kept so
    that verifying it does not decode it again."""

    compact: CompactToken
    payload: object

    @property
    def issuer(self) -> object:
        """The `iss` it claims (unverified: only to pick whose keys check it)."""
        return self.payload.get("iss") if isinstance(self.payload, dict) else None


def parse_unverified(token: str) -> ParsedToken:
    """Split and decode a token without checking anything but its shape."""
    compact = parse_token(token)
    try:
        payload = orjson.loads(compact.payload)
    except orjson.JSONDecodeError as exc:
        raise TokenError("malformed token: payload is not JSON") from exc
    return ParsedToken(compact, payload)


def signature_verifies(compact: CompactToken, check: SignatureCheck) -> bool:
    """What `joserfc.jws.validate_compact` decides, with its header rules applied once per header
    (`decode_header`) and the algorithm's check prepared at load (`VerificationKey.checks`):
    the header rules, strict base64url for the signature, and the signature check."""
    if compact.header.problem is not None:
        raise TokenError(compact.header.problem)
    try:
        signature = b64url_decode(compact.signature)
    except binascii.Error:
        return False
    return check(compact.signing_input, signature)


def verify_token(
    token: str,
    keyset: Keyset,
    rules: TokenRules,
    now: float,
    parsed: ParsedToken | None = None,
) -> dict[str, object]:
    """Verify signature, claims and token kind; return the claims or raise TokenError."""
    compact = parsed.compact if parsed else parse_token(token)
    verdict = compact.header
    if verdict.refusal is not None:
        raise TokenError(verdict.refusal)
    header, alg, kid = verdict.fields, verdict.alg, verdict.kid
    key = keyset.find(kid)
    if key is None:
        raise UnknownKeyId(
            f"no key with kid {kid!r} in the issuer's keyset" if kid else "token header has no kid"
        )
    check = key.checks.get(alg)
    if check is None:
        raise TokenError(
            f"alg {alg} cannot be verified with key {kid!r} "
            f"(it allows {', '.join(sorted(key.algorithms))})"
        )
    if not signature_verifies(compact, check):
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
