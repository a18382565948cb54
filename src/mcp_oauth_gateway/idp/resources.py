"""The ready-to-apply resources a provisioning run ends with: Gateway, HTTPRoute,
GatewayBackend, Service and GatewayPolicy, consistent with what was provisioned."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from urllib.parse import SplitResult, urlsplit

import yaml

from ..authorization_server_modes import AuthorizationServerMode
from ..provider_kinds import ProviderKind
from ..resources.models import GATEWAY_API_GROUP, GATEWAY_API_VERSION, POLICY_API_VERSION
from ..urls import shown_url

# The spec's CORS values, plus what browser MCP clients (MCP Inspector) send and must read: the
# MCP request headers, and WWW-Authenticate, which carries resource_metadata on a 401.
CORS = {
    "allowCredentials": True,
    "allowHeaders": [
        "Origin",
        "Authorization",
        "Content-Type",
        "Mcp-Protocol-Version",
        "Mcp-Session-Id",
        "Mcp-Method",
        "Mcp-Name",
        "Last-Event-ID",
    ],
    "allowMethods": ["*"],
    "allowOrigins": ["*"],
    "exposeHeaders": ["Origin", "Mcp-Session-Id", "WWW-Authenticate"],
    "maxAge": 86400,
}


@dataclass(frozen=True)
class TokenExchangeValues:
    """The backend's token exchange: the client, the backend's audience, the scope giving it,
    and the file holding the client's secret."""

    client: str
    audience: str
    scope: str
    secret_file: str


@dataclass(frozen=True)
class GatewayValues:
    """What a provisioning run found out that the gateway's resources need."""

    provider: ProviderKind
    idp_url: str
    issuer: str
    jwks_path: str
    audiences: tuple[str, ...]
    client_id: str | None
    resource: str
    backend: str
    group: str
    scopes: tuple[str, ...] = ("openid", "profile")
    mode: AuthorizationServerMode = AuthorizationServerMode.FACADE
    exchange: TokenExchangeValues | None = None


def _port(parts: SplitResult) -> int:
    if parts.port:
        return parts.port
    return 443 if parts.scheme == "https" else 80


def render(values: GatewayValues) -> list[dict[str, object]]:
    """The resources as dicts, in apply order."""
    resource = urlsplit(values.resource)
    backend = urlsplit(values.backend)
    idp = urlsplit(values.idp_url)
    service = values.provider.flavour
    return [
        _gateway(resource),
        _http_route(resource.path.rstrip("/") or "/mcp"),
        _gateway_backend(backend),
        _service(service, idp),
        _gateway_policy(values, service, idp),
    ]


def _metadata(name: str) -> dict[str, object]:
    return {"name": name, "namespace": "default"}


def _gateway(resource: SplitResult) -> dict[str, object]:
    return {
        "apiVersion": GATEWAY_API_VERSION,
        "kind": "Gateway",
        "metadata": _metadata("mcp-gateway"),
        "spec": {
            "gatewayClassName": "mcp-oauth-gateway",
            "listeners": [{"name": "http", "port": _port(resource), "protocol": "HTTP"}],
        },
    }


def _http_route(mcp_path: str) -> dict[str, object]:
    # The route also carries the two well-known metadata paths, so they share the CORS filter.
    return {
        "apiVersion": GATEWAY_API_VERSION,
        "kind": "HTTPRoute",
        "metadata": _metadata("mcp"),
        "spec": {
            "parentRefs": [
                {
                    "group": GATEWAY_API_GROUP,
                    "kind": "Gateway",
                    "name": "mcp-gateway",
                    "namespace": "default",
                }
            ],
            "rules": [
                {
                    "matches": [
                        {"path": {"type": "PathPrefix", "value": prefix}}
                        for prefix in (
                            mcp_path,
                            f"/.well-known/oauth-protected-resource{mcp_path}",
                            f"/.well-known/oauth-authorization-server{mcp_path}",
                        )
                    ],
                    "filters": [{"type": "CORS", "cors": CORS}],
                    "backendRefs": [
                        {
                            "group": "mcp-oauth-gateway.dev",
                            "kind": "GatewayBackend",
                            "name": "mcp-backend",
                        }
                    ],
                }
            ],
        },
    }


def _gateway_backend(backend: SplitResult) -> dict[str, object]:
    address: dict[str, object] = {
        "host": backend.hostname,
        "port": _port(backend),
        "path": backend.path or "/mcp",
        "protocol": "StreamableHTTP",
    }
    if backend.scheme == "https":
        address["tls"] = {}  # the system's CAs; the certificate must name the host
    return {
        "apiVersion": POLICY_API_VERSION,
        "kind": "GatewayBackend",
        "metadata": _metadata("mcp-backend"),
        "spec": {"mcp": {"targets": [{"name": "mcp-server", "static": address}]}},
    }


def _service(service: str, idp: SplitResult) -> dict[str, object]:
    # The policy's remote JWKS needs a Service backendRef; an ExternalName one points at the IdP.
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(service),
        "spec": {
            "type": "ExternalName",
            "externalName": idp.hostname,
            "ports": [{"port": _port(idp)}],
        },
    }


def _gateway_policy(values: GatewayValues, service: str, idp: SplitResult) -> dict[str, object]:
    policy = _policy_document(values, service, idp)
    exchange = values.exchange
    if exchange is not None:
        spec = policy["spec"]
        assert isinstance(spec, dict)
        spec["backend"] = {
            "credentials": {
                "tokenExchange": {
                    "clientId": exchange.client,
                    "clientSecret": {"file": exchange.secret_file},
                    "audience": exchange.audience,
                    "scope": exchange.scope,
                }
            }
        }
    return policy


def _policy_document(values: GatewayValues, service: str, idp: SplitResult) -> dict[str, object]:
    return {
        "apiVersion": POLICY_API_VERSION,
        "kind": "GatewayPolicy",
        "metadata": _metadata("mcp-authn"),
        "spec": {
            "targetRefs": [{"group": GATEWAY_API_GROUP, "kind": "HTTPRoute", "name": "mcp"}],
            "traffic": {
                "jwtAuthentication": {
                    "mode": "Strict",
                    "providers": [
                        {
                            "issuer": values.issuer,
                            "audiences": list(values.audiences),
                            "jwks": {
                                "remote": {
                                    "backendRef": {
                                        "kind": "Service",
                                        "name": service,
                                        "namespace": "default",
                                        "port": _port(idp),
                                    },
                                    "jwksPath": values.jwks_path,
                                }
                            },
                        }
                    ],
                    "mcp": _mcp_settings(values),
                },
                "authorization": {
                    "action": "Allow",
                    "policy": {"matchExpressions": [f'"{values.group}" in jwt.groups']},
                },
            },
        },
    }


def _mcp_settings(values: GatewayValues) -> dict[str, object]:
    mcp: dict[str, object] = {"provider": values.provider.value}
    if values.mode is AuthorizationServerMode.BROKER:
        mcp["authorizationServerMode"] = AuthorizationServerMode.BROKER.value
    # With Keycloak in Facade mode each MCP client registers itself through DCR: none is pinned.
    if values.client_id and (
        values.provider is ProviderKind.AUTHENTIK or values.mode is AuthorizationServerMode.BROKER
    ):
        mcp["clientId"] = values.client_id
    mcp["resourceMetadata"] = {
        "resource": values.resource,
        "scopesSupported": list(values.scopes),
        "bearerMethodsSupported": ["header"],
    }
    return mcp


def write(values: GatewayValues, directory: Path) -> Path:
    """Write the resources as one multi-document YAML file; returns its path."""
    directory.mkdir(parents=True, exist_ok=True)
    target = directory / "gateway.yaml"
    header = (
        f"# Generated by mcp-oauth-gateway idp for {values.provider} at "
        f"{shown_url(values.idp_url)}.\n"
        f"# Check with: mcp-oauth-gateway check -f {directory}\n"
    )
    body = yaml.safe_dump_all(render(values), sort_keys=False, default_flow_style=False)
    target.write_text(header + body)
    return target
