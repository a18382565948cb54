"""Checking the proofs of one server's requests (RFC 9449 §4.3): the rules of each provider
whose tokens it binds or accepts, the replay cache every replica shares, and the server's own
nonces. A resource server (the JWT stage) and an authorization server (the Broker's token
endpoint) each have one; a policy's two share their nonces (`nonce_context`) and every
replica shares the replay cache (its entries name the URL a proof was for).

`verify` is the pure part (the proof for this request, its nonce); `record` remembers its
`jti`, once every other check of the request passed; `check` is both, for a resource server.
"""

from __future__ import annotations

import secrets
import time
from collections.abc import Awaitable, Callable, Sequence

from ..asgi import Scope, request_origin
from ..controlplane.snapshot import CompiledDpop
from .htu import htu_of
from .nonces import DpopNonces
from .proofs import Proof, ProofRules, verify_proof
from .replay import ReplayCache, check_replay

NonceKey = Callable[[], Awaitable[bytes]]


def offered_algorithms(settings: Sequence[CompiledDpop]) -> tuple[str, ...]:
    """Every algorithm a proof may use with a token of any of these providers, in the order
    offered to clients (`algs`, `dpop_signing_alg_values_supported`); empty when none takes
    DPoP tokens."""
    algorithms = frozenset().union(*(s.algorithms for s in settings if s.enabled))
    return ProofRules(algorithms).offered if algorithms else ()


def request_htu(scope: Scope) -> str:
    """The URL the client sent the request to, as a proof's `htu` names it: scheme and host as
    the client used them (through trusted forwarded headers), the path as received."""
    scheme, _, host = request_origin(scope).partition("://")
    raw_path = scope.get("raw_path") or scope["path"].encode("utf-8")
    # raw_path never holds the query (ASGI); some servers leave it in: cut it off here.
    path = raw_path.partition(b"?")[0].decode("latin-1")
    return htu_of(scheme, host, path)


def nonce_context(policy: str) -> str:
    """The context of one policy's nonces (`DpopNonces`): its route's resource server and, in
    Broker mode, its token endpoint share them, as one server at one origin (RFC 9449 §8, §9
    make nonces each server's own; clients keep one per origin, as the TypeScript SDK does,
    and would otherwise be asked again at every switch). Another policy's are refused."""
    return f"policy {policy}"


def proof_values(scope: Scope) -> list[bytes]:
    """Every `DPoP` header value of a request (none: no proof; two: refused by the check)."""
    return [value for name, value in scope["headers"] if name == b"dpop"]


class ProofCheck:
    """The proofs of one server's requests: each provider's rules, the replay cache, and the
    nonces (their key read once, from where every replica reads it). The cache is asked for
    when the first proof comes (`replay`): a server that never sees one opens no connection."""

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
            nonces = None
            if settings.require_nonce:
                # Without a key every replica shares, this server's own (its nonces hold here).
                key = await self.nonce_key() if self.nonce_key else secrets.token_bytes(32)
                nonces = DpopNonces(key, period=settings.max_age, context=self.context)
            rules = self._rules[index] = ProofRules(settings.algorithms, settings.max_age, nonces)
        return rules

    async def verify(
        self,
        scope: Scope,
        values: Sequence[bytes],
        index: int,
        token: str | None = None,
        jkt: str | None = None,
    ) -> tuple[Proof, str | None]:
        """The request's proof checked against provider `index`'s rules, `token` (None at a
        token endpoint) and its key `jkt`, not yet recorded; with it, a fresh nonce to hand
        the client when the one it used is about to expire. DpopError otherwise."""
        rules = await self.rules(index)
        now = self.clock()
        proof = verify_proof(
            values, scope["method"], request_htu(scope), now, rules, access_token=token, jkt=jkt
        )
        fresh = None
        if rules.nonces is not None:
            current = rules.nonces.issue(now)
            fresh = current if proof.nonce != current else None
        return proof, fresh

    async def record(self, proof: Proof, index: int) -> None:
        """Remember the proof as used; DpopError when it was (ReplayCacheFull or
        RedisUnavailable when it cannot be remembered: never accepted unrecorded)."""
        rules = await self.rules(index)
        if self._replay is None:
            self._replay = self._replay_source()
        await check_replay(self._replay, proof, self.clock(), rules.iat_window)

    async def check(
        self, scope: Scope, values: Sequence[bytes], index: int, token: str, jkt: str
    ) -> tuple[Proof, str | None]:
        """`verify` and `record` in one: the proof of a request presenting `token`."""
        proof, fresh = await self.verify(scope, values, index, token, jkt)
        await self.record(proof, index)
        return proof, fresh
