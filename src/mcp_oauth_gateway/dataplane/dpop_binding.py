"""DPoP at the resource server (RFC 9449 §7): the scheme a request presents its token with,
the key the token is bound to, what a provider's `dpop` mode makes of the two, and the proof
checked for every request that presents a bound token.

A bound token is accepted only as `Authorization: DPoP` with a proof signed by its key for this
very request (method, URL, token hash), made within the provider's `maxAge` and never seen
before; the same token as `Bearer` is refused (§7.2), whatever the mode. The proof is checked
on every request: the verified-token cache spares the token's signature, never the proof's.

The decisions are pure functions (`parse_credentials`, `bound_key`, `mode_refusal`); the one
I/O, remembering each proof's `jti` (and, with nonces, reading the key every replica shares),
is `dpop.ProofCheck`'s (the Broker's token endpoint checks its proofs with one too).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Protocol

from ..asgi import Scope
from ..controlplane.snapshot import CompiledDpop
from ..dpop import BoundToken, ProofCheck, offered_algorithms, request_htu
from .tokens import TokenError

BEARER = "Bearer"
DPOP = "DPoP"
_SCHEMES = {b"bearer": BEARER, b"dpop": DPOP}

__all__ = [
    "BEARER",
    "DPOP",
    "ProofCheck",
    "SealedTokens",
    "bound_key",
    "mode_refusal",
    "offered_algorithms",
    "parse_credentials",
    "request_htu",
    "resource_metadata",
]


class SealedTokens(Protocol):
    """The DPoP-bound tokens a Broker route issued for its providers' bearer tokens
    (`dpop.bound_tokens`): opened with the route's key, given by the Broker."""

    async def open(self, scope: Scope, token: str) -> BoundToken:
        """What a sealed token presented with this request holds; SealError (or
        RedisUnavailable while the key cannot be had) otherwise."""
        ...


def resource_metadata(settings: Sequence[CompiledDpop]) -> dict[str, object]:
    """The RFC 9728 §2 DPoP members of a route's protected resource metadata: the proof
    algorithms, and whether every token must be DPoP-bound (every provider `Required`)."""
    algorithms = offered_algorithms(settings)
    if not algorithms:
        return {}
    required = all(s.mode == "Required" for s in settings)
    return {
        "dpop_signing_alg_values_supported": list(algorithms),
        "dpop_bound_access_tokens_required": required,
    }


def parse_credentials(raw: bytes | None) -> tuple[str, str] | None:
    """(`Bearer` or `DPoP`, token) of an `Authorization` value (the scheme case-insensitive,
    RFC 9110 §11.1); None when it holds neither with a token."""
    if raw is None:
        return None
    scheme, _, rest = raw.partition(b" ")
    name = _SCHEMES.get(scheme.lower())
    token = rest.strip()
    if name is None or not token:
        return None
    return name, token.decode("latin-1")


# The registered confirmation methods (IANA "JWT Confirmation Methods": RFC 7800 §3.1, RFC
# 8705 §3.1, RFC 9203) other than `jkt`: each binds a token to what no DPoP proof shows.
UNCHECKED_METHODS = frozenset({"jwk", "jwe", "jku", "kid", "x5t#S256", "osc"})


def bound_key(claims: Mapping[str, object]) -> str | None:
    """The RFC 7638 thumbprint a verified token is bound to (`cnf.jkt`), or None for a bearer
    token; TokenError for a `cnf` that binds it by anything the gateway cannot check (taking
    the token as a bearer token would undo that binding).

    Members no registry knows are read only beside `jkt`, as qualifying it (Keycloak adds
    `kc-jkt-type: DPoP`); alone they may be a binding of their own, and are refused."""
    cnf = claims.get("cnf")
    if cnf is None:
        return None
    if not isinstance(cnf, dict):
        raise TokenError("the token's cnf claim is not a JSON object")
    methods = sorted(UNCHECKED_METHODS.intersection(cnf))
    unknown = sorted(name for name in cnf if name != "jkt" and name not in UNCHECKED_METHODS)
    if methods or (unknown and cnf.get("jkt") is None):
        raise TokenError(
            f"the token is bound by cnf {', '.join(methods or unknown)}, which the gateway "
            "cannot check; ask for a DPoP-bound (cnf.jkt) or an unbound token"
        )
    jkt = cnf.get("jkt")
    if jkt is None:
        return None
    if not isinstance(jkt, str) or not jkt:
        raise TokenError("the token's cnf.jkt is not a non-empty string (a key thumbprint)")
    return jkt


def mode_refusal(mode: str, scheme: str, jkt: str | None) -> str | None:
    """Why the provider's `dpop` mode refuses a token presented with `scheme`, bound to `jkt`
    (None: unbound); None when it does not."""
    if mode == "Disabled":
        if scheme == DPOP or jkt is not None:
            return (
                "this route takes this provider's tokens as Bearer tokens only (dpop: Disabled), "
                "and this one is DPoP-bound or sent with the DPoP scheme; ask for an unbound token"
            )
        return None
    if scheme == BEARER and jkt is not None:
        return (
            "the token is DPoP-bound (cnf.jkt): send it as 'Authorization: DPoP <token>' with a "
            "DPoP proof signed by its key, never as a Bearer token"
        )
    if jkt is None and mode == "Required":
        return (
            "this route accepts DPoP-bound tokens only (dpop: Required); ask the authorization "
            "server for a DPoP-bound token (send a DPoP proof with the token request)"
        )
    if scheme == DPOP and jkt is None:
        return (
            "the token is not DPoP-bound (it has no cnf.jkt), so no DPoP proof can hold it; "
            "send it as 'Authorization: Bearer <token>'"
        )
    return None
