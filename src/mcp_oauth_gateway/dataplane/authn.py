"""JWT authentication stage: 401 with a `WWW-Authenticate` challenge, or claims; in Optional and
Permissive modes, or an anonymous caller (no claims) for the later stages to judge."""

from __future__ import annotations

import logging
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .. import audit
from ..asgi import (
    CLAIMS_KEY,
    DEFAULT_TOKEN_CACHE_ENTRIES,
    DPOP_KEY,
    PROVIDER_TOKEN_KEY,
    TOKEN_KEY,
    ASGIApp,
    Headers,
    Message,
    Receive,
    Scope,
    Send,
    send_error,
)
from ..controlplane.keys import Keyset
from ..controlplane.snapshot import CompiledMcp, CompiledProvider
from ..dpop import (
    SEALED_PREFIX,
    USE_DPOP_NONCE,
    DpopError,
    MemoryReplayCache,
    ReplayCacheFull,
    SealError,
)
from ..providers.access_tokens import access_token_rule
from ..redis_clients import RedisUnavailable
from ..urls import shown_url
from .bounded import BoundedCache, CacheCounts
from .challenge import Challenger, Refusal
from .dpop_binding import (
    BEARER,
    DPOP,
    ProofCheck,
    SealedTokens,
    bound_key,
    mode_refusal,
    offered_algorithms,
    parse_credentials,
)
from .metrics import Metrics
from .tokens import (
    LEEWAY,
    NUMBER_TYPES,
    ParsedToken,
    TokenError,
    TokenRules,
    UnknownKeyId,
    check_claims,
    parse_unverified,
    verify_token,
)

log = logging.getLogger("mcp_oauth_gateway.authn")
STAGE = "jwt-authentication"

MISSING_TOKEN = "Unauthorized: missing bearer token"
DPOP_UNAVAILABLE = (
    "the gateway cannot record DPoP proofs right now (each is accepted once); try again shortly"
)


class KeySource(Protocol):
    """Where an issuer's current keyset is had: a fetched or inline JWKS (`Keyholder`), or
    the key of the tokens the Broker issues to workloads."""

    @property
    def keyset(self) -> Keyset | None:
        """The keys, or None while none are available."""
        ...

    @property
    def shown(self) -> str:
        """How messages name where the keys come from."""
        ...

    async def refetch_for_unknown_kid(self) -> bool:
        """Fetch again for a token naming an unknown `kid`; False when not done."""
        ...


@dataclass(frozen=True, slots=True, eq=False)
class Issuer:
    """One provider as this stage sees it: the rules its tokens must meet, its keys, its
    `dpop` mode, and where it is among the route's providers."""

    rules: TokenRules
    keys: KeySource
    dpop_mode: str = "Allowed"
    index: int = 0


class JwtAuthentication:
    """Verifies the bearer token; on success the claims go to `scope[CLAIMS_KEY]`. In Optional
    and Permissive modes a caller without a (valid) token goes on without claims: anonymous.

    On a Broker route (`sealed`), a DPoP-bound token the Broker sealed is opened: the
    provider's token inside is verified as any, and the claims say it is bound to the sealed
    key (`cnf.jkt`), so that it is held to that key exactly as a provider's bound token is."""

    def __init__(
        self,
        app: ASGIApp,
        providers: Sequence[tuple[CompiledProvider, KeySource]],
        mcp: CompiledMcp | None,
        forward_token: bool,
        metrics: Metrics | None = None,
        mode: str = "Strict",
        cache_entries: int = DEFAULT_TOKEN_CACHE_ENTRIES,
        counts: CacheCounts | None = None,
        proofs: ProofCheck | None = None,
        sealed: SealedTokens | None = None,
    ):
        self.app = app
        self.sealed = sealed
        self.issuers = tuple(
            Issuer(
                TokenRules(
                    issuer=provider.issuer,
                    audiences=provider.audiences,
                    access_token=access_token_rule(provider.kind),
                ),
                keys,
                provider.dpop.mode,
                index,
            )
            for index, (provider, keys) in enumerate(providers)
        )
        self.by_issuer = {issuer.rules.issuer: issuer for issuer in self.issuers}
        compiled = [provider for provider, _ in providers]
        self.challenger = challenger_for(mcp, compiled)
        # Whether the DPoP scheme is read at all: not when every provider is Disabled (then it
        # is an unknown scheme, as at a server without DPoP, RFC 9449 §7.2).
        self.takes_dpop = any(provider.dpop.enabled for provider in compiled)
        self.proofs = proofs or ProofCheck(
            [provider.dpop for provider in compiled], MemoryReplayCache
        )
        self.forward_token = forward_token
        self.metrics = metrics
        self.mode = mode
        # token → (claims, exp, issuer, keyset version)
        self._cache: BoundedCache[str, tuple[dict[str, object], float, Issuer, int]] = BoundedCache(
            cache_entries,
            counts if counts is not None else metrics.token_cache if metrics is not None else None,
        )
        self._counts = self._cache.counts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        raw, at, proofs = take_credentials(scope)
        credentials = parse_credentials(raw)
        if credentials is None or (credentials[0] == DPOP and not self.takes_dpop):
            if self.mode == "Strict":
                # "Unauthorized" in the text: MCP Inspector 0.15 (with a current SDK) starts
                # signing in only when the error it is shown says 401 or Unauthorized.
                await self._deny(scope, send, MISSING_TOKEN, None)
            else:
                await self.app(scope, receive, send)
            return
        scheme, token = credentials
        try:
            if self.sealed is None:
                # No token here holds another: its own claims, without a layer to get them.
                claims, issuer = await self._verify(token)
                held = token
            else:
                claims, issuer, held = await self._presented(scope, token)
            if scheme == BEARER and "cnf" not in claims and issuer.dpop_mode != "Required":
                # An unbound bearer token under a mode that takes it: nothing to bind or prove.
                fresh_nonce = None
            else:
                fresh_nonce = await self._bound(scope, scheme, token, claims, issuer, proofs)
        except (KeysetPending, ReplayCacheFull, RedisUnavailable) as exc:
            await _unavailable(scope, send, exc)
            return
        except (TokenError, DpopError) as exc:
            refusal = _refusal(exc, scheme)
            # A nonce is a step of the protocol, not a bad token: asked for even in Permissive.
            if self.mode != "Permissive" or refusal.code == USE_DPOP_NONCE:
                await self._deny(scope, send, refusal.why, token, refusal)
            else:
                await self._anonymous(scope, receive, send, refusal.why.replace(token, "[token]"))
            return
        scope[CLAIMS_KEY] = claims
        scope[TOKEN_KEY] = token
        if held is not token:
            scope[PROVIDER_TOKEN_KEY] = held
        if scheme == DPOP:
            scope[DPOP_KEY] = self.challenger.dpop_algs
        if self.forward_token:
            assert raw is not None  # credentials were read from it
            # A sealed token's backend gets the provider's token inside, never the seal.
            value = raw if held is token else b"Bearer " + held.encode("latin-1")
            scope["headers"].insert(at, (b"authorization", value))
        await self.app(
            scope, receive, send if fresh_nonce is None else _with_nonce(send, fresh_nonce)
        )

    async def _anonymous(self, scope: Scope, receive: Receive, send: Send, why: str) -> None:
        """Permissive mode: the refusal recorded, and the caller goes on as anonymous (the
        token never reaches the backend)."""
        if self.metrics is not None:
            self.metrics.auth_failure(why)
        log.info("token not accepted, request continues anonymously (Permissive): %s", why)
        audit.note(scope, f"token not accepted ({why}); went on anonymously (Permissive)")
        await self.app(scope, receive, send)

    async def _bound(
        self,
        scope: Scope,
        scheme: str,
        token: str,
        claims: dict[str, object],
        issuer: Issuer,
        proofs: list[bytes],
    ) -> str | None:
        """The token's binding judged by its provider's mode, and the proof of a bound token
        checked (every request: the proof is per request, never cached). Returns a nonce to
        give the client on the way out, if any; TokenError or DpopError when refused."""
        jkt = bound_key(claims)
        why = mode_refusal(issuer.dpop_mode, scheme, jkt)
        if why is not None:
            raise TokenError(why)
        if jkt is None:
            return None
        _, fresh = await self.proofs.check(scope, proofs, issuer.index, token, jkt)
        audit.dpop_bound(scope, jkt)
        return fresh

    async def _presented(self, scope: Scope, token: str) -> tuple[dict[str, object], Issuer, str]:
        """The claims of the token presented, its provider, and the token the backend may be
        given: the token itself, or the provider's token a Broker-sealed one holds (its
        claims then bound to the sealed key)."""
        if self.sealed is None or not token.startswith(SEALED_PREFIX):
            claims, issuer = await self._verify(token)
            return claims, issuer, token
        try:
            bound = await self.sealed.open(scope, token)
        except SealError as exc:
            raise TokenError(str(exc)) from None
        claims, issuer = await self._verify(bound.token)
        if issuer.index != bound.idp or "cnf" in claims:
            # Never sealed so by the Broker (its upstream requests carry no proof).
            raise TokenError(
                "the DPoP-bound access token holds a token of another provider, or one bound "
                "to a key of its own; sign in again"
            )
        return {**claims, "cnf": {"jkt": bound.jkt}}, issuer, bound.token

    async def verify(self, token: str) -> dict[str, object]:
        """The claims of a token this route accepts (its binding aside: for a token the
        gateway got itself, not one a request presents); TokenError otherwise."""
        claims, _ = await self._verify(token)
        return claims

    def _issuer_of(self, token: str) -> tuple[Issuer, ParsedToken | None]:
        """The one provider whose keys and rules check this token, picked by its `iss` before
        any signature check (a token no provider issued touches no keyset), and the token as
        decoded for that."""
        if len(self.issuers) == 1:
            return self.issuers[0], None  # its own rules say what is wrong with another `iss`
        parsed = parse_unverified(token)
        iss = parsed.issuer
        issuer = self.by_issuer.get(iss) if isinstance(iss, str) else None
        if issuer is None:
            names = ", ".join(repr(shown_url(i.rules.issuer)) for i in self.issuers)
            raise TokenError(f"iss {iss!r} is not one of this route's issuers ({names})")
        return issuer, parsed

    async def _verify(self, token: str) -> tuple[dict[str, object], Issuer]:
        now = time.time()
        hit = self._cache.get(token)
        if hit is not None:
            cached, expires, owner, version = hit
            current = owner.keys.keyset
            if current is not None and current.version == version and now <= expires + LEEWAY:
                self._counts.hits += 1
                return cached, owner
        # An entry past its exp or from a rotated keyset is a miss: verified again, replaced.
        self._counts.misses += 1
        issuer, parsed = self._issuer_of(token)
        keyset = issuer.keys.keyset
        if keyset is None:
            # What can be told without keys is told (a malformed, expired or foreign token is
            # 401 as it would be later); only a token the keys might accept waits.
            unverified = parsed or parse_unverified(token)
            if not isinstance(unverified.payload, dict):
                raise TokenError("malformed token: the payload is not a JSON object")
            check_claims(unverified.payload, issuer.rules, now)
            raise KeysetPending(
                f"the signing keyset ({issuer.keys.shown}) is not yet available; requests "
                "with a token fail closed until it is fetched: retry shortly"
            )
        try:
            claims = verify_token(token, keyset, issuer.rules, now, parsed)
        except UnknownKeyId:
            if not await issuer.keys.refetch_for_unknown_kid() or issuer.keys.keyset is None:
                raise
            keyset = issuer.keys.keyset
            claims = verify_token(token, keyset, issuer.rules, now, parsed)
        exp = claims["exp"]  # verify_token checked it is a number
        self._cache.put(
            token,
            (claims, float(exp) if isinstance(exp, NUMBER_TYPES) else 0.0, issuer, keyset.version),
        )
        # Expired tokens are never asked for again: without this a full cache of them would
        # outlive their users, its memory held until evicted.
        self._cache.drop_oldest_if(lambda entry: now > entry[1] + LEEWAY)
        return claims, issuer

    async def _deny(
        self,
        scope: Scope,
        send: Send,
        why: str,
        token: str | None,
        refusal: Refusal | None = None,
    ) -> None:
        """401 for a missing or refused token (`token`: the one sent, if any)."""
        if self.metrics is not None:
            self.metrics.auth_failure(why)
        # A refusal may quote what it refused: never the token itself in the audit trail.
        shown = why if token is None else why.replace(token, "[token]")
        audit.deny(scope, STAGE, shown.removeprefix("Unauthorized: "))
        await self.challenger.unauthorized(scope, send, why, token is not None, refusal)


class KeysetPending(TokenError):
    """The keys that would check the token were never fetched yet (answered 503, retry)."""


def take_credentials(scope: Scope) -> tuple[bytes | None, int, list[bytes]]:
    """Every `Authorization` and `DPoP` header taken out of the request: a second
    `Authorization`, never verified, must not reach the backend (which may read the last one),
    nor any proof (it is for the gateway). The first `Authorization` value, where it was among
    the headers left (to forward the verified one, if asked), and the `DPoP` values."""
    raw = None
    at = 0
    others: Headers = []
    proofs: list[bytes] = []
    for name, value in scope["headers"]:
        if name == b"authorization":
            if raw is None:
                raw, at = value, len(others)
        elif name == b"dpop":
            proofs.append(value)
        else:
            others.append((name, value))
    scope["headers"] = others
    return raw, at, proofs


async def _unavailable(
    scope: Scope, send: Send, exc: KeysetPending | ReplayCacheFull | RedisUnavailable
) -> None:
    """503 with Retry-After: the gateway's own wait, not the token's fault (a 401 would send a
    client with a valid token to sign in again)."""
    if isinstance(exc, KeysetPending):
        why, retry = str(exc), 1
    else:
        # Where proofs are remembered cannot take this one: never accepted unrecorded. The
        # details (a Redis address, the cache's limit) are the operator's, in the log.
        log.warning("DPoP proof not recorded, answered 503: %s", exc)
        why, retry = DPOP_UNAVAILABLE, exc.retry_after
    audit.deny(scope, STAGE, why)
    await send_error(
        send, 503, "temporarily_unavailable", why, [(b"retry-after", str(retry).encode())]
    )


def _refusal(exc: TokenError | DpopError, scheme: str) -> Refusal:
    """The 401's error code, words and nonce for a refused token or proof."""
    if isinstance(exc, DpopError):
        return Refusal(exc.description, exc.error, scheme, exc.nonce)
    return Refusal(str(exc), scheme=scheme)


def _with_nonce(send: Send, nonce: str) -> Send:
    """`send` adding the next nonce to the answer (RFC 9449 §8.2: it may ride on any)."""
    header = (b"dpop-nonce", nonce.encode("ascii"))

    async def sending(message: Message) -> None:
        if message["type"] == "http.response.start":
            message["headers"] = [*message.get("headers", ()), header]
        await send(message)

    return sending


def challenger_for(
    mcp: CompiledMcp | None, providers: Sequence[CompiledProvider] = ()
) -> Challenger:
    """The 401 a route sends: its metadata (with `mcp`), the scopes to sign in with, and the
    DPoP algorithms its providers accept (every algorithm any of them accepts)."""
    algs = offered_algorithms([p.dpop for p in providers])
    if mcp is None:
        return Challenger(None, None, algs)
    return Challenger(mcp.prm_path, " ".join(mcp.scopes_supported) or None, algs)
