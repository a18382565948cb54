"""GatewayBackend: the MCP servers a route's backendRef names."""

from __future__ import annotations

import ipaddress
import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from .fields import AbsolutePath, Duration, NonEmpty, Port, StrictModel, parse_duration
from .gateway_api import ObjectMeta

# --- GatewayBackend (mcp-oauth-gateway.dev/v1alpha1) ---------------------------------------


# A host is a DNS name or an IP address and nothing else: a host holding `@`, `/`, `:` or a
# space would be read as another host (or user-info, or a port) once written into a URL.
HOST_NAME = re.compile(
    r"[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?(\.[A-Za-z0-9_]([A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?)*"
)
IPV6_HOST = re.compile(r"\[?[0-9A-Fa-f:.]*:[0-9A-Fa-f:.]*\]?")


def _host(value: str) -> str:
    """A DNS name, a dotted IPv4 address, or an IPv6 address (kept without brackets)."""
    if IPV6_HOST.fullmatch(value):
        try:
            return str(ipaddress.IPv6Address(value.removeprefix("[").removesuffix("]")))
        except ValueError:
            pass
    elif HOST_NAME.fullmatch(value) and len(value) <= 253:
        if not value.replace(".", "").isdigit():
            return value
        try:  # digits and dots: only the canonical dotted IPv4 form, which every reader agrees on
            return str(ipaddress.IPv4Address(value))
        except ValueError:
            pass
    raise ValueError(
        f"{value[:80]!r} is not a host: give a DNS name or an IP address, without a scheme, "
        "port, path or user information"
    )


Host = Annotated[str, AfterValidator(_host)]

HTTPS_PORT = 443
# A target on the https port without `tls` would get the request head in the clear, with the
# credentials a route adds (an upstream token, a secret header), before the server refuses it.
IN_THE_CLEAR = (
    "port 443 is the https port: add `tls: {}` to reach the server over TLS (the gateway never "
    "sends a request, with its credentials, in the clear to port 443)"
)


def https_port_refusal(port: int, tls: object) -> str | None:
    """Why a target may not be reached at `port` without TLS (None: it may)."""
    return IN_THE_CLEAR if port == HTTPS_PORT and tls is None else None


class BackendTls(StrictModel):
    """TLS to the MCP server (https). The server's certificate is always verified: it must
    chain to a trusted CA and hold the server name; there is no option to skip either check.
    TLS 1.2 or later."""

    ca_file: AbsolutePath | None = None
    """Absolute path of a PEM file of the CA certificates to trust for this server, instead of
    the system's (default: the system's). Read when the configuration loads; a file without a
    PEM certificate refuses the backend. From resource files any file of the gateway; in a
    cluster refused unless the gateway runs with `--secret-files-dir DIR`, and then only under
    `DIR/<backend namespace>/`."""
    server_name: Host | None = None
    """The name sent in SNI and that the server's certificate must hold; default: the host the
    gateway connects to."""


class StaticTarget(StrictModel):
    host: Host
    """Host name or IP address of the MCP server. The gateway connects to it over plain HTTP,
    or over TLS with `tls`. In controller mode a tenant's host is used only when the operator
    allows it (`serve --allow-hosts`); a Service in the cluster is named with `service`
    instead."""
    port: Port
    """TCP port of the MCP server, 1-65535."""
    path: AbsolutePath = "/mcp"
    """Path of the server's MCP endpoint, starting with `/`; default `/mcp`. Every request the
    route forwards is sent to this path, with its query string (the request's own path is not
    appended)."""
    protocol: Literal["StreamableHTTP"] = "StreamableHTTP"
    """MCP transport: `StreamableHTTP` only, the default (JSON and SSE responses are streamed
    through unbuffered)."""
    tls: BackendTls | None = None
    """Present (`tls: {}` at least): the gateway speaks https to the server and verifies its
    certificate. Absent: plain HTTP (refused on port 443)."""

    @model_validator(mode="after")
    def _https_port(self) -> StaticTarget:
        why = https_port_refusal(self.port, self.tls)
        if why is not None:
            raise ValueError(why)
        return self


class ServiceTarget(StrictModel):
    """An MCP server reached through a Kubernetes Service."""

    name: NonEmpty
    """Name of the Service."""
    namespace: str | None = None
    """Namespace of the Service; default: the GatewayBackend's. Another namespace needs a
    ReferenceGrant there that lets GatewayBackends of this namespace refer to Services."""
    port: Port
    """Port of the Service, 1-65535."""
    path: AbsolutePath = "/mcp"
    """Path of the server's MCP endpoint, starting with `/`; default `/mcp`."""
    protocol: Literal["StreamableHTTP"] = "StreamableHTTP"
    """MCP transport: `StreamableHTTP` only, the default."""
    tls: BackendTls | None = None
    """Present (`tls: {}` at least): the gateway speaks https to the Service's host (an
    ExternalName Service: its `externalName`) and verifies its certificate. Absent: plain
    HTTP (refused on port 443)."""

    @model_validator(mode="after")
    def _https_port(self) -> ServiceTarget:
        why = https_port_refusal(self.port, self.tls)
        if why is not None:
            raise ValueError(why)
        return self


# A target's name becomes the `<name>_` prefix of its tools and prompts when a backend has
# several. MCP tool names are `[A-Za-z0-9_.-]{1,128}` (2025-11-25); without `_` in the name, the
# first `_` of a prefixed name always ends the target's part, so a name splits one way only.
# Lowercase, a letter or digit first and at most 31 characters keep prefixed names short and
# the names usable as DNS labels and in CEL string comparisons without surprises.
TARGET_NAME = re.compile(r"[a-z0-9][a-z0-9-]{0,30}")
MAX_TARGETS = 16


def _target_name(value: str) -> str:
    if not TARGET_NAME.fullmatch(value):
        raise ValueError(
            f"{value[:40]!r} is not a target name: 1-31 lowercase letters, digits or `-`, "
            "starting with a letter or digit (it prefixes the target's tool names, `<name>_`)"
        )
    return value


TargetName = Annotated[str, AfterValidator(_target_name)]


class McpTarget(StrictModel):
    """One MCP server and how the gateway reaches it."""

    name: TargetName
    """The target's name: 1-31 lowercase letters, digits or `-`, starting with a letter or
    digit, unique in the backend. With several targets, the target's tools and prompts are
    offered as `<name>_<tool>`, its resources under `mcp+gw://<name>/`, and tool-level rules
    see it as `mcp.target`."""
    static: StaticTarget | None = None
    """A fixed address: `http://<host>:<port><path>` (`https://` with `tls`). Set this or
    `service`."""
    service: ServiceTarget | None = None
    """A Service: in a cluster `http://<name>.<namespace>.svc.<cluster domain>:<port><path>`
    (an ExternalName Service: its `externalName`); from files, the Service's `externalName`;
    `https://` with `tls`. Set this or `static`."""
    timeout: Duration | None = None
    """How long the gateway waits for this target, e.g. `5s`, `1m30s`, `500ms` (more than
    zero): for its response headers and, for an answer it reads whole (initialize, a list, a
    JSON call result), for all of it. Default: the route rule's `timeouts.backendRequest` (or
    `request`, else 300s). With several targets, a target past its timeout is left out of that
    list or its call answered with a JSON-RPC error, while the others answer within theirs."""

    @field_validator("timeout")
    @classmethod
    def _timeout(cls, value: str | None) -> str | None:
        if value is not None and parse_duration(value) <= 0:
            raise ValueError("timeout must be more than zero")
        return value

    @model_validator(mode="after")
    def _one_address(self) -> McpTarget:
        if (self.static is None) == (self.service is None):
            raise ValueError("set exactly one of static or service")
        return self


class McpBackend(StrictModel):
    targets: Annotated[list[McpTarget], Field(min_length=1, max_length=MAX_TARGETS)]
    """The MCP servers, 1 to 16, with unique names. One target is proxied as it is; several
    are served as one MCP server (federation): the gateway answers the client's session itself
    and holds one session with each target."""

    @field_validator("targets")
    @classmethod
    def _unique_names(cls, targets: list[McpTarget]) -> list[McpTarget]:
        seen: set[str] = set()
        for index, target in enumerate(targets):
            if target.name in seen:
                # Named at the repeated item, as the API server names it (`targets[i]`).
                why = PydanticCustomError(
                    "value_error",
                    # The name passed its pattern: no braces for the template to read.
                    f"the name '{target.name}' is used by an earlier target; target names "
                    "must be unique",
                )
                detail = InitErrorDetails(type=why, loc=(index,), input=target.name)
                raise ValidationError.from_exception_data("McpBackend", [detail])
            seen.add(target.name)
        return targets


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
