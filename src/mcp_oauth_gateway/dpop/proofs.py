"""Checking a DPoP proof (RFC 9449 §4.3, §7.1): a pure function of the request's `DPoP`
header values, its method and URL, the access token it carries, the key that token is bound
to, and the time. It answers the proof's facts (`Proof`) or a `DpopError` naming the check
that failed; one-time use of its `jti` is then `replay.check_replay`'s business (I/O).

The checks run cheapest first and the claims are judged only once the signature holds, so
that every refusal describes what the key holder sent: size and shape, the header (type,
algorithm, public key), the signature, the claims' types, `htm`, `htu`, `iat`, `ath`, the
binding to the token's `cnf.jkt`, and last the server nonce (so a client is asked for a nonce
only when nothing else is wrong with its proof).
"""

from __future__ import annotations

import binascii
import hashlib
from collections.abc import Sequence
from dataclasses import dataclass
from typing import get_args

from joserfc.errors import JoseError
from joserfc.util import urlsafe_b64decode, urlsafe_b64encode

from ..controlplane.keys import SignatureCheck
from ..resources.authentication import DpopAlgorithm
from .errors import INVALID_TOKEN, USE_DPOP_NONCE, DpopError, refused, shown
from .header import ASYMMETRIC_ALGORITHMS, decode_json, read_header
from .htu import normalize_htu
from .nonces import DpopNonces

DEFAULT_IAT_WINDOW = 300.0
# A proof is a header with one public key (an RSA-4096 JWK is under 1 KiB), a few short
# claims and a signature: 8 KiB is several times what any client sends.
MAX_PROOF_BYTES = 8192
# RFC 9449 §11.1: a jti is 96 bits of randomness or more; a UUID is 36 characters.
MAX_JTI_LENGTH = 256
_MAX_WINDOW = 3600.0
# The order algorithms are offered in (`algs="…"`, `dpop_signing_alg_values_supported`):
# the configuration's own list of them.
_PREFERENCE: tuple[str, ...] = get_args(DpopAlgorithm)


@dataclass(frozen=True, slots=True)
class ProofRules:
    """What a server accepts of a proof, decided when the configuration is loaded: the
    algorithms, how far `iat` may be from now (seconds, either way), and server nonces."""

    algorithms: frozenset[str] = ASYMMETRIC_ALGORITHMS
    iat_window: float = DEFAULT_IAT_WINDOW
    nonces: DpopNonces | None = None

    def __post_init__(self) -> None:
        unknown = sorted(self.algorithms - ASYMMETRIC_ALGORITHMS)
        if unknown or not self.algorithms:
            raise ValueError(
                f"DPoP algorithms {unknown or '[]'} are not accepted; choose among "
                + ", ".join(_PREFERENCE)
            )
        if not 0 < self.iat_window <= _MAX_WINDOW:
            raise ValueError(f"the DPoP iat window must be between 0 and {_MAX_WINDOW:g} s")

    @property
    def offered(self) -> tuple[str, ...]:
        """The algorithms in the order they are offered to clients."""
        return tuple(alg for alg in _PREFERENCE if alg in self.algorithms)


@dataclass(frozen=True, slots=True)
class Proof:
    """A verified proof: its key's RFC 7638 thumbprint and its claims (`htu` normalized)."""

    jkt: str
    jti: str
    iat: float
    htm: str
    htu: str
    nonce: str | None
    alg: str


def access_token_hash(token: str) -> str:
    """The `ath` of an access token: base64url(SHA-256(its ASCII octets)), RFC 9449 §4.2."""
    digest = hashlib.sha256(token.encode("ascii")).digest()
    return urlsafe_b64encode(digest).decode("ascii")


def verify_proof(
    values: Sequence[bytes | str],
    method: str,
    htu: str,
    now: float,
    rules: ProofRules,
    access_token: str | None = None,
    jkt: str | None = None,
) -> Proof:
    """Check the proof in `values` (every `DPoP` header value of the request) for a request
    of `method` to `htu` (from `htu_of`), presenting `access_token` (None at a token endpoint)
    bound to `jkt` (its `cnf.jkt`, or None); the Proof, or DpopError saying what to fix."""
    raw = _one_value(values)
    head, payload, signature = _segments(raw)
    header = read_header(head, rules.algorithms)
    _check_signature(header.check, raw[: len(head) + 1 + len(payload)], signature)
    proof, ath = _claims(payload, header.alg, header.jkt, access_token is not None)
    if proof.htm != method:
        raise refused(f"the DPoP proof is for method {shown(proof.htm)}; this request is {method}")
    if proof.htu != htu:
        raise refused(f"the DPoP proof is for {shown(proof.htu)}; this request is to {htu}")
    _check_iat(proof.iat, now, rules.iat_window)
    if access_token is not None:
        _check_ath(ath, access_token)
    if jkt is not None and proof.jkt != jkt:
        raise DpopError(
            INVALID_TOKEN,
            "the access token is bound to another key than the one that signed the DPoP proof; "
            "sign proofs with the key the token was issued to",
        )
    if rules.nonces is not None:
        _check_nonce(rules.nonces, proof.nonce, now)
    return proof


def _one_value(values: Sequence[bytes | str]) -> bytes:
    if not values:
        raise refused("the request has no DPoP header; send a DPoP proof with it")
    if len(values) > 1:
        raise refused("the request has more than one DPoP header; send exactly one proof")
    value = values[0]
    if isinstance(value, str):
        try:
            value = value.encode("ascii")
        except UnicodeError as exc:
            raise refused("the DPoP header is not a JWT (it holds non-ASCII characters)") from exc
    value = value.strip(b" \t")
    if len(value) > MAX_PROOF_BYTES:
        raise refused(f"the DPoP proof is longer than {MAX_PROOF_BYTES} bytes")
    if b"," in value:
        raise refused("the DPoP header holds more than one value; send exactly one proof")
    return value


def _segments(raw: bytes) -> tuple[bytes, bytes, bytes]:
    parts = raw.split(b".")
    if len(parts) != 3 or not all(parts):
        raise refused(
            "the DPoP header is not a JWT (three non-empty base64url parts separated by dots)"
        )
    return parts[0], parts[1], parts[2]


def _check_signature(check: SignatureCheck, signing_input: bytes, signature: bytes) -> None:
    try:
        decoded = urlsafe_b64decode(signature)
    except binascii.Error as exc:
        raise refused("the DPoP proof's signature is not base64url-encoded") from exc
    try:
        valid = check(signing_input, decoded)
    except (JoseError, ValueError):
        valid = False
    if not valid:
        raise refused("the DPoP proof's signature does not verify with the key in its jwk")


def _claims(payload: bytes, alg: str, jkt: str, needs_ath: bool) -> tuple[Proof, object]:
    """The proof's claims checked for presence and type, and its `ath` (not yet compared)."""
    claims = decode_json(payload, "payload")
    jti = _string(claims, "jti")
    if len(jti) > MAX_JTI_LENGTH:
        raise refused(f"the DPoP proof's jti is longer than {MAX_JTI_LENGTH} characters")
    htm = _string(claims, "htm")
    htu = normalize_htu(_string(claims, "htu"))
    iat = claims.get("iat")
    if isinstance(iat, bool) or not isinstance(iat, int | float):
        raise refused(
            "the DPoP proof's iat is missing or not a number (seconds since 1970)"
            if iat is None
            else f"the DPoP proof's iat {shown(iat)} is not a number (seconds since 1970)"
        )
    nonce = claims.get("nonce")
    if nonce is not None and (not isinstance(nonce, str) or not nonce):
        raise refused("the DPoP proof's nonce is not a non-empty string")
    if needs_ath and "ath" not in claims:
        raise refused(
            "the DPoP proof has no ath; with an access token it must carry the token's hash"
        )
    return Proof(jkt, jti, float(iat), htm, htu, nonce, alg), claims.get("ath")


def _string(claims: dict[str, object], name: str) -> str:
    value = claims.get(name)
    if value is None:
        raise refused(f"the DPoP proof has no {name} claim")
    if not isinstance(value, str) or not value:
        raise refused(f"the DPoP proof's {name} {shown(value)} is not a non-empty string")
    return value


def _check_iat(iat: float, now: float, window: float) -> None:
    if iat > now + window:
        raise refused(
            f"the DPoP proof's iat is {iat - now:.0f} s in the future (at most {window:g} s "
            "accepted); check the client's clock"
        )
    if iat < now - window:
        raise refused(
            f"the DPoP proof was made {now - iat:.0f} s ago (at most {window:g} s accepted); "
            "make a new proof for every request"
        )


def _check_ath(ath: object, access_token: str) -> None:
    try:
        expected = access_token_hash(access_token)
    except UnicodeError as exc:
        raise DpopError(INVALID_TOKEN, "the access token is not ASCII") from exc
    if ath != expected:
        raise refused(
            "the DPoP proof's ath is not the hash of the access token sent with it; "
            "ath must be base64url(SHA-256(access token))"
        )


def _check_nonce(nonces: DpopNonces, nonce: str | None, now: float) -> None:
    if nonce is None:
        raise DpopError(
            USE_DPOP_NONCE,
            "this server requires a nonce in DPoP proofs; use the DPoP-Nonce header's value",
            nonces.issue(now),
        )
    if not nonces.check(nonce, now):
        raise DpopError(
            USE_DPOP_NONCE,
            "the DPoP proof's nonce is stale or was not issued by this server; use the "
            "DPoP-Nonce header's value",
            nonces.issue(now),
        )
