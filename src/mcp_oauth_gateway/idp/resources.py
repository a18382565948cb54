"""The ready-to-apply resources a provisioning run ends with: Gateway, HTTPRoute,
GatewayBackend, Service and GatewayPolicy, consistent with what was provisioned."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

import yaml

from ..resources.models import GATEWAY_API_GROUP, GATEWAY_API_VERSION, POLICY_API_VERSION

# The spec's CORS values, plus what browser MCP clients (MCP Inspector) send and must read: the
# MCP request headers, and WWW-Authenticate, which carries resource_metadata on a 401.
CORS = {
    "allowCredentials": True,
    "allowHeaders": ["Origin", "Authorization", "Content-Type", "Mcp-Protocol-Version",
                     "Mcp-Session-Id", "Mcp-Method", "Mcp-Name", "Last-Event-ID"],
    "allowMethods": ["*"], "allowOrigins": ["*"],
    "exposeHeaders": ["Origin", "Mcp-Session-Id", "WWW-Authenticate"],
    "maxAge": 86400,
}


@dataclass(frozen=True)
class GatewayValues:
    """What a provisioning run found out that the gateway's resources need."""

    provider: str  # "ProviderB" or "Keycloak"
    idp_url: str
    issuer: str
    jwks_path: str
    audiences: tuple[str, ...]
    client_id: str | None
    resource: str
    backend: str
    group: str
    scopes: tuple[str, ...] = ("openid", "profile")
    mode: str = "Facade"


def _port(parts: SplitResult) -> int:
    if parts.port:
        return parts.port
    return 443 if parts.scheme == "https" else 80


def render(values: GatewayValues) -> list[dict[str, object]]:
    """The resources as dicts, in apply order."""
    resource = urlsplit(values.resource)
    backend = urlsplit(values.backend)
    idp = urlsplit(values.idp_url)
    mcp_path = resource.path.rstrip("/") or "/mcp"
    service = "keycloak" if values.provider == "Keycloak" else "authentik"
    meta = {"namespace": "default"}
    mcp: dict[str, object] = {"provider": values.provider}
    if values.mode == "Broker":
        mcp["authorizationServerMode"] = "Broker"
    if values.client_id and (values.provider == "ProviderB" or values.mode == "Broker"):
        mcp["clientId"] = values.client_id
    mcp["resourceMetadata"] = {"resource": values.resource, "scopesSupported":
                               list(values.scopes), "bearerMethodsSupported": ["header"]}
    return [
        {"apiVersion": GATEWAY_API_VERSION, "kind": "Gateway",
         "metadata": {"name": "mcp-gateway", **meta},
         "spec": {"gatewayClassName": "mcp-oauth-gateway", "listeners": [
             {"name": "http", "port": _port(resource), "protocol": "HTTP"}]}},
        {"apiVersion": GATEWAY_API_VERSION, "kind": "HTTPRoute",
         "metadata": {"name": "mcp", **meta},
         "spec": {"parentRefs": [{"group": GATEWAY_API_GROUP, "kind": "Gateway",
                                  "name": "mcp-gateway", "namespace": "default"}],
                  "rules": [{
                      "matches": [{"path": {"type": "PathPrefix", "value": prefix}}
                                  for prefix in (mcp_path,
                                                 f"/.well-known/oauth-protected-resource{mcp_path}",
                                                 f"/.well-known/oauth-authorization-server"
                                                 f"{mcp_path}")],
                      "filters": [{"type": "CORS", "cors": CORS}],
                      "backendRefs": [{"group": "mcp-oauth-gateway.dev",
                                       "kind": "GatewayBackend", "name": "mcp-backend"}]}]}},
        {"apiVersion": POLICY_API_VERSION, "kind": "GatewayBackend",
         "metadata": {"name": "mcp-backend", **meta},
         "spec": {"mcp": {"targets": [{"name": "mcp-server", "static": {
             "host": backend.hostname, "port": _port(backend),
             "path": backend.path or "/mcp", "protocol": "StreamableHTTP"}}]}}},
        {"apiVersion": "v1", "kind": "Service", "metadata": {"name": service, **meta},
         "spec": {"type": "ExternalName", "externalName": idp.hostname,
                  "ports": [{"port": _port(idp)}]}},
        {"apiVersion": POLICY_API_VERSION, "kind": "GatewayPolicy",
         "metadata": {"name": "mcp-authn", **meta},
         "spec": {"targetRefs": [{"group": GATEWAY_API_GROUP, "kind": "HTTPRoute",
                                  "name": "mcp"}],
                  "traffic": {
                      "jwtAuthentication": {"mode": "Strict", "providers": [{
                          "issuer": values.issuer, "audiences": list(values.audiences),
                          "jwks": {"remote": {"backendRef": {
                              "kind": "Service", "name": service, "namespace": "default",
                              "port": _port(idp)}, "jwksPath": values.jwks_path}}}],
                          "mcp": mcp},
                      "authorization": {"action": "Allow", "policy": {"matchExpressions": [
                          f'"{values.group}" in jwt.groups']}}}}},
    ]


def write(values: GatewayValues, directory: Path) -> Path:
    """Write the resources as one multi-document YAML file; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "gateway.yaml"
    header = (f"# Generated by mcp-oauth-gateway idp for {values.provider} at {values.idp_url}.\n"
              f"# Check with: mcp-oauth-gateway check -f {directory}\n")
    body = yaml.safe_dump_all(render(values), sort_keys=False, default_flow_style=False)
    target.write_text(header + body)
    return target
