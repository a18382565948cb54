"""CEL authorization stage: `Allow` (any rule true), `Deny` (any true denies), `Require` (all)."""

from __future__ import annotations

import orjson

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
    header,
    send_error,
)
from ..controlplane.cel import claims_read, holds, outcome, visible_claims
from ..controlplane.snapshot import CompiledAuthorization
from .bounded import BoundedCache, CacheCounts
from .challenge import Challenger


def request_variables(scope: Scope) -> dict[str, object]:
    """The `request` variable: method, path, host, scheme and lowercase headers."""
    host = header(scope, b"host")
    return {
        "method": scope["method"],
        "path": scope["path"],
        "host": host.decode("latin-1") if host else "",
        "scheme": scope.get("scheme", "http"),
        "headers": header_map(scope["headers"]),
    }


def activation_for(
    scope: Scope, read: frozenset[str] | None, needs_request: bool
) -> dict[str, object]:
    """CEL's variables for a request: `jwt` (only the claims read) and `request` when used."""
    activation: dict[str, object] = {"jwt": visible_claims(scope.get(CLAIMS_KEY, {}), read)}
    if needs_request:
        activation["request"] = request_variables(scope)
    return activation


def header_map(headers: Headers) -> dict[str, str]:
    """Lowercase name → value; repeated headers are joined with ", " (RFC 9110 §5.3), so a rule
    sees every copy rather than whichever came last."""
    out: dict[str, str] = {}
    for name, value in headers:
        key = name.decode("latin-1")
        text = value.decode("latin-1")
        out[key] = f"{out[key]}, {text}" if key in out else text
    return out


def decide(rules: CompiledAuthorization, activation: dict[str, object]) -> bool:
    """Whether the request is allowed by the rules; a rule that errors (a missing claim, a
    non-boolean result) never lets a request through: it is false for Allow and Require, and
    denies for Deny (fail closed)."""
    if rules.action == "Deny":
        return all(outcome(e, activation) is False for e in rules.expressions)
    results = (holds(expression, activation) for expression in rules.expressions)
    if rules.action == "Allow":
        return any(results)
    return all(results)


def explain(rules: CompiledAuthorization, activation: dict[str, object]) -> str:
    """Which rule refused, in words an auditor reads: the rule's source (the refusal path only:
    decisions are cached as yes or no, so this evaluates the rules again)."""
    if rules.action == "Allow":
        sources = "; ".join(f"`{e.source}`" for e in rules.expressions)
        return f"no Allow rule holds ({sources})"
    for expression in rules.expressions:
        result = outcome(expression, activation)
        if result is None:
            return f"{rules.action} rule `{expression.source}` could not be evaluated (fail closed)"
        if result is (rules.action == "Deny"):
            verdict = "matches" if result else "does not hold"
            return f"{rules.action} rule `{expression.source}` {verdict}"
    return f"the {rules.action} rules refuse"


def explain_allow(rules: CompiledAuthorization, activation: dict[str, object]) -> str:
    """Which rule let an allowed request through, in words (the rule's source)."""
    if rules.action == "Allow":
        for expression in rules.expressions:
            if holds(expression, activation):
                return f"Allow rule `{expression.source}` holds"
        return "allowed"
    return "no Deny rule matches" if rules.action == "Deny" else "every Require rule holds"


STAGE = "cel-authorization"


class CelAuthorization:
    """Denies with 403 when the verified claims do not satisfy the policy."""

    def __init__(
        self,
        app: ASGIApp,
        rules: CompiledAuthorization,
        policy: str,
        challenger: Challenger | None = None,
        cache_entries: int = DEFAULT_TOKEN_CACHE_ENTRIES,
        counts: CacheCounts | None = None,
    ):
        self.app = app
        self.rules = rules
        self.challenger = challenger or Challenger(None, None)
        self.needs_request = any(e.uses_request for e in rules.expressions)
        # Only the claims the rules read are converted for CEL; None means all of them.
        self.claims = claims_read(rules.expressions)
        # Rules over the token alone give the same answer for the token's whole life, and
        # rules over named claims the same answer for the same values (`_decision_key`).
        # Keys: tokens (str) and claim values (bytes), which never compare equal.
        self._decisions: BoundedCache[str | bytes, bool] | None = (
            None if self.needs_request else BoundedCache(cache_entries, counts)
        )
        self.denial = {
            "Allow": "the token's claims satisfy none of the authorization rules",
            "Deny": "the token's claims match a deny rule",
            "Require": "the token's claims do not satisfy every required rule",
        }[rules.action] + f" of GatewayPolicy {policy}"

    def _allowed(self, scope: Scope) -> bool:
        claims = scope.get(CLAIMS_KEY, {})
        cache = self._decisions
        if cache is None:
            return self._decide(scope, visible_claims(claims, self.claims))
        token = scope.get(TOKEN_KEY)
        # The token first: its string was hashed when the authentication stage looked it up,
        # so this costs nothing, where the claim-values key costs a JSON encoding.
        counts = cache.counts
        if token is not None:
            hit = cache.get(token)
            if hit is not None:
                counts.hits += 1
                return hit
        claims = visible_claims(claims, self.claims)
        key = self._decision_key(claims)
        hit = cache.get(key) if key is not None else None
        if hit is None:
            counts.misses += 1
            allowed = self._decide(scope, claims)
        else:
            counts.hits += 1
            allowed = hit
        for remembered in (key, token):
            if remembered is not None and remembered not in cache:
                cache.put(remembered, allowed)
        return allowed

    def _decide(self, scope: Scope, claims: dict[str, object]) -> bool:
        activation: dict[str, object] = {"jwt": claims}
        if self.needs_request:
            activation["request"] = request_variables(scope)
        return decide(self.rules, activation)

    def _decision_key(self, claims: dict[str, object]) -> bytes | None:
        """What the decision depends on besides the token itself. Rules that read named claims
        only (and not the request) decide the same for the same values of those claims,
        whichever token carries them: the key is those values, canonical JSON (types kept: 1,
        1.0 and true differ). None: only the token is a key (rules over all claims)."""
        if self.claims is None:
            return None
        try:
            return orjson.dumps(claims, option=orjson.OPT_SORT_KEYS)
        except orjson.JSONEncodeError:
            return None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if not self._allowed(scope):
            if audit.enabled(scope):
                activation = activation_for(scope, self.claims, self.needs_request)
                anonymous = "no bearer token; " if CLAIMS_KEY not in scope else ""
                audit.deny(scope, STAGE, anonymous + explain(self.rules, activation))
            if CLAIMS_KEY not in scope:
                # An anonymous caller (Optional, Permissive) might be let in with a token:
                # ask for one, so that MCP clients start signing in.
                await self.challenger.unauthorized(
                    scope, send, "a bearer token is required: " + self.denial, token_sent=False
                )
                return
            await send_error(send, 403, "forbidden", self.denial)
            return
        await self.app(scope, receive, send)
