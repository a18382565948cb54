"""Compiled scope rules as a policy declares them, a caller granted some scopes, and the path of
the protected-resource metadata a scope challenge points to."""

from __future__ import annotations

from mcp_oauth_gateway.asgi import CLAIMS_KEY, TOKEN_KEY
from mcp_oauth_gateway.controlplane.scopes import compile_scopes
from mcp_oauth_gateway.controlplane.snapshot import CompiledScopes
from mcp_oauth_gateway.resources.models import McpScopeRule, Scopes

PRM = "/.well-known/oauth-protected-resource/mcp"


def scopes(
    required: list[str] | None = None,
    implies: dict[str, list[str]] | None = None,
    items: list[tuple[str, list[str]]] = (),  # type: ignore[assignment]
) -> CompiledScopes:
    problems: list[str] = []
    compiled = compile_scopes(
        Scopes(required=required or [], implies=implies or {}),
        [McpScopeRule(match=m, required=r) for m, r in items],
        problems,
    )
    assert not problems
    assert compiled is not None
    return compiled


def caller(scope_claim: object, claim: str = "scope") -> dict[str, object]:
    return {CLAIMS_KEY: {"sub": "alice", claim: scope_claim}, TOKEN_KEY: f"t-{scope_claim}"}
