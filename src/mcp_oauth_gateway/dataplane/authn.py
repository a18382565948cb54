"""JWT authentication stage (Strict mode): 401 with a `WWW-Authenticate` challenge, or claims."""

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
    request_origin,
    send_error,
)
from ..controlplane.control import Keyholder
from ..controlplane.snapshot import CompiledMcp, CompiledProvider
from ..providers.access_tokens import access_token_rule
from .challenge import challenge
from .metrics import Metrics
from .tokens import TokenError, TokenRules, UnknownKeyId, verify_token

log = logging.getLogger("mcp_oauth_gateway.authn")

CACHE_SIZE = 10_000
_BEARER = b"bearer "


class JwtAuthentication:
    """Verifies the bearer token; on success the claims go to `scope[CLAIMS_KEY]`."""

    def __init__(
        self,
        app: ASGIApp,
        provider: CompiledProvider,
        keys: Keyholder,
        mcp: CompiledMcp | None,
        forward_token: bool,
        metrics: Metrics | None = None,
    ):
        self.app = app
        self.keys = keys
        self.rules = TokenRules(
            issuer=provider.issuer,
            audiences=provider.audiences,
            access_token=access_token_rule(mcp.provider if mcp else None),
        )
        self.prm_path = mcp.prm_path if mcp is not None else None
        self.scope_hint = " ".join(mcp.scopes_supported) if mcp and mcp.scopes_supported else None
        self.forward_token = forward_token
        self.metrics = metrics
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
        if raw is None or raw[:7].lower() != _BEARER or not raw[7:].strip():
            await self._deny(scope, send, "missing bearer token", token_sent=False)
            return
        token = raw[7:].strip().decode("latin-1")
        try:
            claims = await self._verify(token)
        except TokenError as exc:
            await self._deny(scope, send, str(exc), token_sent=True)
            return
        scope[CLAIMS_KEY] = claims
        scope[TOKEN_KEY] = token
        if self.forward_token:
            others.insert(at, (b"authorization", raw))
        scope["headers"] = others
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
        metadata = None
        if self.prm_path is not None:
            metadata = request_origin(scope) + self.prm_path
        value = challenge(metadata, self.scope_hint, why if token_sent else None)
        await send_error(send, 401, "invalid_token", why, [(b"www-authenticate", value)])
