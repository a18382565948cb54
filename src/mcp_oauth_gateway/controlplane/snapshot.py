"""Build the immutable runtime snapshot from loaded resources.

Everything the data plane needs is resolved and compiled here: listener route tables, CORS
settings, backend URLs, JWKS and discovery URLs, compiled CEL. The request path only looks up.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import UTC, datetime
from types import MappingProxyType
from typing import Literal
from urllib.parse import urlsplit

import orjson

from ..resources.loader import Loaded, LoadResult
from ..resources.models import (
    Authorization,
    CorsPolicy,
    Gateway,
    GatewayBackend,
    GatewayPolicy,
    HTTPRoute,
    JwtProvider,
    McpAuthentication,
    Service,
    parse_duration,
)
from . import status
from .cel import CelCompileError, CompiledExpression, compile_expression
from .keys import Keyset, parse_jwks

DEFAULT_BACKEND_TIMEOUT = 300.0
DEFAULT_MCP_PATH = "/mcp"
PRM_PREFIX = "/.well-known/oauth-protected-resource"
ASM_PREFIX = "/.well-known/oauth-authorization-server"
REGISTRATION_SUFFIX = "/client-registration"


@dataclass(frozen=True, slots=True)
class CompiledCors:
    allow_all_origins: bool
    allow_origins: frozenset[str]
    allow_credentials: bool
    allow_methods: str
    allow_headers: str
    allow_all_headers: bool
    expose_headers: str
    max_age: str


@dataclass(frozen=True, slots=True)
class CompiledTarget:
    host: str
    port: int
    path: str

    @property
    def authority(self) -> str:
        """`host:port` as sent in the Host header to the backend."""
        return f"{self.host}:{self.port}"


@dataclass(frozen=True, slots=True)
class KeysetSource:
    url: str
    refresh: float
    inline: Keyset | None = None


@dataclass(frozen=True, slots=True)
class CompiledProvider:
    issuer: str
    audiences: frozenset[str] | None
    keyset: KeysetSource
    discovery_url: str


@dataclass(frozen=True, slots=True)
class CompiledMcp:
    provider: Literal["ProviderB", "Keycloak"] | None
    client_id: str | None
    resource: str | None
    mcp_path: str
    scopes_supported: tuple[str, ...]
    bearer_methods_supported: tuple[str, ...]
    extra_metadata: tuple[tuple[str, str], ...]
    mode: Literal["Facade", "Broker"] = "Facade"
    redis_url: str | None = None

    @property
    def prm_path(self) -> str:
        """Where protected resource metadata is served."""
        return PRM_PREFIX + self.mcp_path

    @property
    def asm_path(self) -> str:
        """Where authorization server metadata is served."""
        return ASM_PREFIX + self.mcp_path

    @property
    def registration_path(self) -> str:
        """Where the client-registration shim is served."""
        return ASM_PREFIX + self.mcp_path + REGISTRATION_SUFFIX


@dataclass(frozen=True, slots=True)
class CompiledAuthorization:
    action: Literal["Allow", "Deny", "Require"]
    expressions: tuple[CompiledExpression, ...]


@dataclass(frozen=True, slots=True)
class CompiledTransformation:
    set: tuple[tuple[bytes, CompiledExpression], ...]
    remove: frozenset[bytes]


@dataclass(frozen=True, slots=True)
class CompiledRateLimit:
    key: CompiledExpression
    capacity: int
    per_second: float
    redis_url: str | None


@dataclass(frozen=True, slots=True)
class CompiledPolicy:
    key: str
    provider: CompiledProvider | None
    mcp: CompiledMcp | None
    authorization: CompiledAuthorization | None
    forward_token: bool
    transformation: CompiledTransformation | None = None
    rate_limit: CompiledRateLimit | None = None
    # Set when the policy is invalid: the routes it targets answer 503 with this text.
    invalid: str | None = None
    mcp_authorization: CompiledAuthorization | None = None


@dataclass(frozen=True, slots=True)
class CompiledRoute:
    route: str
    rule: int
    match_type: Literal["PathPrefix", "Exact"]
    match_value: str
    hostnames: tuple[str, ...]
    cors: CompiledCors | None
    target: CompiledTarget | None
    backend_timeout: float
    policy: CompiledPolicy | None
    # Set when the rule cannot be served (missing backend): answered 503 with this text.
    broken: str | None = None


@dataclass(frozen=True, slots=True)
class PolicyReport:
    key: str
    source: str
    generation: int
    conditions: tuple[status.Condition, ...]
    keyset_urls: tuple[str, ...]
    discovery_urls: tuple[str, ...]

    @property
    def ok(self) -> bool:
        """Accepted and Attached are both True."""
        return all(c.status for c in self.conditions if c.type in ("Accepted", "Attached"))


@dataclass(frozen=True)
class Snapshot:
    listeners: MappingProxyType[int, tuple[CompiledRoute, ...]]
    policies: tuple[PolicyReport, ...]
    errors: tuple[str, ...]
    keysets: MappingProxyType[str, KeysetSource]
    # Discovery URL → cache TTL (the provider's JWKS cacheDuration).
    discovery_urls: MappingProxyType[str, float]
    built_at: str = field(default="")

    @property
    def ok(self) -> bool:
        """No load/resolution errors and every policy Accepted and Attached."""
        return not self.errors and all(p.ok for p in self.policies)


# --- pure helpers ---------------------------------------------------------------------------


def compile_cors(cors: CorsPolicy) -> CompiledCors:
    """Precompute the CORS header values for a route filter."""
    methods = cors.allow_methods or ["GET", "POST", "OPTIONS"]
    return CompiledCors(
        allow_all_origins="*" in cors.allow_origins,
        allow_origins=frozenset(o.rstrip("/") for o in cors.allow_origins if o != "*"),
        allow_credentials=cors.allow_credentials,
        allow_methods=", ".join(methods),
        allow_headers=", ".join(cors.allow_headers),
        allow_all_headers="*" in cors.allow_headers,
        expose_headers=", ".join(cors.expose_headers),
        max_age=str(cors.max_age),
    )


def service_address(service: Service) -> str | None:
    """The host a backendRef to this Service resolves to in standalone mode."""
    if service.spec.type == "ExternalName":
        return service.spec.external_name
    return None


def discovery_url_for(base: str, issuer: str) -> str:
    """OIDC discovery through `base` (scheme://host:port) at the issuer's path."""
    path = urlsplit(issuer).path.rstrip("/")
    return f"{base}{path}/.well-known/openid-configuration"


def route_sort_key(route: CompiledRoute) -> tuple[int, int]:
    """Exact before prefix, then longest path first (the longest match wins)."""
    return (0 if route.match_type == "Exact" else 1, -len(route.match_value))


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- the builder ----------------------------------------------------------------------------


class _Builder:
    def __init__(self, loaded: LoadResult):
        self.loaded = loaded
        self.errors: list[str] = list(loaded.errors)
        self.at = _now()
        self.gateways = self._index(loaded, "Gateway")
        self.routes = self._index(loaded, "HTTPRoute")
        self.backends = self._index(loaded, "GatewayBackend")
        self.services = self._index(loaded, "Service")
        self.policies = self._index(loaded, "GatewayPolicy")
        self.keysets: dict[str, KeysetSource] = {}
        self.discovery_urls: dict[str, float] = {}

    @staticmethod
    def _index(loaded: LoadResult, kind: str) -> dict[str, Loaded]:
        return {item.resource.metadata.key: item for item in loaded.of_kind(kind)}

    # policies

    def _provider(
        self, policy: GatewayPolicy, index: int, spec: JwtProvider, problems: list[str]
    ) -> CompiledProvider | None:
        path = f"spec.traffic.jwtAuthentication.providers[{index}]"
        ns = policy.metadata.namespace
        if spec.jwks.inline is not None:
            try:
                keyset = parse_jwks(orjson.loads(spec.jwks.inline), version=1)
            except (ValueError, orjson.JSONDecodeError) as exc:
                problems.append(f"{path}.jwks.inline: {exc}")
                return None
            source = KeysetSource(url=f"inline:{policy.metadata.key}:{index}", refresh=0,
                                  inline=keyset)
            base = None
        else:
            remote = spec.jwks.remote
            assert remote is not None  # the model guarantees exactly one source
            refresh = parse_duration(remote.cache_duration)
            if remote.url is not None:
                source = KeysetSource(url=remote.url, refresh=refresh)
                parts = urlsplit(spec.issuer)
                base = f"{parts.scheme}://{parts.netloc}" if parts.netloc else None
            else:
                ref = remote.backend_ref
                assert ref is not None
                assert remote.jwks_path is not None
                key = f"{ref.namespace or ns}/{ref.name}"
                service = self.services.get(key)
                if service is None:
                    problems.append(f"{path}.jwks.remote.backendRef: Service {key} not found "
                                    f"(define a Service of type ExternalName named {ref.name})")
                    return None
                host = service_address(service.resource)  # type: ignore[arg-type]
                if host is None:
                    problems.append(
                        f"{path}.jwks.remote.backendRef: Service {key} has type "
                        f"{service.resource.spec.type}; standalone mode resolves only "  # type: ignore[union-attr]
                        f"type ExternalName (set spec.externalName to the provider's host)")
                    return None
                base = f"http://{host}:{ref.port}"
                source = KeysetSource(url=base + remote.jwks_path, refresh=refresh)
        if base is None:
            parts = urlsplit(spec.issuer)
            base = f"{parts.scheme}://{parts.netloc}"
        audiences = frozenset(spec.audiences) if spec.audiences else None
        return CompiledProvider(issuer=spec.issuer, audiences=audiences, keyset=source,
                                discovery_url=discovery_url_for(base, spec.issuer))

    def _policy(self, item: Loaded) -> tuple[CompiledPolicy, list[str]]:
        policy: GatewayPolicy = item.resource  # type: ignore[assignment]
        problems: list[str] = []
        traffic = policy.spec.traffic
        jwt_spec = traffic.jwt_authentication
        provider = None
        mcp = None
        if jwt_spec is None and traffic.authorization is not None:
            problems.append("spec.traffic.authorization needs spec.traffic.jwtAuthentication "
                            "(rules are evaluated against the verified token)")
        if jwt_spec is None and traffic.authorization is None:
            problems.append("spec.traffic: set jwtAuthentication (and optionally authorization)")
        if jwt_spec is not None:
            compiled = [self._provider(policy, i, p, problems)
                        for i, p in enumerate(jwt_spec.providers)]
            if len(jwt_spec.providers) > 1:
                # One issuer per route keeps the 401 challenge and the metadata unambiguous.
                problems.append("spec.traffic.jwtAuthentication.providers: exactly one provider "
                                "is supported per policy")
            provider = compiled[0]
            if jwt_spec.mcp is not None:
                mcp = self._mcp(jwt_spec.mcp, jwt_spec.providers[0], problems)
        authorization = _authorization(traffic.authorization, "spec.traffic.authorization",
                                       problems)
        backend = policy.spec.backend
        mcp_authorization = _authorization(
            backend.mcp.authorization if backend and backend.mcp else None,
            "spec.backend.mcp.authorization", problems, mcp=True)
        if mcp_authorization is not None and jwt_spec is None:
            problems.append("spec.backend.mcp.authorization needs spec.traffic.jwtAuthentication "
                            "(rules are evaluated against the verified token)")
        transformation = None
        if traffic.transformation is not None:
            compiled_set = []
            for i, item in enumerate(traffic.transformation.request.set):
                try:
                    compiled_set.append((item.name.lower().encode(),
                                         compile_expression(item.value)))
                except CelCompileError as exc:
                    problems.append(f"spec.traffic.transformation.request.set[{i}].value: "
                                    f"invalid CEL: {exc}")
            if jwt_spec is None and any("jwt" in e.source for _, e in compiled_set):
                problems.append("spec.traffic.transformation uses jwt but the policy has no "
                                "jwtAuthentication")
            transformation = CompiledTransformation(
                tuple(compiled_set),
                frozenset(n.lower().encode() for n in traffic.transformation.request.remove))
        rate_limit = None
        if traffic.rate_limit is not None:
            spec_rl = traffic.rate_limit
            try:
                rate_limit = CompiledRateLimit(
                    compile_expression(spec_rl.key), spec_rl.requests,
                    spec_rl.requests / parse_duration(spec_rl.window), spec_rl.redis_url)
            except CelCompileError as exc:
                problems.append(f"spec.traffic.rateLimit.key: invalid CEL: {exc}")
        invalid = None
        if problems:
            invalid = f"GatewayPolicy {policy.metadata.key} is invalid: " + "; ".join(problems)
        elif provider is not None:
            self.keysets[provider.keyset.url] = provider.keyset
            if mcp is not None and mcp.provider is not None:
                self.discovery_urls[provider.discovery_url] = provider.keyset.refresh or 300.0
        forward = bool(jwt_spec and jwt_spec.forward_token)
        return CompiledPolicy(policy.metadata.key, provider, mcp, authorization, forward,
                              transformation, rate_limit, invalid, mcp_authorization), problems

    @staticmethod
    def _mcp(
        spec: McpAuthentication, provider: JwtProvider, problems: list[str]
    ) -> CompiledMcp:
        path = "spec.traffic.jwtAuthentication.mcp"
        if spec.provider == "ProviderB":
            if not spec.client_id:
                problems.append(f"{path}.clientId is required when provider is ProviderB (the "
                                f"pre-registered public client returned to MCP clients)")
            elif provider.audiences and spec.client_id not in provider.audiences:
                problems.append(
                    f"spec.traffic.jwtAuthentication.providers[0].audiences must contain "
                    f"mcp.clientId {spec.client_id!r}: provider B sets aud to the client id")
            if not provider.issuer.endswith("/"):
                problems.append(
                    f"spec.traffic.jwtAuthentication.providers[0].issuer {provider.issuer!r} "
                    f"must end with '/': provider B issuers are <url>/application/o/<slug>/")
        if spec.authorization_server_mode == "Broker":
            if spec.provider is None:
                problems.append(f"{path}.provider is required when authorizationServerMode is "
                                "Broker (the gateway signs users in at that provider)")
            if not spec.client_id:
                problems.append(f"{path}.clientId is required when authorizationServerMode is "
                                "Broker (the public client the gateway uses at the provider)")
        elif spec.broker is not None:
            problems.append(f"{path}.broker is only used when authorizationServerMode is Broker")
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
            scopes_supported=tuple(metadata.scopes_supported),
            bearer_methods_supported=tuple(metadata.bearer_methods_supported),
            extra_metadata=extra,
            mode=spec.authorization_server_mode,
            redis_url=spec.broker.redis_url if spec.broker else None,
        )

    # routes

    def _route_parents(self, item: Loaded) -> list[tuple[Gateway, str | None]]:
        route: HTTPRoute = item.resource  # type: ignore[assignment]
        parents = []
        for i, ref in enumerate(route.spec.parent_refs):
            key = f"{ref.namespace or route.metadata.namespace}/{ref.name}"
            gateway = self.gateways.get(key)
            if gateway is None:
                self.errors.append(f"{item.source}: {item.label}: spec.parentRefs[{i}]: "
                                   f"Gateway {key} not found")
                continue
            gw: Gateway = gateway.resource  # type: ignore[assignment]
            names = {listener.name for listener in gw.spec.listeners}
            if ref.section_name is not None and ref.section_name not in names:
                self.errors.append(
                    f"{item.source}: {item.label}: spec.parentRefs[{i}].sectionName: Gateway "
                    f"{key} has no listener {ref.section_name!r} (listeners: {sorted(names)})")
                continue
            parents.append((gw, ref.section_name))
        return parents

    def _listener_ports(self, gateway: Gateway, section: str | None, port: int | None) -> set[int]:
        return {
            listener.port
            for listener in gateway.spec.listeners
            if (section is None or listener.name == section)
            and (port is None or listener.port == port)
        }

    def _target(self, item: Loaded, rule_index: int, ref_index: int) -> CompiledTarget | str:
        route: HTTPRoute = item.resource  # type: ignore[assignment]
        ref = route.spec.rules[rule_index].backend_refs[ref_index]
        key = f"{ref.namespace or route.metadata.namespace}/{ref.name}"
        backend = self.backends.get(key)
        where = f"spec.rules[{rule_index}].backendRefs[{ref_index}]"
        if backend is None:
            message = f"{item.source}: {item.label}: {where}: GatewayBackend {key} not found"
            self.errors.append(message)
            return message
        spec: GatewayBackend = backend.resource  # type: ignore[assignment]
        static = spec.spec.mcp.targets[0].static
        return CompiledTarget(host=static.host, port=static.port, path=static.path)

    def build(self) -> Snapshot:
        compiled_policies: dict[str, CompiledPolicy] = {}
        problems_by_policy: dict[str, list[str]] = {}
        for _, item in sorted(self.policies.items()):
            compiled, problems = self._policy(item)
            compiled_policies[compiled.key] = compiled
            problems_by_policy[compiled.key] = problems

        # Which policy governs which route: the first by namespace/name wins, later ones conflict.
        route_policy: dict[str, str] = {}
        missing: dict[str, list[str]] = {}
        conflicts: dict[str, list[str]] = {}
        route_parents = {key: self._route_parents(item) for key, item in self.routes.items()}
        for key in compiled_policies:
            policy: GatewayPolicy = self.policies[key].resource  # type: ignore[assignment]
            missing[key], conflicts[key] = [], []
            for ref in policy.spec.target_refs:
                route_key = f"{policy.metadata.namespace}/{ref.name}"
                if route_key not in self.routes:
                    missing[key].append(f"HTTPRoute {route_key} not found")
                elif not route_parents[route_key]:
                    missing[key].append(f"HTTPRoute {route_key} is not attached to any Gateway")
                elif route_key in route_policy and route_policy[route_key] != key:
                    conflicts[key].append(f"HTTPRoute {route_key} is already governed by "
                                          f"GatewayPolicy {route_policy[route_key]}")
                elif not problems_by_policy[key]:
                    route_policy[route_key] = key
                else:
                    # An invalid policy still claims its routes so they fail closed (503).
                    route_policy.setdefault(route_key, key)

        listeners: dict[int, list[CompiledRoute]] = {}
        for gateway_item in self.gateways.values():
            for listener in gateway_item.resource.spec.listeners:  # type: ignore[union-attr]
                listeners.setdefault(listener.port, [])
        for route_key, item in self.routes.items():
            route: HTTPRoute = item.resource  # type: ignore[assignment]
            ports: set[int] = set()
            for (gateway, section), ref in zip(route_parents[route_key], route.spec.parent_refs,
                                               strict=False):
                ports |= self._listener_ports(gateway, section, ref.port)
            policy_key = route_policy.get(route_key)
            policy = compiled_policies.get(policy_key) if policy_key else None
            for r_index, rule in enumerate(route.spec.rules):
                target = self._target(item, r_index, 0)
                cors = next((compile_cors(f.cors) for f in rule.filters if f.type == "CORS"), None)
                timeout = DEFAULT_BACKEND_TIMEOUT
                if rule.timeouts is not None:
                    chosen = rule.timeouts.backend_request or rule.timeouts.request
                    if chosen:
                        timeout = parse_duration(chosen)
                for match in rule.matches:
                    compiled_route = CompiledRoute(
                        route=route_key, rule=r_index, match_type=match.path.type,
                        match_value=match.path.value, hostnames=tuple(route.spec.hostnames),
                        cors=cors, target=target if isinstance(target, CompiledTarget) else None,
                        backend_timeout=timeout, policy=policy,
                        broken=target if isinstance(target, str) else None,
                    )
                    for port in ports:
                        listeners.setdefault(port, []).append(compiled_route)

        reports = []
        for key, compiled in compiled_policies.items():
            item = self.policies[key]
            generation = item.resource.metadata.generation
            problems = problems_by_policy[key]
            conditions = (
                status.accepted(problems, generation, self.at),
                status.attached(not problems, missing[key], conflicts[key], generation, self.at),
            )
            keyset_urls = (compiled.provider.keyset.url,) if compiled.provider else ()
            discovery = (
                (compiled.provider.discovery_url,)
                if compiled.provider and compiled.mcp and compiled.mcp.provider else ()
            )
            reports.append(PolicyReport(key, str(item.source), generation, conditions,
                                        keyset_urls, discovery))

        tables = {port: tuple(sorted(routes, key=route_sort_key))
                  for port, routes in listeners.items()}
        return Snapshot(
            listeners=MappingProxyType(tables),
            policies=tuple(reports),
            errors=tuple(self.errors),
            keysets=MappingProxyType(dict(self.keysets)),
            discovery_urls=MappingProxyType(dict(self.discovery_urls)),
            built_at=self.at,
        )


def build_snapshot(loaded: LoadResult) -> Snapshot:
    """Resolve references, compile policies and build route tables; never raises for bad input."""
    return _Builder(loaded).build()


def _authorization(spec: Authorization | None, path: str, problems: list[str],
                   mcp: bool = False) -> CompiledAuthorization | None:
    """Compile an `Authorization` block, adding one problem per expression that does not."""
    if spec is None:
        return None
    expressions = []
    for i, source in enumerate(spec.policy.match_expressions):
        try:
            expressions.append(compile_expression(source, mcp=mcp))
        except CelCompileError as exc:
            problems.append(f"{path}.policy.matchExpressions[{i}]: invalid CEL: {exc}")
    return CompiledAuthorization(spec.action, tuple(expressions))
