"""The JOSE header of a DPoP proof (RFC 9449 §4.2, §4.3 checks 4 to 7): its type, its asymmetric
algorithm and the public key it carries, imported with joserfc, and that key's RFC 7638
thumbprint (the `jkt` a token is bound to).

A client signs every proof with the same key, so its proofs share one header segment: the
segment is judged and its key imported once (`read_header` is cached), and a proof then costs
its signature check and its claims.
"""

from __future__ import annotations

import binascii
import functools
from dataclasses import dataclass

import orjson
from joserfc.errors import JoseError
from joserfc.jwk import JWKRegistry, Key
from joserfc.jws import JWSRegistry
from joserfc.util import urlsafe_b64decode

from ..controlplane.keys import SignatureCheck, signature_check
from .errors import refused, shown

# Registered asymmetric JWS algorithms (RFC 7518 §3, RFC 8037, RFC 9864); `none` and the
# HMAC family can never sign a proof (RFC 9449 §4.3 check 5, §11.6).
ASYMMETRIC_ALGORITHMS = frozenset(
    {
        "ES256",
        "ES384",
        "ES512",
        "PS256",
        "PS384",
        "PS512",
        "RS256",
        "RS384",
        "RS512",
        "EdDSA",
        "Ed25519",
    }
)
# The key type each algorithm needs (a proof's jwk must be of that type).
_KEY_TYPES = {"ES": "EC", "PS": "RSA", "RS": "RSA", "Ed": "OKP"}
# RFC 7518 §6.2.2, §6.3.2, RFC 8037 §2 and RFC 7518 §6.4: members only a private (or secret)
# key has. A proof carrying any of them has leaked its key, so it is refused even if the rest
# would import as a public key.
_PRIVATE_MEMBERS = frozenset({"d", "p", "q", "dp", "dq", "qi", "oth", "k"})
# RFC 7518 §3.3: 2048 bits at least; the upper bounds keep one proof's check cheap (verifying
# costs the modulus' size times the exponent's).
_RSA_BITS = (2048, 4096)
_RSA_MAX_EXPONENT = 2**32
_SIGNING_CURVES = frozenset({"Ed25519", "Ed448"})
_TYPES = frozenset({"dpop+jwt", "application/dpop+jwt"})
_REFERENCES = ("kid", "jku", "x5c", "x5u")
_HEADER_CACHE_ENTRIES = 512


@dataclass(frozen=True, slots=True)
class ProofHeader:
    """A proof header found sound: its algorithm, its key, that key's thumbprint, and the
    signature check prepared for both."""

    alg: str
    key: Key
    jkt: str
    check: SignatureCheck


def decode_json(segment: bytes, part: str) -> dict[str, object]:
    """A JWS segment's JSON object (strict base64url, as joserfc reads it)."""
    try:
        value = orjson.loads(urlsafe_b64decode(segment))
    except (binascii.Error, ValueError) as exc:
        raise refused(f"the DPoP proof's {part} is not base64url-encoded JSON") from exc
    if not isinstance(value, dict):
        raise refused(f"the DPoP proof's {part} is not a JSON object")
    return value


@functools.lru_cache(maxsize=_HEADER_CACHE_ENTRIES)
def read_header(segment: bytes, algorithms: frozenset[str]) -> ProofHeader:
    """The header segment judged against `algorithms` (a subset of ASYMMETRIC_ALGORITHMS),
    its key imported; DpopError saying what is wrong."""
    fields = decode_json(segment, "header")
    typ = fields.get("typ")
    if not isinstance(typ, str) or typ.lower() not in _TYPES:
        raise refused(f"the DPoP proof's typ is {shown(typ)}; it must be 'dpop+jwt'")
    if "crit" in fields:
        raise refused("the DPoP proof's header has crit parameters, none of which are supported")
    if "b64" in fields and fields["b64"] is not True:
        raise refused("the DPoP proof's payload must be base64url-encoded (b64 is not supported)")
    alg = fields.get("alg")
    if not isinstance(alg, str) or alg not in algorithms:
        raise refused(
            f"the DPoP proof's alg {shown(alg)} is not accepted; sign with one of "
            + ", ".join(sorted(algorithms))
        )
    jwk = fields.get("jwk")
    if jwk is None:
        named = [name for name in _REFERENCES if name in fields]
        also = f" ({', '.join(named)} cannot name it)" if named else ""
        raise refused(f"the DPoP proof's header has no jwk: put the public key in it{also}")
    key = _import(jwk, alg)
    return ProofHeader(alg, key, key.thumbprint(), _check_for(key, alg))


def _import(jwk: object, alg: str) -> Key:
    """The public key of a header's `jwk`, of the type `alg` needs."""
    if not isinstance(jwk, dict):
        raise refused("the DPoP proof's jwk is not a JSON object (a JWK)")
    private = sorted(_PRIVATE_MEMBERS.intersection(jwk))
    if private:
        raise refused(
            f"the DPoP proof's jwk holds private key members ({', '.join(private)}); "
            "send the public key only, and make a new key pair: this one has leaked"
        )
    kty = jwk.get("kty")
    needed = _KEY_TYPES[alg[:2]]
    if kty != needed:
        raise refused(f"the DPoP proof's jwk has kty {shown(kty)}; alg {alg} needs {needed}")
    if kty == "OKP" and jwk.get("crv") not in _SIGNING_CURVES:
        # X25519 and X448 are OKP keys too, for key agreement: they cannot sign.
        raise refused(f"the DPoP proof's jwk has crv {shown(jwk.get('crv'))}; use Ed25519")
    try:
        if kty == "RSA":
            _check_rsa_size(jwk.get("n"), jwk.get("e"))
        key = JWKRegistry.import_key(dict(jwk))
    except (JoseError, ValueError, TypeError) as exc:
        raise refused(f"the DPoP proof's jwk is not a valid {needed} public key ({exc})") from exc
    if key.is_private:
        raise refused("the DPoP proof's jwk is a private key; send the public key only")
    return key


def _check_rsa_size(n: object, e: object) -> None:
    """Before the key is imported (joserfc would warn about a small one, and import any)."""
    if not isinstance(n, str) or not isinstance(e, str):
        raise ValueError("n and e must be strings")
    bits = int.from_bytes(urlsafe_b64decode(n.encode("ascii")), "big").bit_length()
    low, high = _RSA_BITS
    if not low <= bits <= high:
        raise refused(f"the DPoP proof's RSA key has {bits} bits; use {low} to {high} bits")
    if int.from_bytes(urlsafe_b64decode(e.encode("ascii")), "big") >= _RSA_MAX_EXPONENT:
        raise refused("the DPoP proof's RSA public exponent is too large; use 65537")


def _check_for(key: Key, alg: str) -> SignatureCheck:
    """joserfc's model for `alg` checked against the key (type, curve, use, key_ops, alg)."""
    # The registry's table, not get_alg: that warns on every EdDSA lookup (RFC 9864
    # deprecates the name); `alg` is one of ASYMMETRIC_ALGORITHMS.
    model = JWSRegistry.algorithms[alg]
    try:
        model.check_key(key)
        return signature_check(model, key)
    except (JoseError, ValueError) as exc:
        raise refused(f"the DPoP proof's jwk cannot verify alg {alg} ({exc})") from exc
