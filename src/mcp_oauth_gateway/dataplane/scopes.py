"""Scope checks (MCP 2026-07-28 step-up): a valid token without the scopes an operation needs is
answered 403 `insufficient_scope`, naming every scope the operation needs in one challenge, so a
client re-authorizes once with them and retries.

Granted scopes are read from `scope` (RFC 9068, space-separated) or `scp` (a list, as Entra and
Okta write it). A granted scope also grants what the policy's `implies` says it does; nothing
else is inferred (no prefix or wildcard rules)."""

from __future__ import annotations

from collections.abc import Iterable

from .. import audit
from ..asgi import (
    CLAIMS_KEY,
    DEFAULT_TOKEN_CACHE_ENTRIES,
    DPOP_KEY,
    TOKEN_KEY,
    ASGIApp,
    Receive,
    Scope,
    Send,
    request_origin,
    send_error,
    send_json,
)
from ..controlplane.snapshot import CompiledScopes
from ..dpop import dpop_challenge
from ..oauth_scopes import scope_tokens
from .bounded import BoundedCache, CacheCounts
from .challenge import challenge

INSUFFICIENT_SCOPE = "insufficient_scope"
STAGE = "required-scopes"


def granted_scopes(claims: dict[str, object], scopes: CompiledScopes) -> frozenset[str]:
    """The scopes the token grants, with what they imply."""
    raw = claims.get("scope", claims.get("scp"))
    if isinstance(raw, str):
        granted = scope_tokens(raw)
    elif isinstance(raw, list):
        granted = [s for s in raw if isinstance(s, str)]
    else:
        granted = []
    out = set(granted)
    for scope in granted:
        out |= scopes.implies.get(scope, frozenset())
    return frozenset(out)


def lacking(needed: Iterable[str], held: frozenset[str]) -> list[str]:
    """The needed scopes the token does not hold, in the order they are needed."""
    return [s for s in needed if s not in held]


async def send_insufficient_scope(
    scope: Scope,
    send: Send,
    needed: tuple[str, ...],
    missing: list[str],
    operation: str,
    prm_path: str | None,
    stage: str = STAGE,
) -> None:
    """403 with the step-up challenge: `scope` holds all `needed`, not only the missing ones;
    401 for an anonymous caller (Optional, Permissive), who needs a token first. `stage`
    names the refusing stage in the audit trail."""
    metadata = request_origin(scope) + prm_path if prm_path else None
    if CLAIMS_KEY not in scope:
        why = f"{operation} needs a bearer token with scope {' '.join(needed)}"
        audit.deny(scope, stage, f"no bearer token: {why}")
        await send_error(
            send,
            401,
            "invalid_token",
            why,
            [(b"www-authenticate", challenge(metadata, " ".join(needed), None))],
        )
        return
    description = f"{operation} needs scope {' '.join(missing)}, which the token does not grant"
    audit.deny(scope, stage, f"missing scope {' '.join(missing)}: {description}")
    wanted = " ".join(needed)
    body = {"error": INSUFFICIENT_SCOPE, "error_description": description, "scope": wanted}
    algs: tuple[str, ...] | None = scope.get(DPOP_KEY)
    if algs is None:
        header = challenge(metadata, wanted, description, code=INSUFFICIENT_SCOPE)
        await send_json(send, 403, body, [(b"www-authenticate", header)])
        return
    # A DPoP call: the error on the DPoP challenge, the scheme it used (RFC 9449 §7.2).
    dpop = dpop_challenge(algs, INSUFFICIENT_SCOPE, description, metadata, wanted)
    headers = [
        (b"www-authenticate", challenge(metadata, wanted, None)),
        (b"www-authenticate", dpop),
    ]
    await send_json(send, 403, body, headers)


class RequiredScopes:
    """Every request on the route needs the policy's `scopes.required`."""

    def __init__(
        self,
        app: ASGIApp,
        scopes: CompiledScopes,
        prm_path: str | None,
        cache_entries: int = DEFAULT_TOKEN_CACHE_ENTRIES,
        counts: CacheCounts | None = None,
    ):
        self.app = app
        self.scopes = scopes
        self.prm_path = prm_path
        # token → what it lacks: the answer is the same for the token's whole life (under the
        # process-wide budget, least recently used forgotten first).
        self._missing: BoundedCache[str, list[str]] = BoundedCache(cache_entries, counts)

    def missing(self, scope: Scope) -> list[str]:
        """The required scopes the caller's token does not grant."""
        token = scope.get(TOKEN_KEY)
        hit = self._missing.get(token) if token is not None else None
        if hit is not None:
            return hit
        held = granted_scopes(scope.get(CLAIMS_KEY, {}), self.scopes)
        missing = lacking(self.scopes.required, held)
        if token is not None:
            self._missing.put(token, missing)
        return missing

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        missing = self.missing(scope)
        if missing:
            await send_insufficient_scope(
                scope, send, self.scopes.required, missing, "this route", self.prm_path
            )
            return
        await self.app(scope, receive, send)
