"""Compile one GatewayPolicy: providers, MCP metadata, CEL rules, transformation, rate limit.

Every problem is collected (in field order) instead of stopping at the first, so one `Accepted`
message names all of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

from ..resources.models import (
    GatewayPolicy,
    JwtAuthenticationSpec,
    JwtProvider,
    RateLimitSpec,
    Transformation,
    parse_duration,
)
from .authorization import compile_authorization
from .cel import CelCompileError, CompiledExpression, compile_expression
from .credentials import compile_credentials, compile_target_credentials
from .deployment import Deployment
from .issuers import issuer_problems
from .keyset_sources import KeysetPlace, compile_keyset
from .mcp_settings import PROVIDERS_PATH, compile_mcp, several_providers_problems
from .policy_egress import egress_problems, reads_discovery
from .scopes import compile_scopes
from .secret_sources import SecretScope
from .service_refs import ServiceRefs
from .snapshot import (
    DPOP_ALGORITHMS,
    CompiledAuthorization,
    CompiledCredentials,
    CompiledDpop,
    CompiledMcp,
    CompiledPolicy,
    CompiledProvider,
    CompiledRateLimit,
    CompiledScopes,
    CompiledTransformation,
    KeysetSource,
    discovery_url_for,
)
from .workload import compile_workload, workload_problems

NEEDS_JWT = "(rules are evaluated against the verified token)"

# What `compile_policy` refuses beyond the models, in words: the CRD's header and the reference
# page list it (tools/gen_crds.py). The loader and the API server accept what fails these, and
# the controller reports it as Accepted=False; a check added here is listed there too.
CONTROLLER_CHECKS = (
    "every CEL expression compiles (authorization and backend.mcp.authorization "
    "matchExpressions, backend.mcp.scopes[].match, transformation.request.set[].value, "
    "rateLimit.key)",
    "jwks.inline is a JWKS document; jwks.remote.backendRef names a Service the gateway "
    "can resolve",
    "several providers: distinct issuers, a loginHintDomains domain in one provider only, no "
    "mcp.provider in Facade mode, a clientId for each in Broker mode, and iss beside sub in what "
    "the backend is told (secretHeader.identity.claims, headers set from jwt.sub)",
    "traffic sets jwtAuthentication; authorization, scopes, backend.mcp, backend.credentials "
    "and a transformation that reads jwt need it",
    "backend.credentials: its secrets can be read, jwtAuthentication.forwardToken is not "
    "set beside it, and each targets[].name is a target of the backend of every route the "
    "policy governs",
    "provider ProviderB (Authentik): clientId is set and is one of the audiences, and the "
    "issuer ends with '/'",
    "authorizationServerMode Broker: provider and clientId are set, and broker.redisUrl when "
    "several processes serve; broker is set only in Broker mode",
)


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """A compiled policy and its problems (none: the policy is valid)."""

    compiled: CompiledPolicy
    problems: tuple[str, ...]
    # References to objects that do not exist (a Service, a port): ResolvedRefs=False.
    unresolved: tuple[str, ...] = ()

    @property
    def valid(self) -> bool:
        """No problems: the policy is Accepted."""
        return not self.problems


def compile_provider(
    policy: GatewayPolicy,
    index: int,
    spec: JwtProvider,
    refs: ServiceRefs,
    findings: tuple[list[str], list[str]],
) -> CompiledProvider | None:
    """Compile one JWT provider: its issuer, audiences, keyset source and discovery URL, and
    (from its own fields, else the policy's `mcp`) its kind, Broker client and name."""
    path = f"{PROVIDERS_PATH}[{index}]"
    issuer = urlsplit(spec.issuer)
    where = KeysetPlace(policy.metadata.namespace, f"inline:{policy.metadata.key}:{index}", path)
    resolved = compile_keyset(spec.jwks, spec.issuer, where, refs, findings)
    if resolved is None:
        return None
    audiences = frozenset(spec.audiences) if spec.audiences else None
    mcp = policy.spec.traffic.jwt_authentication
    mcp_spec = mcp.mcp if mcp is not None else None
    return CompiledProvider(
        issuer=spec.issuer,
        audiences=audiences,
        keyset=resolved[0],
        discovery_url=discovery_url_for(resolved[1], spec.issuer),
        index=index,
        # Shown to users on the consent page: the issuer's host and port, never its user-info.
        name=spec.name or issuer.netloc.rpartition("@")[2],
        kind=spec.kind or (mcp_spec.provider if mcp_spec else None),
        client_id=spec.client_id or (mcp_spec.client_id if mcp_spec else None),
        login_hint_domains=tuple(spec.login_hint_domains),
        dpop=compile_dpop(spec),
    )


def compile_dpop(spec: JwtProvider) -> CompiledDpop:
    """A provider's DPoP mode and proof rules (defaults where `dpopProofs` is unset)."""
    proofs = spec.dpop_proofs
    if proofs is None:
        return CompiledDpop(spec.dpop)
    algorithms = frozenset(proofs.algorithms) if proofs.algorithms else DPOP_ALGORITHMS
    return CompiledDpop(spec.dpop, algorithms, parse_duration(proofs.max_age), proofs.require_nonce)


def compile_transformation(
    spec: Transformation | None, has_jwt: bool, problems: list[str]
) -> CompiledTransformation | None:
    """Compile the request header rewrites (CEL values, header names as lowercase bytes)."""
    if spec is None:
        return None
    compiled: list[tuple[bytes, CompiledExpression]] = []
    for i, header in enumerate(spec.request.set):
        try:
            compiled.append((header.name.lower().encode(), compile_expression(header.value)))
        except CelCompileError as exc:
            problems.append(
                f"spec.traffic.transformation.request.set[{i}].value: invalid CEL: {exc}"
            )
    if not has_jwt and any("jwt" in expression.source for _, expression in compiled):
        problems.append(
            "spec.traffic.transformation uses jwt but the policy has no jwtAuthentication"
        )
    return CompiledTransformation(
        tuple(compiled), frozenset(n.lower().encode() for n in spec.request.remove)
    )


def compile_rate_limit(spec: RateLimitSpec | None, problems: list[str]) -> CompiledRateLimit | None:
    """Compile the rate limit: its CEL key and token-bucket rate."""
    if spec is None:
        return None
    try:
        return CompiledRateLimit(
            compile_expression(spec.key),
            spec.requests,
            spec.requests / parse_duration(spec.window),
            spec.redis_url,
        )
    except CelCompileError as exc:
        problems.append(f"spec.traffic.rateLimit.key: invalid CEL: {exc}")
        return None


def compile_claim_rules(
    policy: GatewayPolicy, problems: list[str]
) -> tuple[CompiledAuthorization | None, CompiledScopes | None]:
    """The tool-level rules and the scope requirements, which both read the verified token."""
    traffic = policy.spec.traffic
    mcp = policy.spec.backend.mcp if policy.spec.backend else None
    mcp_authorization = compile_authorization(
        mcp.authorization if mcp else None, "spec.backend.mcp.authorization", problems, mcp=True
    )
    scopes = compile_scopes(traffic.scopes, mcp.scopes if mcp else [], problems)
    if traffic.jwt_authentication is None:
        for name, present in (
            ("spec.backend.mcp.authorization", mcp_authorization is not None),
            ("spec.traffic.scopes", traffic.scopes is not None),
            ("spec.backend.mcp.scopes", bool(mcp and mcp.scopes)),
        ):
            if present:
                problems.append(f"{name} needs spec.traffic.jwtAuthentication {NEEDS_JWT}")
    return mcp_authorization, scopes


def backend_credentials(
    policy: GatewayPolicy, problems: list[str], refs: ServiceRefs, deployment: Deployment
) -> tuple[CompiledCredentials | None, tuple[tuple[str, CompiledCredentials], ...]]:
    """What the backend receives in place of the caller's token (the default, and per target);
    it needs a verified token."""
    spec = policy.spec.backend.credentials if policy.spec.backend else None
    if spec is None:
        return None, ()
    jwt_spec = policy.spec.traffic.jwt_authentication
    if jwt_spec is None:
        problems.append(
            f"spec.backend.credentials needs spec.traffic.jwtAuthentication {NEEDS_JWT}"
        )
    elif jwt_spec.forward_token:
        problems.append(
            "spec.traffic.jwtAuthentication.forwardToken and spec.backend.credentials both say "
            "what the backend receives; keep credentials (forwardToken is credentials: "
            "{passthrough: true})"
        )
    scope = SecretScope(policy.metadata.namespace, refs.cluster, refs.grants)
    default = compile_credentials(spec, problems, scope)
    targets = compile_target_credentials(spec, problems, scope)
    every = [c for c in (default, *(c for _, c in targets)) if c is not None]
    if any(c.user_oauth is not None for c in every):
        problems.extend(user_oauth_problems(jwt_spec, deployment))
    return default, targets


def separate_hosts(deployment: Deployment) -> bool:
    """Whether the processes may run on different machines (several replicas in a cluster)."""
    return deployment.cluster is not None and not deployment.shares_memory


def user_oauth_problems(
    jwt_spec: JwtAuthenticationSpec | None, deployment: Deployment
) -> list[str]:
    """Why userOAuth cannot be served here: the gateway must be able to check who opens a
    connect link (the route's own sign-in client) and keep tokens encrypted (a key)."""
    problems = []
    mcp = jwt_spec.mcp if jwt_spec is not None else None
    if mcp is None or mcp.client_id is None:
        problems.append(
            "spec.backend.credentials.userOAuth needs spec.traffic.jwtAuthentication.mcp.clientId: "
            "the client the gateway signs users in as, at the route's provider, to check that "
            "whoever opens a connect link is the caller who was asked"
        )
    if deployment.user_token_store is None:
        problems.append(
            "spec.backend.credentials.userOAuth needs the gateway to run with --user-token-key "
            "FILE (users' tokens are only ever kept encrypted); restart it with one"
        )
    elif deployment.user_token_store == "sqlite" and separate_hosts(deployment):
        # Workers of one host share the file; replicas each have their own.
        problems.append(
            f"spec.backend.credentials.userOAuth: {deployment.served_by} serve, each with its "
            "own SQLite file of users' tokens; run with --user-token-store redis://... so "
            "every replica sees every grant"
        )
    return problems


def compile_authentication(
    policy: GatewayPolicy,
    jwt_spec: JwtAuthenticationSpec,
    refs: ServiceRefs,
    findings: tuple[list[str], list[str]],
    deployment: Deployment,
) -> tuple[tuple[CompiledProvider, ...], CompiledMcp | None]:
    """Compile the JWT providers and the MCP settings of a policy."""
    problems = findings[0]
    compiled = [
        compile_provider(policy, i, p, refs, findings) for i, p in enumerate(jwt_spec.providers)
    ]
    several_providers_problems(jwt_spec, problems)
    mcp = None
    if jwt_spec.mcp is not None:
        scopes = policy.spec.traffic.scopes
        required = tuple(scopes.required) if scopes else ()
        mcp = compile_mcp(jwt_spec.mcp, jwt_spec.providers, problems, deployment, required)
        issuers = [provider.issuer for provider in jwt_spec.providers]
        problems.extend(workload_problems(jwt_spec.mcp, deployment, issuers))
        workload = compile_workload(policy, jwt_spec.mcp, refs, findings)
        if workload is not None:
            mcp = replace(mcp, workload=workload)
    return tuple(p for p in compiled if p is not None), mcp


def compile_policy(
    policy: GatewayPolicy, refs: ServiceRefs, deployment: Deployment | None = None
) -> PolicyResult:
    """Compile one policy; its problems make it invalid (its routes then answer 503)."""
    problems: list[str] = []
    unresolved: list[str] = []
    traffic = policy.spec.traffic
    jwt_spec = traffic.jwt_authentication
    if jwt_spec is None and traffic.authorization is not None:
        problems.append(
            f"spec.traffic.authorization needs spec.traffic.jwtAuthentication {NEEDS_JWT}"
        )
    if jwt_spec is None and traffic.authorization is None:
        problems.append("spec.traffic: set jwtAuthentication (and optionally authorization)")
    providers, mcp = (
        ((), None)
        if jwt_spec is None
        else compile_authentication(
            policy, jwt_spec, refs, (problems, unresolved), deployment or Deployment()
        )
    )
    authorization = compile_authorization(
        traffic.authorization, "spec.traffic.authorization", problems
    )
    mcp_authorization, scopes = compile_claim_rules(policy, problems)
    transformation = compile_transformation(traffic.transformation, jwt_spec is not None, problems)
    rate_limit = compile_rate_limit(traffic.rate_limit, problems)
    credentials, target_credentials = backend_credentials(
        policy, problems, refs, deployment or Deployment()
    )
    issuer_problems(policy, problems)
    if refs.cluster is not None:
        every = [c for c in (credentials, *(c for _, c in target_credentials)) if c is not None]
        discovers = reads_discovery(mcp, every)
        problems.extend(egress_problems(policy, refs.cluster.egress, discovers))
    # Last: every problem above must be in it, or an invalid policy would be served.
    invalid = None
    if problems:
        invalid = f"GatewayPolicy {policy.metadata.key} is invalid: " + "; ".join(problems)
    compiled = CompiledPolicy(
        policy.metadata.key,
        providers,
        mcp,
        authorization,
        bool(jwt_spec and jwt_spec.forward_token),
        transformation,
        rate_limit,
        invalid,
        mcp_authorization,
        scopes,
        jwt_spec.mode if jwt_spec else "Strict",
        credentials,
        target_credentials,
    )
    return PolicyResult(compiled, tuple(problems), tuple(unresolved))


def fetch_targets(
    results: Mapping[str, PolicyResult],
) -> tuple[dict[str, KeysetSource], dict[str, float]]:
    """The keysets and discovery documents (URL → cache TTL) the valid policies need fetched:
    discovery for the providers the gateway fronts or signs users in at."""
    keysets: dict[str, KeysetSource] = {}
    discovery: dict[str, float] = {}
    for key in sorted(results):
        compiled = results[key].compiled
        if not results[key].valid:
            continue
        for provider in compiled.providers:
            keysets[provider.keyset.url] = provider.keyset
            if uses_discovery(compiled):
                discovery[provider.discovery_url] = provider.keyset.refresh or 300.0
        for trusted in compiled.workload_issuers:
            keysets[trusted.provider.keyset.url] = trusted.provider.keyset
    return keysets, discovery


def uses_discovery(compiled: CompiledPolicy) -> bool:
    """Whether the gateway reads its providers' discovery documents (Facade metadata, Broker,
    token exchange at their token endpoints)."""
    return reads_discovery(compiled.mcp, compiled.every_credential())
