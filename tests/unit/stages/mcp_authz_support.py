"""The MCP authorization stage under a rule that lets users call `echo`, get `greet` and read
`file:///public/…`, and admins anything; a user and an admin as the authentication stage hands
them inward."""

from __future__ import annotations

from mcp_oauth_gateway.asgi import CLAIMS_KEY, TOKEN_KEY
from mcp_oauth_gateway.controlplane.cel import compile_expression
from mcp_oauth_gateway.controlplane.snapshot import CompiledAuthorization
from mcp_oauth_gateway.dataplane.mcp_authz import McpAuthorization

from .harness import Inner

RULE = (
    '"admin" in jwt.groups'
    ' || (has(mcp.tool) && mcp.tool.name == "echo")'
    ' || (has(mcp.prompt) && mcp.prompt.name == "greet")'
    ' || (has(mcp.resource) && mcp.resource.uri.startsWith("file:///public/"))'
)
USER = {CLAIMS_KEY: {"sub": "alice", "groups": ["users"]}, TOKEN_KEY: "t-alice"}
ADMIN = {CLAIMS_KEY: {"sub": "root", "groups": ["admin"]}, TOKEN_KEY: "t-root"}


def stage(inner: Inner, rule: str = RULE, max_body: int = 1 << 20) -> McpAuthorization:
    rules = CompiledAuthorization("Allow", (compile_expression(rule, mcp=True),))
    return McpAuthorization(inner, rules, max_body)
