"""DPoP proofs as a client makes them, and as an attacker bends them: real keys (joserfc), any
header and claims, signed with joserfc's own algorithm models so that the header may hold
what joserfc's signing helpers would refuse (a private jwk, `crit`, `alg: none`)."""

from __future__ import annotations

import hashlib
import json
import uuid
from typing import Any

import orjson
from joserfc.jwk import ECKey, Key, OctKey, OKPKey, RSAKey
from joserfc.jws import JWSRegistry
from joserfc.util import urlsafe_b64encode

from mcp_oauth_gateway.dpop import ProofRules, verify_proof

NOW = 1_800_000_000.0
HTU = "https://gw.example/mcp"
METHOD = "POST"
TOKEN = "eyJhbGciOiJFUzI1NiJ9.eyJzdWIiOiJ1c2VyIn0.c2lnbmF0dXJl"

# Generated once: RSA takes a while, and every test may use every key.
KEYS: dict[str, Key] = {
    "ES256": ECKey.generate_key("P-256"),
    "ES384": ECKey.generate_key("P-384"),
    "ES512": ECKey.generate_key("P-521"),
    "RS256": RSAKey.generate_key(2048),
    "PS256": RSAKey.generate_key(2048),
    "EdDSA": OKPKey.generate_key("Ed25519"),
    "Ed25519": OKPKey.generate_key("Ed25519"),
}
OTHER_EC = ECKey.generate_key("P-256")
HMAC_KEY = OctKey.generate_key(256)


def b64(data: bytes) -> str:
    """base64url without padding."""
    return urlsafe_b64encode(data).decode("ascii")


def public_jwk(key: Key) -> dict[str, Any]:
    """The public JWK of a key, as a client puts it in a proof header."""
    return dict(key.as_dict(private=False))


def ath(token: str = TOKEN) -> str:
    """RFC 9449's `ath`, computed here independently of the code under test."""
    return b64(hashlib.sha256(token.encode("ascii")).digest())


def rfc7638(jwk: dict[str, Any]) -> str:
    """RFC 7638 §3: SHA-256 of the required members in lexicographic order, no whitespace."""
    required = {
        "EC": ("crv", "kty", "x", "y"),
        "RSA": ("e", "kty", "n"),
        "OKP": ("crv", "kty", "x"),
    }
    members = {name: jwk[name] for name in required[jwk["kty"]]}
    canonical = json.dumps(members, separators=(",", ":"), sort_keys=True)
    return b64(hashlib.sha256(canonical.encode()).digest())


def claims(**changes: Any) -> dict[str, Any]:
    """The claims of a valid proof for HTU with TOKEN at NOW; `name=None` removes a claim."""
    base: dict[str, Any] = {
        "jti": str(uuid.uuid4()),
        "htm": METHOD,
        "htu": HTU,
        "iat": int(NOW),
        "ath": ath(),
    }
    base.update(changes)
    return {name: value for name, value in base.items() if value is not None}


def header(alg: str = "ES256", key: Key | None = None, **changes: Any) -> dict[str, Any]:
    """The header of a valid proof; `name=None` removes a member."""
    base: dict[str, Any] = {
        "typ": "dpop+jwt",
        "alg": alg,
        "jwk": public_jwk(key or KEYS[alg]),
    }
    base.update(changes)
    return {name: value for name, value in base.items() if value is not None}


def sign(head: dict[str, Any], body: dict[str, Any] | bytes, key: Key, alg: str) -> str:
    """A compact JWS of exactly this header and payload, signed by `alg`'s joserfc model."""
    payload = body if isinstance(body, bytes) else orjson.dumps(body)
    signing_input = b64(orjson.dumps(head)) + "." + b64(payload)
    signature = JWSRegistry.algorithms[alg].sign(signing_input.encode("ascii"), key)
    return signing_input + "." + b64(signature)


def proof(alg: str = "ES256", head: dict[str, Any] | None = None, **claim_changes: Any) -> str:
    """A proof signed with KEYS[alg] (header `head`, else a valid one) with changed claims."""
    return sign(head or header(alg), claims(**claim_changes), KEYS[alg], alg)


def check(value: str | bytes | list[str | bytes], **options: Any) -> Any:
    """verify_proof for METHOD to HTU at NOW with TOKEN, unless `options` say otherwise."""
    values = value if isinstance(value, list) else [value]
    arguments: dict[str, Any] = {
        "method": METHOD,
        "htu": HTU,
        "now": NOW,
        "rules": ProofRules(),
        "access_token": TOKEN,
        "jkt": None,
    }
    arguments.update(options)
    return verify_proof(values, **arguments)
