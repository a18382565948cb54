"""Turn a JWKS document into an immutable keyset: `kid` → parsed key + the algorithms it may verify.

Keys are parsed here, once per fetch, so the request path only looks them up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from cryptography.exceptions import InvalidSignature
from cryptography.hazmat.primitives.asymmetric.rsa import RSAPublicKey
from joserfc.errors import JoseError
from joserfc.jwa import JWSAlgModel
from joserfc.jwk import JWKRegistry, Key
from joserfc.jws import JWSRegistry

# Asymmetric signature algorithms only: `none` and HMAC can never verify a token here.
RSA_ALGORITHMS = frozenset({"RS256", "RS384", "RS512", "PS256", "PS384", "PS512"})
EC_ALGORITHMS = {"P-256": frozenset({"ES256"}), "P-384": frozenset({"ES384"})}
OKP_ALGORITHMS = {"Ed25519": frozenset({"EdDSA"})}
ALLOWED_ALGORITHMS = RSA_ALGORITHMS | {"ES256", "ES384", "EdDSA"}
# joserfc's rules for the header and the algorithms, built once: the request path checks a
# header with it and verifies with the algorithm models it holds.
REGISTRY = JWSRegistry(algorithms=sorted(ALLOWED_ALGORITHMS))


# Whether a signature (decoded) is valid for a signing input: `check(signing_input, signature)`.
SignatureCheck = Callable[[bytes, bytes], bool]


@dataclass(frozen=True, slots=True)
class VerificationKey:
    kid: str | None
    key: Key
    # alg → joserfc's model for it, each checked against this key (type, curve, use) when the
    # keyset was parsed, so that verifying is the signature check alone.
    verifiers: Mapping[str, JWSAlgModel]
    # alg → the signature check itself, prepared from that model and this key (see
    # `signature_check`).
    checks: Mapping[str, SignatureCheck]

    @property
    def algorithms(self) -> frozenset[str]:
        """The algorithms this key may verify."""
        return frozenset(self.verifiers)


@dataclass(frozen=True, slots=True)
class Keyset:
    """Verification keys by `kid`; `version` changes whenever the fetched content changes."""

    by_kid: Mapping[str | None, VerificationKey]
    version: int
    skipped: tuple[str, ...] = field(default=())

    def find(self, kid: str | None) -> VerificationKey | None:
        """The key for `kid`; a token without `kid` matches only a keyset of exactly one key."""
        if kid is None and len(self.by_kid) == 1:
            return next(iter(self.by_kid.values()))
        return self.by_kid.get(kid)


def _algorithms_for(jwk: Mapping[str, object]) -> frozenset[str]:
    kty = jwk.get("kty")
    if kty == "RSA":
        family = RSA_ALGORITHMS
    elif kty == "EC":
        family = EC_ALGORITHMS.get(str(jwk.get("crv")), frozenset())
    elif kty == "OKP":
        family = OKP_ALGORITHMS.get(str(jwk.get("crv")), frozenset())
    else:
        family = frozenset()
    alg = jwk.get("alg")
    if isinstance(alg, str):
        return family & {alg}
    return family


def _verifiers(key: Key, algorithms: frozenset[str]) -> dict[str, JWSAlgModel]:
    """joserfc's model for each algorithm whose key checks this key passes."""
    models: dict[str, JWSAlgModel] = {}
    for alg in sorted(algorithms):
        # The registry's table, not get_alg: that warns on every EdDSA lookup (RFC 9864
        # deprecates the name); `algorithms` holds only what ALLOWED_ALGORITHMS admits.
        model = REGISTRY.algorithms[alg]
        try:
            model.check_key(key)
        except (JoseError, ValueError):
            continue  # reported by the caller if no algorithm is left
        models[alg] = model
    return models


def signature_check(model: JWSAlgModel, key: Key) -> SignatureCheck:
    """The check `model.verify(message, signature, key)` makes, prepared once. For RSA, the
    public key, padding and hash joserfc's model would use are taken now (per request it
    would look the key up, check its operations and build a hash object); other families
    call the model itself."""
    padding = getattr(model, "padding", None)
    hash_alg = getattr(model, "hash_alg", None)
    public = key.get_op_key("verify")
    if model.name in RSA_ALGORITHMS and isinstance(public, RSAPublicKey) and padding and hash_alg:
        algorithm = hash_alg()

        def rsa(message: bytes, signature: bytes) -> bool:
            try:
                public.verify(signature, message, padding, algorithm)
            except InvalidSignature:
                return False
            return True

        return rsa

    def other(message: bytes, signature: bytes) -> bool:
        return bool(model.verify(message, signature, key))

    return other


def parse_jwks(document: object, version: int) -> Keyset:
    """Parse a JWKS; unusable keys are skipped (and reported), never fatal for the others."""
    if not isinstance(document, dict) or not isinstance(document.get("keys"), list):
        raise ValueError('a JWKS must be a JSON object with a "keys" array')
    keys: dict[str | None, VerificationKey] = {}
    skipped: list[str] = []
    for index, jwk in enumerate(document["keys"]):
        label = f"key {index}"
        if not isinstance(jwk, dict):
            skipped.append(f"{label}: not an object")
            continue
        kid = jwk.get("kid")
        if kid is not None and not isinstance(kid, str):
            skipped.append(f"{label}: kid is not a string")
            continue
        label = f"key {kid!r}" if kid else label
        if jwk.get("use") not in (None, "sig"):
            skipped.append(f"{label}: use={jwk.get('use')!r} is not a signature key")
            continue
        algorithms = _algorithms_for(jwk)
        if not algorithms:
            skipped.append(
                f"{label}: kty={jwk.get('kty')!r} alg={jwk.get('alg')!r} cannot verify "
                f"any allowed algorithm"
            )
            continue
        if "d" in jwk:
            skipped.append(f"{label}: holds private key material; a JWKS must be public")
            continue
        try:
            key = JWKRegistry.import_key(dict(jwk))
        except (JoseError, ValueError, TypeError) as exc:
            skipped.append(f"{label}: {exc}")
            continue
        if kid in keys:
            skipped.append(f"{label}: duplicate kid, first one kept")
            continue
        verifiers = _verifiers(key, algorithms)
        if not verifiers:
            skipped.append(f"{label}: joserfc refuses it for {sorted(algorithms)}")
            continue
        try:
            # Also joserfc's key-operation rules (`key_ops`), once here instead of per request.
            checks = {alg: signature_check(model, key) for alg, model in verifiers.items()}
        except (JoseError, ValueError) as exc:
            skipped.append(f"{label}: cannot verify ({exc})")
            continue
        keys[kid] = VerificationKey(kid=kid, key=key, verifiers=verifiers, checks=checks)
    if not keys:
        detail = "; ".join(skipped) or "the keys array is empty"
        raise ValueError(f"the JWKS holds no usable signature key ({detail})")
    return Keyset(by_kid=keys, version=version, skipped=tuple(skipped))
