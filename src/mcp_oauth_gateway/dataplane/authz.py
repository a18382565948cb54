"""CEL authorization stage: `Allow` (any rule true), `Deny` (any true denies), `Require` (all)."""

from __future__ import annotations

from ..controlplane.cel import holds
from ..controlplane.snapshot import CompiledAuthorization
from .asgi import CLAIMS_KEY, ASGIApp, Receive, Scope, Send, header
from .responses import send_error


def request_variables(scope: Scope) -> dict[str, object]:
    """The `request` variable: method, path, host, scheme and lowercase headers."""
    host = header(scope, b"host")
    return {
        "method": scope["method"],
        "path": scope["path"],
        "host": host.decode("latin-1") if host else "",
        "scheme": scope.get("scheme", "http"),
        "headers": {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]},
    }


def decide(rules: CompiledAuthorization, activation: dict[str, object]) -> bool:
    """Whether the request is allowed by the rules."""
    results = (holds(expression, activation) for expression in rules.expressions)
    if rules.action == "Allow":
        return any(results)
    if rules.action == "Deny":
        return not any(results)
    return all(results)


class CelAuthorization:
    """Denies with 403 when the verified claims do not satisfy the policy."""

    def __init__(self, app: ASGIApp, rules: CompiledAuthorization, policy: str):
        self.app = app
        self.rules = rules
        self.needs_request = any(e.uses_request for e in rules.expressions)
        self.denial = {
            "Allow": "the token's claims satisfy none of the authorization rules",
            "Deny": "the token's claims match a deny rule",
            "Require": "the token's claims do not satisfy every required rule",
        }[rules.action] + f" of GatewayPolicy {policy}"

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        activation: dict[str, object] = {"jwt": scope.get(CLAIMS_KEY, {})}
        if self.needs_request:
            activation["request"] = request_variables(scope)
        if not decide(self.rules, activation):
            await send_error(send, 403, "forbidden", self.denial)
            return
        await self.app(scope, receive, send)
