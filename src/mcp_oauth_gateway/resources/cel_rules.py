"""CEL authorization rules: the shape shared by the policy's `traffic.authorization`, its
`backend.mcp.authorization` and each workload issuer's `authorization`."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .fields import StrictModel

# What a rule block does with its expressions' results.
RuleAction = Literal["Allow", "Deny", "Require"]


class AuthorizationRules(StrictModel):
    match_expressions: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=16384)]],
        Field(min_length=1, max_length=256),
    ]
    """CEL expressions returning a boolean, over `jwt` (the verified claims, e.g.
    `"mcp-agent" in jwt.groups`) and `request` (method, path, headers, host); under
    `backend.mcp` also `mcp.tool.name`, `mcp.prompt.name`, `mcp.resource.uri`. One that does
    not compile makes the policy Accepted=False."""


class Authorization(StrictModel):
    action: RuleAction = "Allow"
    """`Allow` (default): allowed when any expression is true. `Deny`: refused when any is
    true. `Require`: allowed when all are true. An expression that cannot be evaluated (a
    missing claim, not a boolean) never lets a request through."""
    policy: AuthorizationRules
    """The expressions the action applies to."""
