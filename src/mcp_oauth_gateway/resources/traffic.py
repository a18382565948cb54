"""GatewayPolicy's rules over each request (CEL authorization, scopes, header transformation,
rate limit) and over each MCP tool, prompt and resource."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator

from .authentication import JwtAuthenticationSpec
from .cel_rules import Authorization
from .fields import (
    Duration,
    HeaderName,
    RedisUrl,
    ScopeList,
    ScopeToken,
    StrictModel,
    not_refresh_scope,
    parse_duration,
)


class Scopes(StrictModel):
    """The scopes every request on the route needs, and which granted scopes imply others."""

    required: ScopeList = []
    """Scopes every request on the route needs, read from the token's `scope` or `scp`; short
    of one: 403 `insufficient_scope`, so MCP clients step up. Also advertised to clients. Not
    `offline_access`."""
    implies: Annotated[dict[ScopeToken, ScopeList], Field(max_length=256)] = {}
    """The provider's scope hierarchy: a granted scope (the key) also grants the listed ones,
    transitively, e.g. `mcp:admin: [mcp:tools]`. Nothing is inferred from names."""

    @field_validator("required")
    @classmethod
    def _required(cls, values: list[str]) -> list[str]:
        return not_refresh_scope(values, "scopes.required")


class McpScopeRule(StrictModel):
    """Scopes a tool, prompt or resource needs: a CEL `match` over `mcp` (and `jwt`, `request`)."""

    match: Annotated[str, Field(min_length=1, max_length=16384)]
    """CEL choosing the items, e.g. `mcp.tool.name.startsWith("delete_")`; a rule applies to the
    kinds it reads (tools, prompts, resources; all if none), and one that cannot be evaluated
    counts as matching."""
    required: Annotated[list[ScopeToken], Field(min_length=1, max_length=64)]
    """Scopes a call of a matching item needs, e.g. `[mcp:admin]`; not `offline_access`."""

    @field_validator("required")
    @classmethod
    def _required(cls, values: list[str]) -> list[str]:
        return not_refresh_scope(values, "required")


class HeaderValue(StrictModel):
    """A request header and the CEL expression that gives its value."""

    name: HeaderName
    """The header to set; a header of that name from the client is always dropped."""
    value: Annotated[str, Field(min_length=1, max_length=4096)]
    """CEL over `jwt` and `request`, e.g. `jwt.sub` or `jwt.groups.join(",")`. A missing claim
    leaves the header unset; CR, LF or NUL in the value refuses the request (400)."""


class RequestTransformation(StrictModel):
    set: list[HeaderValue] = []
    """Headers to set from the verified token (clients cannot supply them). With several
    providers, one set from `jwt.sub` needs `jwt.iss` in it or in another header set: `sub` is
    unique only within its issuer."""
    remove: list[HeaderName] = []
    """Headers to remove from the request, e.g. `X-Internal-Secret`."""


class Transformation(StrictModel):
    request: RequestTransformation = RequestTransformation()
    """Changes to the request before it is forwarded to the backend."""


class RateLimitSpec(StrictModel):
    key: Annotated[str, Field(min_length=1, max_length=4096)]
    """CEL naming the caller, e.g. `jwt.sub`. Each value has its own bucket within the token's
    issuer (a value is unique only there); callers whose key cannot be computed share one."""
    requests: Annotated[int, Field(ge=1)]
    """Requests a caller may make per window, at least 1; also the largest burst."""
    window: Duration = "1m"
    """The window, as a duration such as `30s`, `1m` or `1h`: longer than 0, default `1m`."""
    redis_url: RedisUrl | None = None
    """Redis shared by every replica, so the limit holds across them: one server (`redis://`,
    `rediss://`, `unix:`), a Sentinel set (`redis+sentinel://…/SERVICE/DB`) or a Cluster
    (`redis+cluster://…/`). Unset: each process counts alone. Redis not answering: 503. Buckets
    are not waited for on replicas: a failover may refill some."""

    @field_validator("window")
    @classmethod
    def _window(cls, value: str) -> str:
        if parse_duration(value) <= 0:
            raise ValueError("window must be longer than 0")
        return value


class Traffic(StrictModel):
    jwt_authentication: JwtAuthenticationSpec | None = None
    """Bearer JWT validation. Required: without it the policy is Accepted=False. A request
    without a valid token gets 401 with a `WWW-Authenticate` challenge."""
    authorization: Authorization | None = None
    """CEL rules over the verified claims and the request; refused: 403 (401 for an anonymous
    caller)."""
    transformation: Transformation | None = None
    """Request headers set from the verified token, or removed, before proxying."""
    rate_limit: RateLimitSpec | None = None
    """A token bucket per caller; over the limit: 429 with `Retry-After`."""
    scopes: Scopes | None = None
    """The scopes every request needs, and which scopes imply others."""


class McpPolicy(StrictModel):
    authorization: Authorization | None = None
    """Tool-level authorization, evaluated per tool, prompt and resource with `mcp.tool.name`,
    `mcp.prompt.name` or `mcp.resource.uri`: lists lose the items the caller may not use, and
    calls of them are answered as unknown without reaching the backend."""
    scopes: Annotated[list[McpScopeRule], Field(max_length=256)] = []
    """Scopes that calls of matching items need; short of one: 403 `insufficient_scope` naming
    every scope the call needs, so MCP clients step up once."""
