"""DPoP at the resource server (RFC 9449 §7): the scheme a request presents its token with,
the key the token is bound to, what a provider's `dpop` mode makes of the two, and the proof
checked for every request that presents a bound token.

A bound token is accepted only as `Authorization: DPoP` with a proof signed by its key for this
very request (method, URL, token hash), made within the provider's `maxAge` and never seen
before; the same token as `Bearer` is refused (§7.2), whatever the mode. The proof is checked
on every request: the verified-token cache spares the token's signature, never the proof's.

The decisions are pure functions (`parse_credentials`, `bound_key`, `mode_refusal`); the one
I/O, remembering each proof's `jti` (and, with nonces, reading the key every replica shares),
is `ProofCheck`'s.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence

from ..asgi import Scope, request_origin
from ..controlplane.snapshot import CompiledDpop
from ..dpop import (
    DpopNonces,
    Proof,
    ProofRules,
    ReplayCache,
    check_replay,
    htu_of,
    verify_proof,
)
from .tokens import TokenError

BEARER = "Bearer"
DPOP = "DPoP"
_SCHEMES = {b"bearer": BEARER, b"dpop": DPOP}


def offered_algorithms(settings: Sequence[CompiledDpop]) -> tuple[str, ...]:
    """Every algorithm a proof may use with a token of any of these providers, in the order
    offered to clients (`algs`, `dpop_signing_alg_values_supported`); empty when none takes
    DPoP tokens."""
    algorithms = frozenset().union(*(s.algorithms for s in settings if s.enabled))
    return ProofRules(algorithms).offered if algorithms else ()


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


def request_htu(scope: Scope) -> str:
    """The URL the client sent the request to, as a proof's `htu` names it: scheme and host as
    the client used them (through trusted forwarded headers), the path as received."""
    scheme, _, host = request_origin(scope).partition("://")
    raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
    # raw_path never holds the query (ASGI); some servers leave it in: cut it off here.
    path = raw_path.partition(b"?")[0].decode("latin-1")
    return htu_of(scheme, host, path)


NonceKey = Callable[[], Awaitable[bytes]]


class ProofCheck:
    """The proofs of one route's requests: each provider's rules, the replay cache, and the
    nonces (their key read once, from where every replica reads it). The cache is asked for
    when the first proof comes (`replay`): a route that never sees one opens no connection."""

    def __init__(
        self,
        settings: Sequence[CompiledDpop],
        replay: Callable[[], ReplayCache],
        nonce_key: NonceKey | None = None,
        context: str = "",
        clock: Callable[[], float] = time.time,
    ):
        self.settings = tuple(settings)
        self._replay_source = replay
        self._replay: ReplayCache | None = None
        self.nonce_key = nonce_key
        self.context = context
        self.clock = clock
        # Built at once where no nonce is needed; with nonces, once the key is read.
        self._rules: list[ProofRules | None] = [
            None if s.require_nonce or not s.enabled else ProofRules(s.algorithms, s.max_age)
            for s in self.settings
        ]

    async def rules(self, index: int) -> ProofRules:
        """Provider `index`'s proof rules (its nonces made the first time they are needed)."""
        rules = self._rules[index]
        if rules is None:
            settings = self.settings[index]
            # Without a key every replica shares, this stage's own (its nonces hold here only).
            key = await self.nonce_key() if self.nonce_key else secrets.token_bytes(32)
            nonces = DpopNonces(key, period=settings.max_age, context=self.context)
            rules = self._rules[index] = ProofRules(settings.algorithms, settings.max_age, nonces)
        return rules

    async def check(
        self, scope: Scope, values: Sequence[bytes], index: int, token: str, jkt: str
    ) -> tuple[Proof, str | None]:
        """The request's proof, checked against provider `index`'s rules, `token` and its key
        `jkt`, and recorded as used; with it, a fresh nonce to hand the client when the one it
        used is about to expire. DpopError (or ReplayCacheFull, RedisUnavailable) otherwise."""
        rules = await self.rules(index)
        now = self.clock()
        proof = verify_proof(
            values, scope["method"], request_htu(scope), now, rules, access_token=token, jkt=jkt
        )
        if self._replay is None:
            self._replay = self._replay_source()
        await check_replay(self._replay, proof, now, rules.iat_window)
        fresh = None
        if rules.nonces is not None:
            current = rules.nonces.issue(now)
            fresh = current if proof.nonce != current else None
        return proof, fresh
