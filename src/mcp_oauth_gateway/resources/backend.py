"""GatewayBackend: the MCP servers a route's backendRef names."""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field

from .fields import AbsolutePath, NonEmpty, Port, StrictModel
from .gateway_api import ObjectMeta

# --- GatewayBackend (mcp-oauth-gateway.dev/v1alpha1) ---------------------------------------


class StaticTarget(StrictModel):
    host: NonEmpty
    """Host name or IP address of the MCP server, e.g. the Service name
    `mcp-server.mcp.svc.cluster.local`. The gateway connects to it over plain HTTP."""
    port: Port
    """TCP port of the MCP server, 1-65535."""
    path: AbsolutePath = "/mcp"
    """Path of the server's MCP endpoint, starting with `/`; default `/mcp`. Every request the
    route forwards is sent to this path, with its query string (the request's own path is not
    appended)."""
    protocol: Literal["StreamableHTTP"] = "StreamableHTTP"
    """MCP transport: `StreamableHTTP` only, the default (JSON and SSE responses are streamed
    through unbuffered)."""


class McpTarget(StrictModel):
    """One MCP server and how the gateway reaches it."""

    name: NonEmpty
    """A name for the target, for people reading the resource; the gateway does not use it."""
    static: StaticTarget
    """A fixed address: `http://<host>:<port><path>`."""


class McpBackend(StrictModel):
    targets: Annotated[list[McpTarget], Field(min_length=1, max_length=1)]
    """The MCP server: exactly one entry. One target is what the gateway serves today; the list
    keeps the resource's shape stable for more."""


class GatewayBackendSpec(StrictModel):
    mcp: McpBackend
    """The MCP server behind this backend."""


class GatewayBackend(StrictModel):
    api_version: Literal["mcp-oauth-gateway.dev/v1alpha1"]
    kind: Literal["GatewayBackend"]
    metadata: ObjectMeta
    spec: GatewayBackendSpec
    """Where the gateway sends the MCP requests of the HTTPRoute rules whose `backendRefs` name
    this backend (group `mcp-oauth-gateway.dev`, kind `GatewayBackend`; from another namespace
    only with a ReferenceGrant here)."""
