"""JWT authentication stage: 401 with a `WWW-Authenticate` challenge, or claims; in Optional and
Permissive modes, or an anonymous caller (no claims) for the later stages to judge."""

from __future__ import annotations

import logging
import time

from ..asgi import (
    CLAIMS_KEY,
    TOKEN_KEY,
    ASGIApp,
    Headers,
    Receive,
    Scope,
    Send,
)
from ..controlplane.control import Keyholder
from ..controlplane.snapshot import CompiledMcp, CompiledProvider
from ..providers.access_tokens import access_token_rule
from .challenge import Challenger
from .metrics import Metrics
from .tokens import TokenError, TokenRules, UnknownKeyId, verify_token

log = logging.getLogger("mcp_oauth_gateway.authn")

CACHE_SIZE = 10_000
_BEARER = b"bearer "


class JwtAuthentication:
    """Verifies the bearer token; on success the claims go to `scope[CLAIMS_KEY]`. In Optional
    and Permissive modes a caller without a (valid) token goes on without claims: anonymous."""

    def __init__(
        self,
        app: ASGIApp,
        provider: CompiledProvider,
        keys: Keyholder,
        mcp: CompiledMcp | None,
        forward_token: bool,
        metrics: Metrics | None = None,
        mode: str = "Strict",
    ):
        self.app = app
        self.keys = keys
        self.rules = TokenRules(
            issuer=provider.issuer,
            audiences=provider.audiences,
            access_token=access_token_rule(mcp.provider if mcp else None),
        )
        self.challenger = challenger_for(mcp)
        self.forward_token = forward_token
        self.metrics = metrics
        self.mode = mode
        # token → (claims, exp, keyset version); bounded, insertion-ordered for cheap eviction.
        self._cache: dict[str, tuple[dict[str, object], float, int]] = {}

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
                await self._deny(scope, send, "missing bearer token", token_sent=False)
            else:
                await self.app(scope, receive, send)
            return
        token = raw[7:].strip().decode("latin-1")
        try:
            claims = await self._verify(token)
        except TokenError as exc:
            if self.mode != "Permissive":
                await self._deny(scope, send, str(exc), token_sent=True)
                return
            # Recorded, and the caller goes on as anonymous; the token never reaches the backend.
            if self.metrics is not None:
                self.metrics.auth_failure(str(exc))
            log.info("token not accepted, request continues anonymously (Permissive): %s", exc)
            await self.app(scope, receive, send)
            return
        scope[CLAIMS_KEY] = claims
        scope[TOKEN_KEY] = token
        if self.forward_token:
            others.insert(at, (b"authorization", raw))
        await self.app(scope, receive, send)

    async def _verify(self, token: str) -> dict[str, object]:
        keyset = self.keys.keyset
        if keyset is None:
            raise TokenError(
                f"the signing keyset ({self.keys.url}) is not yet available; "
                f"requests fail closed until it is fetched"
            )
        now = time.time()
        hit = self._cache.get(token)
        if hit is not None and hit[2] == keyset.version and now <= hit[1] + self.rules.leeway:
            return hit[0]
        try:
            claims = verify_token(token, keyset, self.rules, now)
        except UnknownKeyId:
            if not await self.keys.refetch_for_unknown_kid() or self.keys.keyset is None:
                raise
            keyset = self.keys.keyset
            claims = verify_token(token, keyset, self.rules, now)
        if len(self._cache) >= CACHE_SIZE:
            del self._cache[next(iter(self._cache))]
        exp = claims["exp"]  # verify_token checked it is a number
        self._cache[token] = (
            claims,
            float(exp) if isinstance(exp, int | float) else 0.0,
            keyset.version,
        )
        return claims

    async def _deny(self, scope: Scope, send: Send, why: str, token_sent: bool) -> None:
        if self.metrics is not None:
            self.metrics.auth_failure(why)
        await self.challenger.unauthorized(scope, send, why, token_sent)


def challenger_for(mcp: CompiledMcp | None) -> Challenger:
    """The 401 a route sends: its metadata (with `mcp`) and the scopes to sign in with."""
    if mcp is None:
        return Challenger(None, None)
    return Challenger(mcp.prm_path, " ".join(mcp.scopes_supported) or None)
