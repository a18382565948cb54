"""The gateway's public origin for a request, honouring forwarded headers only when trusted."""

from __future__ import annotations

from .asgi import Scope, header
from .headers import first_item


def _first(value: bytes) -> str:
    return first_item(value).decode("latin-1")


def request_origin(scope: Scope, trust_forwarded: bool) -> str:
    """`scheme://host[:port]` as the client sees the gateway."""
    scheme = scope.get("scheme", "http")
    host_value = header(scope, b"host")
    if trust_forwarded:
        proto = header(scope, b"x-forwarded-proto")
        if proto and _first(proto).lower() in ("http", "https"):
            scheme = _first(proto).lower()
        forwarded_host = header(scope, b"x-forwarded-host")
        if forwarded_host and _first(forwarded_host):
            host_value = forwarded_host
    if host_value:
        host = _first(host_value)
    else:
        server_host, server_port = scope.get("server") or ("127.0.0.1", 80)
        host = f"{server_host}:{server_port}"
    return f"{scheme}://{host}"
