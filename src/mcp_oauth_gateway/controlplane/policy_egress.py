"""Every host a GatewayPolicy makes the gateway connect to, held to the egress rules in a cluster.

One walk over the fields, so a URL field added later is found here or nowhere: the JWKS URL,
the issuer when the discovery document is read from its host (not through a Service), and the
Redis URLs (Broker state, rate limits). Hosts reached through a Service reference are checked
where the reference is resolved (service_refs).
"""

from __future__ import annotations

from collections.abc import Iterable

from ..authorization_server_modes import AuthorizationServerMode
from ..redis_targets import CLUSTER, SENTINEL, shown_redis_url
from ..resources.models import GatewayPolicy
from .egress import EgressRules
from .mcp_settings import PROVIDERS_PATH, WORKLOAD_PATH
from .snapshot import CompiledCredentials, CompiledMcp


def reads_discovery(mcp: CompiledMcp | None, credentials: Iterable[CompiledCredentials]) -> bool:
    """Whether the gateway reads its providers' discovery documents (Facade metadata, Broker,
    token exchange at their token endpoints, userOAuth's sign-in of who opens a connect link)."""
    if any(c.token_exchange is not None or c.user_oauth is not None for c in credentials):
        return True
    return mcp is not None and (
        mcp.provider is not None or mcp.mode is AuthorizationServerMode.BROKER
    )


def _fetched_urls(policy: GatewayPolicy, discovers: bool) -> list[tuple[str, str]]:
    """(field path, URL) of every URL the policy's own text makes the gateway connect to."""
    urls: list[tuple[str, str]] = []
    traffic = policy.spec.traffic
    jwt = traffic.jwt_authentication
    for index, provider in enumerate(jwt.providers if jwt is not None else []):
        path = f"{PROVIDERS_PATH}[{index}]"
        remote = provider.jwks.remote
        if remote is not None and remote.url is not None:
            urls.append((f"{path}.jwks.remote.url", remote.url))
        if discovers and (remote is None or remote.backend_ref is None):
            urls.append((f"{path}.issuer", provider.issuer))
    workload = jwt.mcp.workload_identity if jwt is not None and jwt.mcp is not None else None
    for index, trusted in enumerate(workload.issuers if workload is not None else []):
        remote = trusted.jwks.remote
        if remote is not None and remote.url is not None:
            urls.append((f"{WORKLOAD_PATH}.issuers[{index}].jwks.remote.url", remote.url))
    broker = jwt.mcp.broker if jwt is not None and jwt.mcp is not None else None
    if broker is not None and broker.redis_url is not None:
        urls.append(("spec.traffic.jwtAuthentication.mcp.broker.redisUrl", broker.redis_url))
    if traffic.rate_limit is not None and traffic.rate_limit.redis_url is not None:
        urls.append(("spec.traffic.rateLimit.redisUrl", traffic.rate_limit.redis_url))
    return urls + _user_oauth_urls(policy)


def _user_oauth_urls(policy: GatewayPolicy) -> list[tuple[str, str]]:
    """(field path, URL) of what the gateway fetches from the upstream authorization servers
    userOAuth names (the authorization endpoint only browsers visit; what discovery finds is
    checked as the gateway connects)."""
    spec = policy.spec.backend.credentials if policy.spec.backend is not None else None
    if spec is None:
        return []
    base = "spec.backend.credentials"
    modes = [(base, spec)] + [(f"{base}.targets[{i}]", t) for i, t in enumerate(spec.targets or [])]
    urls: list[tuple[str, str]] = []
    for path, mode in modes:
        user = mode.user_oauth
        if user is None:
            continue
        for name, url in (
            ("issuer", user.issuer),
            ("tokenEndpoint", user.token_endpoint),
            ("revocationEndpoint", user.revocation_endpoint),
        ):
            if url is not None:
                urls.append((f"{path}.userOAuth.{name}", url))
    return urls


def _redis_refusal(path: str, url: str) -> str | None:
    """Why a tenant may not name this Redis: a Sentinel set or a Cluster tells the gateway
    where to connect next (the primary, each slot's node), past every egress rule."""
    scheme = url.partition(":")[0].lower()
    if scheme not in SENTINEL + CLUSTER:
        return None
    instead = (
        "leave the field out to use the operator's Redis (MCP_OAUTH_GATEWAY_REDIS_URL)"
        if path.endswith("broker.redisUrl")
        else "ask the operator for one server's address"
    )
    return (
        f"{shown_redis_url(url)!r}: a Sentinel or Cluster URL in a tenant's policy would let "
        f"the servers it names send the gateway to any address; give one server's URL, or "
        f"{instead}"
    )


def egress_problems(policy: GatewayPolicy, rules: EgressRules, discovers: bool) -> list[str]:
    """One problem per URL whose host the policy's namespace may not name."""
    namespace = policy.metadata.namespace
    problems = []
    for path, url in _fetched_urls(policy, discovers):
        why = _redis_refusal(path, url) or rules.url_refusal(url, namespace)
        if why is not None:
            problems.append(f"{path}: {why}")
    return problems
