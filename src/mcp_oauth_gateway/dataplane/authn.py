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
    TOKEN_KEY,
    ASGIApp,
    Headers,
    Receive,
    Scope,
    Send,
    send_error,
)
from ..controlplane.keys import Keyset
from ..controlplane.snapshot import CompiledMcp, CompiledProvider
from ..providers.access_tokens import access_token_rule
from ..urls import shown_url
from .bounded import BoundedCache, CacheCounts
from .challenge import Challenger
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
_BEARER = b"bearer "


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
    """One provider as this stage sees it: the rules its tokens must meet, and its keys."""

    rules: TokenRules
    keys: KeySource


class JwtAuthentication:
    """Verifies the bearer token; on success the claims go to `scope[CLAIMS_KEY]`. In Optional
    and Permissive modes a caller without a (valid) token goes on without claims: anonymous."""

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
    ):
        self.app = app
        self.issuers = tuple(
            Issuer(
                TokenRules(
                    issuer=provider.issuer,
                    audiences=provider.audiences,
                    access_token=access_token_rule(provider.kind),
                ),
                keys,
            )
            for provider, keys in providers
        )
        self.by_issuer = {issuer.rules.issuer: issuer for issuer in self.issuers}
        self.challenger = challenger_for(mcp)
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
        # Every Authorization header is dropped: a second one, never verified, must not reach the
        # backend (which may read the last one). Only the verified one is forwarded, if asked.
        raw = None
        at = 0
        others: Headers = []
        for name, value in scope["headers"]:
            if name == b"authorization":
                if raw is None:
                    raw, at = value, len(others)
            else:
                others.append((name, value))
        scope["headers"] = others
        if raw is None or raw[:7].lower() != _BEARER or not raw[7:].strip():
            if self.mode == "Strict":
                # "Unauthorized" in the text: MCP Inspector 0.15 (with a current SDK) starts
                # signing in only when the error it is shown says 401 or Unauthorized.
                await self._deny(scope, send, MISSING_TOKEN, None)
            else:
                await self.app(scope, receive, send)
            return
        token = raw[7:].strip().decode("latin-1")
        try:
            claims = await self._verify(token)
        except KeysetPending as exc:
            # The gateway's own wait, not the token's fault: a 401 would send a client with a
            # valid token to sign in again. Retried shortly instead.
            audit.deny(scope, STAGE, str(exc))
            await send_error(
                send, 503, "temporarily_unavailable", str(exc), [(b"retry-after", b"1")]
            )
            return
        except TokenError as exc:
            if self.mode != "Permissive":
                await self._deny(scope, send, str(exc), token)
                return
            # Recorded, and the caller goes on as anonymous; the token never reaches the backend.
            if self.metrics is not None:
                self.metrics.auth_failure(str(exc))
            log.info("token not accepted, request continues anonymously (Permissive): %s", exc)
            why = str(exc).replace(token, "[token]")
            audit.note(scope, f"token not accepted ({why}); went on anonymously (Permissive)")
            await self.app(scope, receive, send)
            return
        scope[CLAIMS_KEY] = claims
        scope[TOKEN_KEY] = token
        if self.forward_token:
            others.insert(at, (b"authorization", raw))
        await self.app(scope, receive, send)

    async def verify(self, token: str) -> dict[str, object]:
        """The claims of a token this route accepts; TokenError otherwise."""
        return await self._verify(token)

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

    async def _verify(self, token: str) -> dict[str, object]:
        now = time.time()
        hit = self._cache.get(token)
        if hit is not None:
            cached, expires, owner, version = hit
            current = owner.keys.keyset
            if current is not None and current.version == version and now <= expires + LEEWAY:
                self._counts.hits += 1
                return cached
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
        return claims

    async def _deny(self, scope: Scope, send: Send, why: str, token: str | None) -> None:
        """401 for a missing or refused token (`token`: the one sent, if any)."""
        if self.metrics is not None:
            self.metrics.auth_failure(why)
        # A refusal may quote what it refused: never the token itself in the audit trail.
        shown = why if token is None else why.replace(token, "[token]")
        audit.deny(scope, STAGE, shown.removeprefix("Unauthorized: "))
        await self.challenger.unauthorized(scope, send, why, token is not None)


class KeysetPending(TokenError):
    """The keys that would check the token were never fetched yet (answered 503, retry)."""


def challenger_for(mcp: CompiledMcp | None) -> Challenger:
    """The 401 a route sends: its metadata (with `mcp`) and the scopes to sign in with."""
    if mcp is None:
        return Challenger(None, None)
    return Challenger(mcp.prm_path, " ".join(mcp.scopes_supported) or None)
