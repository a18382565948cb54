"""Compile `jwtAuthentication.mcp.workloadIdentity`: the issuers Broker mode's `jwt-bearer`
grant trusts (their keys, audiences, CEL rule and scopes), and what the tokens it issues say of
themselves, checked for what the grant needs (Broker mode, a fixed resource, the cluster)."""

from __future__ import annotations

from urllib.parse import urlsplit

from ..authorization_server_modes import AuthorizationServerMode
from ..resources.models import GatewayPolicy, McpAuthentication, WorkloadIssuer
from ..urls import shown_url
from .authorization import compile_authorization
from .deployment import Deployment
from .keyset_sources import KeysetPlace, compile_keyset
from .mcp_settings import MCP_PATH, WORKLOAD_PATH
from .service_refs import ServiceRefs
from .snapshot import CompiledProvider, CompiledWorkloadIdentity, CompiledWorkloadIssuer


def token_issuer_of(resource: str) -> str:
    """The issuer the gateway names in the tokens it issues to workloads: the resource's
    origin and MCP path (as the Broker's metadata names it for a client of that URL)."""
    parts = urlsplit(resource)
    return f"{parts.scheme}://{parts.netloc}{parts.path.rstrip('/') or '/mcp'}"


def workload_problems(
    spec: McpAuthentication, deployment: Deployment, providers: list[str]
) -> list[str]:
    """What the grant needs besides its issuers: Broker mode (the gateway's token endpoint
    takes the assertions), a resource fixed at load (the issued tokens' audience and issuer),
    each issuer once and none the gateway's own, and a cluster for `jwks.kubernetes`.
    `providers`: the issuers of the policy's providers."""
    workload = spec.workload_identity
    if workload is None:
        return []
    problems = []
    resource = spec.resource_metadata.resource
    own = token_issuer_of(resource) if resource is not None else None
    if own is not None and own in providers:
        problems.append(
            f"{MCP_PATH}.resourceMetadata.resource: the gateway issues workload tokens as "
            f"{shown_url(own)}, which is also a provider's issuer; the route could not tell "
            "its tokens from the provider's"
        )
    if spec.authorization_server_mode is not AuthorizationServerMode.BROKER:
        problems.append(
            f"{WORKLOAD_PATH} is only used when authorizationServerMode is Broker (the "
            "gateway's own token endpoint takes the workloads' assertions); set "
            f"{MCP_PATH}.authorizationServerMode: Broker"
        )
    if spec.resource_metadata.resource is None:
        problems.append(
            f"{MCP_PATH}.resourceMetadata.resource is required with workloadIdentity: the "
            "tokens issued to workloads name it as their audience, and its origin and path as "
            "their issuer, the same on every replica whatever Host a request carries"
        )
    seen: dict[str, int] = {}
    for i, trusted in enumerate(workload.issuers):
        path = f"{WORKLOAD_PATH}.issuers[{i}]"
        if trusted.issuer in seen:
            problems.append(
                f"{path}.issuer repeats {WORKLOAD_PATH}.issuers[{seen[trusted.issuer]}]: an "
                "assertion's iss must pick exactly one issuer"
            )
        seen.setdefault(trusted.issuer, i)
        if trusted.issuer == own:
            problems.append(
                f"{path}.issuer is the gateway's own issuer of workload tokens: its tokens "
                "would buy new ones forever, never going back to the workload's platform"
            )
        if trusted.jwks.kubernetes is not None and deployment.cluster is None:
            problems.append(
                f"{path}.jwks.kubernetes needs controller mode (the gateway reads the keys from "
                "the API server it watches); from files, use jwks.remote.url with the "
                "cluster's /openid/v1/jwks, or jwks.inline"
            )
    return problems


def compile_workload(
    policy: GatewayPolicy,
    spec: McpAuthentication,
    refs: ServiceRefs,
    findings: tuple[list[str], list[str]],
) -> CompiledWorkloadIdentity | None:
    """The grant's issuers and the issued tokens' issuer and audience (None when the policy
    has no workloadIdentity, or no resource to name; the problems then say why)."""
    workload = spec.workload_identity
    resource = spec.resource_metadata.resource
    if workload is None or resource is None:
        return None
    issuers = []
    for i, trusted in enumerate(workload.issuers):
        compiled = _compile_issuer(policy, i, trusted, refs, findings)
        if compiled is not None:
            issuers.append(compiled)
    return CompiledWorkloadIdentity(
        issuers=tuple(issuers), token_issuer=token_issuer_of(resource), audience=resource
    )


def _compile_issuer(
    policy: GatewayPolicy,
    index: int,
    spec: WorkloadIssuer,
    refs: ServiceRefs,
    findings: tuple[list[str], list[str]],
) -> CompiledWorkloadIssuer | None:
    path = f"{WORKLOAD_PATH}.issuers[{index}]"
    inline = f"inline:{policy.metadata.key}:workload:{index}"
    where = KeysetPlace(policy.metadata.namespace, inline, path)
    resolved = compile_keyset(spec.jwks, spec.issuer, where, refs, findings)
    rule = compile_authorization(spec.authorization, f"{path}.authorization", findings[0])
    if resolved is None or rule is None:
        return None
    provider = CompiledProvider(
        issuer=spec.issuer,
        audiences=frozenset(spec.audiences),
        keyset=resolved[0],
        discovery_url="",
        index=index,
        name=shown_url(spec.issuer),
    )
    return CompiledWorkloadIssuer(provider, rule, tuple(spec.scopes))
