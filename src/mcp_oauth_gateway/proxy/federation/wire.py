"""The 2026-07-28 wire as a federated route reads it: which requests speak it (a version header
of that era and no session), and the checks a server makes of each request before it acts on
it, in the order the `mcp` SDK makes them (`params._meta`, then the routing headers against the
body, then the version), so a client hears the same refusal from the gateway as from a single
server. Pure functions: the stage turns a `WireError` into its HTTP answer."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ...asgi import Headers
from ...jsonrpc import (
    HEADER_MISMATCH,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    MISSING_CAPABILITY,
    PARSE_ERROR,
    UNSUPPORTED_VERSION,
)
from ...mcp_headers import SESSION_VERSIONS, STATELESS_VERSIONS, decode_name, is_stateless
from ...mcp_methods import NAMED_BY

__all__ = ["SESSION_VERSIONS", "STATELESS_VERSIONS", "is_stateless"]
META_VERSION = "io.modelcontextprotocol/protocolVersion"
META_CAPABILITIES = "io.modelcontextprotocol/clientCapabilities"
META_SERVER_INFO = "io.modelcontextprotocol/serverInfo"
META_SUBSCRIPTION = "io.modelcontextprotocol/subscriptionId"
# How the wire maps its JSON-RPC errors to HTTP statuses (others: 200).
STATUS_OF: Mapping[int, int] = {
    PARSE_ERROR: 400,
    INVALID_REQUEST: 400,
    INVALID_PARAMS: 400,
    HEADER_MISMATCH: 400,
    MISSING_CAPABILITY: 400,
    UNSUPPORTED_VERSION: 400,
    METHOD_NOT_FOUND: 404,
}
VERSION = b"mcp-protocol-version"
METHOD = b"mcp-method"
NAME = b"mcp-name"
SESSION = b"mcp-session-id"
_ROUTING = (VERSION, METHOD, NAME)


class WireError(ValueError):
    """A request the wire's rules refuse: its JSON-RPC `code` and `data`, and HTTP status."""

    def __init__(self, code: int, why: str, data: object = None):
        super().__init__(why)
        self.code = code
        self.data = data

    @property
    def status(self) -> int:
        """The HTTP status the wire gives this error."""
        return STATUS_OF.get(self.code, 200)


@dataclass(frozen=True)
class WireRequest:
    """A request that passed the checks: its version, and the client's capabilities."""

    version: str
    capabilities: Mapping[str, object]


def header(headers: Headers, name: bytes) -> str | None:
    """The header's value (latin-1, as HTTP carries it), or None."""
    value = next((v for k, v in headers if k == name), None)
    return None if value is None else value.decode("latin-1")


def checked(headers: Headers, message: Mapping[str, object]) -> WireRequest:
    """The request's version and the client's capabilities; WireError when the wire's rules
    refuse it."""
    repeated = next((n for n in _ROUTING if sum(1 for k, _ in headers if k == n) > 1), None)
    if repeated is not None:
        raise WireError(HEADER_MISMATCH, f"the {repeated.decode()} header appears more than once")
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    if not isinstance(meta, dict):
        raise WireError(
            INVALID_PARAMS,
            f"params._meta must be an object carrying {META_VERSION!r} and {META_CAPABILITIES!r}",
        )
    missing = [key for key in (META_VERSION, META_CAPABILITIES) if key not in meta]
    if missing:
        raise WireError(INVALID_PARAMS, f"params._meta lacks {', '.join(missing)}")
    version = meta[META_VERSION]
    if header(headers, VERSION) != version:
        raise WireError(
            HEADER_MISMATCH,
            "the MCP-Protocol-Version header does not match params._meta's protocol version",
        )
    method = message.get("method")
    if header(headers, METHOD) != method:
        raise WireError(HEADER_MISMATCH, "the Mcp-Method header does not match the body's method")
    field = NAMED_BY.get(str(method))
    named = params.get(field) if field is not None and isinstance(params, dict) else None
    if named is not None and decode_name(header(headers, NAME)) != named:
        raise WireError(
            HEADER_MISMATCH, f"the Mcp-Name header does not match the body's params.{field}"
        )
    if not isinstance(version, str):
        raise WireError(INVALID_PARAMS, "params._meta's protocol version must be a string")
    if version not in STATELESS_VERSIONS:
        raise WireError(
            UNSUPPORTED_VERSION,
            "Unsupported protocol version",
            {"supported": list(STATELESS_VERSIONS), "requested": version},
        )
    capabilities = meta[META_CAPABILITIES]
    if not isinstance(capabilities, dict):
        raise WireError(INVALID_PARAMS, "params._meta's client capabilities must be an object")
    return WireRequest(version, capabilities)
