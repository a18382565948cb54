"""Compile a policy's MCP OAuth settings (`traffic.jwtAuthentication.mcp`) and check what they
need: each provider's kind, Broker mode's client and shared state, several providers."""

from __future__ import annotations

from urllib.parse import urlsplit

from ..authorization_server_modes import AuthorizationServerMode
from ..provider_kinds import ProviderFacts, profile
from ..resources.models import JwtAuthenticationSpec, JwtProvider, McpAuthentication
from ..urls import shown_url
from .deployment import Deployment
from .snapshot import DEFAULT_MCP_PATH, CompiledMcp

PROVIDERS_PATH = "spec.traffic.jwtAuthentication.providers"
MCP_PATH = "spec.traffic.jwtAuthentication.mcp"
WORKLOAD_PATH = f"{MCP_PATH}.workloadIdentity"


def _kind_problems(
    spec: McpAuthentication, providers: list[JwtProvider], problems: list[str]
) -> None:
    """What each provider's kind needs of its configuration (its profile's checks)."""
    for i, provider in enumerate(providers):
        kind = provider.kind or spec.provider
        if kind is None:
            continue
        facts = ProviderFacts(
            path=f"{PROVIDERS_PATH}[{i}]",
            mcp_path=MCP_PATH,
            issuer=provider.issuer,
            shown_issuer=shown_url(provider.issuer),
            audiences=tuple(provider.audiences) if provider.audiences is not None else None,
            client_id=provider.client_id or spec.client_id,
            client_id_field=f"{PROVIDERS_PATH}[{i}].clientId"
            if provider.client_id
            else "mcp.clientId",
        )
        problems.extend(profile(kind).problems(facts))


def several_providers_problems(jwt_spec: JwtAuthenticationSpec, problems: list[str]) -> None:
    """Several providers: each token's `iss` must pick exactly one, and what clients are shown
    must name them all (Facade fronts one provider's metadata, so it cannot)."""
    providers = jwt_spec.providers
    seen: dict[str, int] = {}
    for i, provider in enumerate(providers):
        if provider.issuer in seen:
            problems.append(
                f"{PROVIDERS_PATH}[{i}].issuer repeats {PROVIDERS_PATH}[{seen[provider.issuer]}]"
                ": a token's iss must pick exactly one provider"
            )
        seen.setdefault(provider.issuer, i)
    owners: dict[str, int] = {}
    for i, provider in enumerate(providers):
        for domain in provider.login_hint_domains:
            if domain in owners and owners[domain] != i:
                problems.append(
                    f"{PROVIDERS_PATH}[{i}].loginHintDomains: {domain} is also in "
                    f"{PROVIDERS_PATH}[{owners[domain]}]; a login_hint must pick one provider"
                )
            owners.setdefault(domain, i)
    mcp = jwt_spec.mcp
    if len(providers) < 2 or mcp is None:
        return
    if mcp.authorization_server_mode is AuthorizationServerMode.FACADE and mcp.provider is not None:
        problems.append(
            f"{MCP_PATH}.provider: Facade mode serves one provider's metadata, but the policy "
            f"has {len(providers)} providers; use authorizationServerMode: Broker (users pick "
            "the provider), or leave mcp.provider unset (the metadata lists every issuer)"
        )
    if mcp.authorization_server_mode is AuthorizationServerMode.BROKER:
        for i, provider in enumerate(providers):
            if not (provider.client_id or mcp.client_id):
                problems.append(
                    f"{PROVIDERS_PATH}[{i}].clientId is required in Broker mode (the client "
                    "the gateway signs users in as at that provider)"
                )


def _broker_problems(
    spec: McpAuthentication, problems: list[str], deployment: Deployment, providers: int = 1
) -> None:
    """Broker mode needs a provider, a client, and state every process sees; `broker`
    settings need Broker mode."""
    if spec.authorization_server_mode is AuthorizationServerMode.BROKER:
        redis_url = spec.broker.redis_url if spec.broker else None
        if not deployment.shares_memory and not redis_url and not deployment.default_redis_url:
            problems.append(
                f"{MCP_PATH}.broker.redisUrl is required when Broker mode is served by "
                f"{deployment.served_by} (they share no memory: a sign-in started on "
                f"one must finish on another); set it, or {deployment.default_redis_hint}"
            )
        if spec.provider is None:
            problems.append(
                f"{MCP_PATH}.provider is required when authorizationServerMode is "
                "Broker (the gateway signs users in at that provider)"
            )
        if not spec.client_id and providers == 1:
            problems.append(
                f"{MCP_PATH}.clientId is required when authorizationServerMode is "
                "Broker (the public client the gateway uses at the provider)"
            )
    elif spec.broker is not None:
        problems.append(f"{MCP_PATH}.broker is only used when authorizationServerMode is Broker")


def compile_mcp(
    spec: McpAuthentication,
    providers: list[JwtProvider],
    problems: list[str],
    deployment: Deployment,
    required_scopes: tuple[str, ...] = (),
) -> CompiledMcp:
    """Compile the MCP OAuth settings: metadata paths and values served by the gateway; the
    scopes every request needs are advertised with the configured ones."""
    _kind_problems(spec, providers, problems)
    _broker_problems(spec, problems, deployment, len(providers))
    metadata = spec.resource_metadata
    mcp_path = DEFAULT_MCP_PATH
    if metadata.resource:
        mcp_path = urlsplit(metadata.resource).path.rstrip("/") or DEFAULT_MCP_PATH
    extra = tuple(
        (name, value)
        for name, value in (
            ("resource_name", metadata.resource_name),
            ("resource_documentation", metadata.resource_documentation),
            ("resource_policy_uri", metadata.resource_policy_uri),
            ("resource_tos_uri", metadata.resource_tos_uri),
        )
        if value is not None
    )
    return CompiledMcp(
        provider=spec.provider,
        client_id=spec.client_id,
        resource=metadata.resource,
        mcp_path=mcp_path,
        scopes_supported=tuple(dict.fromkeys([*metadata.scopes_supported, *required_scopes])),
        bearer_methods_supported=tuple(metadata.bearer_methods_supported),
        extra_metadata=extra,
        mode=spec.authorization_server_mode,
        redis_url=spec.broker.redis_url if spec.broker else None,
    )
