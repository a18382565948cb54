"""The immutable runtime snapshot: what the data plane serves, resolved and compiled.

Everything the data plane needs is here: listener route tables, CORS settings, backend URLs,
JWKS and discovery URLs, compiled CEL. The request path only looks up. `builder` makes it from
resource objects; `build_snapshot` from loaded files.
"""

from __future__ import annotations

import ssl
from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Literal, get_args
from urllib.parse import urlsplit

from ..authorization_server_modes import AuthorizationServerMode
from ..provider_kinds import ProviderKind
from ..resources.models import CorsPolicy, DpopAlgorithm, DpopMode, JwtMode, RuleAction, Service
from ..urls import shown_url
from . import status
from .cel import CompiledExpression
from .keys import Keyset

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
class TargetTls:
    """How the gateway speaks TLS to a target: the name its certificate must hold (and SNI),
    the CA certificates trusted instead of the system's, and the client context made from them
    at load. Two targets with the same name and CAs are equal whatever context object each
    holds, so a reload that changes neither keeps a federated route's sessions."""

    server_name: str
    # The PEM text of `caFile` (None: the system's CAs): part of the identity, so connections
    # verified against one set of CAs are never handed to a target that trusts another.
    ca_pem: bytes | None = field(repr=False)
    context: ssl.SSLContext = field(compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class CompiledTarget:
    host: str
    port: int
    path: str
    # The GatewayBackend's name for it: a federated backend's tool prefix and `mcp.target`.
    name: str = ""
    # Its own timeout in seconds (None: the route rule's). Not part of its identity: a reload
    # changing only a timeout keeps a federated route's sessions.
    timeout: float | None = field(default=None, compare=False)
    # None: plain HTTP.
    tls: TargetTls | None = None

    @property
    def authority(self) -> str:
        """`host:port` as sent in the Host header to the backend (an IPv6 host bracketed);
        over TLS to port 443 the host alone."""
        host = f"[{self.host}]" if ":" in self.host else self.host
        # What clients send a hosted https server (curl, browsers, the SDKs): one that matches
        # Host against its public name (the Python SDK's allowed_hosts) refuses `name:443`.
        if self.tls is not None and self.port == 443:
            return host
        return f"{host}:{self.port}"

    @property
    def url(self) -> str:
        """Where the target is reached: `http(s)://host:port/path`."""
        scheme = "http" if self.tls is None else "https"
        return f"{scheme}://{self.authority}{self.path}"


@dataclass(frozen=True, slots=True)
class KeysetSource:
    url: str
    refresh: float
    inline: Keyset | None = None


# Every algorithm a DPoP proof may be signed with: the model's list, so the two cannot differ.
DPOP_ALGORITHMS: frozenset[str] = frozenset(get_args(DpopAlgorithm))


@dataclass(frozen=True, slots=True)
class CompiledDpop:
    """A provider's DPoP settings (`dpop`, `dpopProofs`): the mode, the proof algorithms, how
    far a proof's `iat` may be from now (seconds, either way), and whether nonces are
    required."""

    mode: DpopMode = "Allowed"
    algorithms: frozenset[str] = DPOP_ALGORITHMS
    max_age: float = 300.0
    require_nonce: bool = False

    @property
    def enabled(self) -> bool:
        """Whether DPoP tokens are accepted at all."""
        return self.mode != "Disabled"


@dataclass(frozen=True, slots=True)
class CompiledProvider:
    issuer: str
    audiences: frozenset[str] | None
    keyset: KeysetSource
    discovery_url: str
    # Where it is in `providers[]` (messages name it), and what tells it apart on a route with
    # several: a name for people, its kind, the Broker's client there, login_hint domains.
    index: int = 0
    name: str = ""
    kind: ProviderKind | None = None
    client_id: str | None = None
    login_hint_domains: tuple[str, ...] = ()
    dpop: CompiledDpop = CompiledDpop()

    @property
    def label(self) -> str:
        """How messages name it: `providers[i] (issuer …)`."""
        return f"providers[{self.index}] (issuer {shown_url(self.issuer)})"


@dataclass(frozen=True, slots=True)
class CompiledAuthorization:
    action: RuleAction
    expressions: tuple[CompiledExpression, ...]


@dataclass(frozen=True, slots=True)
class CompiledWorkloadIssuer:
    """A trusted issuer of workload assertions: its keys and accepted audiences (as a
    provider's: `index` is its place in `workloadIdentity.issuers`), who of its workloads may
    get a token, and the scopes that token carries."""

    provider: CompiledProvider
    authorization: CompiledAuthorization
    scopes: tuple[str, ...]

    @property
    def label(self) -> str:
        """How messages name it: `workloadIdentity.issuers[i] (issuer …)`."""
        shown = shown_url(self.provider.issuer)
        return f"workloadIdentity.issuers[{self.provider.index}] (issuer {shown})"


@dataclass(frozen=True, slots=True)
class CompiledWorkloadIdentity:
    """Broker mode's `jwt-bearer` grant: the issuers it trusts, and what the tokens it issues
    say of themselves (fixed at load, from `resourceMetadata.resource`, so that every replica
    issues and verifies the same)."""

    issuers: tuple[CompiledWorkloadIssuer, ...]
    # The gateway's issuer as the tokens it issues name it: the resource's origin and MCP path.
    token_issuer: str
    # Their audience: the resource itself.
    audience: str

    @property
    def token_provider(self) -> CompiledProvider:
        """The gateway as the issuer of workload tokens, as the route's JWT stage sees it (its
        keys are the Broker's, never fetched)."""
        return CompiledProvider(
            issuer=self.token_issuer,
            audiences=frozenset({self.audience}),
            keyset=KeysetSource(url=f"workload-tokens:{self.token_issuer}", refresh=0),
            discovery_url="",
            name="this gateway (workload identity)",
        )


@dataclass(frozen=True, slots=True)
class CompiledMcp:
    provider: ProviderKind | None
    client_id: str | None
    resource: str | None
    mcp_path: str
    scopes_supported: tuple[str, ...]
    bearer_methods_supported: tuple[str, ...]
    extra_metadata: tuple[tuple[str, str], ...]
    mode: AuthorizationServerMode = AuthorizationServerMode.FACADE
    redis_url: str | None = None
    workload: CompiledWorkloadIdentity | None = None

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
class CompiledScopeRule:
    match: CompiledExpression
    required: tuple[str, ...]
    # The item kinds (tool, prompt, resource) the rule is about.
    kinds: frozenset[str]


@dataclass(frozen=True, slots=True)
class CompiledScopes:
    # Every request on the route needs these.
    required: tuple[str, ...]
    # Granted scope → the scopes it also grants (transitively closed).
    implies: Mapping[str, frozenset[str]]
    items: tuple[CompiledScopeRule, ...] = ()


@dataclass(frozen=True, slots=True)
class CompiledTokenExchange:
    client_id: str
    client_secret: str = field(repr=False)
    audience: str | None
    resource: str | None
    scope: str | None


@dataclass(frozen=True, slots=True)
class CompiledUserOAuth:
    """Each user's own token at a third-party authorization server (resolved at load; the
    endpoints of an upstream found by discovery are read when first needed)."""

    client_id: str
    client_secret: str | None = field(repr=False)
    scopes: tuple[str, ...]
    issuer: str | None
    authorization_endpoint: str | None
    token_endpoint: str | None
    revocation_endpoint: str | None
    resource: str | None
    # None: the backend's (or target's) name, which the route knows.
    display_name: str | None


@dataclass(frozen=True, slots=True)
class CompiledIdentity:
    header: bytes  # lowercase
    claims: tuple[str, ...]
    signing_key: bytes | None = field(repr=False)


@dataclass(frozen=True, slots=True)
class CompiledSecretHeader:
    header: bytes  # lowercase
    value: bytes = field(repr=False)
    identity: CompiledIdentity | None = None


@dataclass(frozen=True, slots=True)
class CompiledCredentials:
    mode: Literal["TokenExchange", "Passthrough", "SecretHeader", "UserOAuth"]
    token_exchange: CompiledTokenExchange | None = None
    secret_header: CompiledSecretHeader | None = None
    user_oauth: CompiledUserOAuth | None = None


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
    # Each verified token is routed to exactly one of them by its `iss`.
    providers: tuple[CompiledProvider, ...]
    mcp: CompiledMcp | None
    authorization: CompiledAuthorization | None
    forward_token: bool
    transformation: CompiledTransformation | None = None
    rate_limit: CompiledRateLimit | None = None
    # Set when the policy is invalid: the routes it targets answer 503 with this text.
    invalid: str | None = None
    mcp_authorization: CompiledAuthorization | None = None
    scopes: CompiledScopes | None = None
    jwt_mode: JwtMode = "Strict"
    credentials: CompiledCredentials | None = None
    # `spec.backend.credentials.targets`: (target name, its credential), in the policy's order;
    # a target not listed gets `credentials`. Empty on a single-target route (resolved at load).
    target_credentials: tuple[tuple[str, CompiledCredentials], ...] = ()

    @property
    def has_credentials(self) -> bool:
        """The backend receives a credential of the gateway's (for every target, or some)."""
        return self.credentials is not None or bool(self.target_credentials)

    def every_credential(self) -> tuple[CompiledCredentials, ...]:
        """The default credential and each target's, in that order."""
        default = () if self.credentials is None else (self.credentials,)
        return default + tuple(c for _, c in self.target_credentials)

    @property
    def provider(self) -> CompiledProvider | None:
        """The first provider: the one Facade mode fronts (it has exactly one)."""
        return self.providers[0] if self.providers else None

    @property
    def workload_issuers(self) -> tuple[CompiledWorkloadIssuer, ...]:
        """The workload issuers Broker mode's `jwt-bearer` grant trusts (none without it)."""
        workload = self.mcp.workload if self.mcp is not None else None
        return workload.issuers if workload is not None else ()


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
    # Every target of the backend, `target` first; two or more are served federated.
    targets: tuple[CompiledTarget, ...] = ()
    # The hostname of the listener the route is served through ("" for one without): a request
    # reaches only the routes of the most specific listener its host matches.
    listener_hostname: str = ""

    @property
    def federated(self) -> bool:
        """The backend has several targets: the gateway serves them as one MCP server."""
        return len(self.targets) > 1


@dataclass(frozen=True, slots=True)
class PolicyReport:
    key: str
    source: str
    generation: int
    conditions: tuple[status.Condition, ...]
    keyset_urls: tuple[str, ...]
    discovery_urls: tuple[str, ...]
    # References to objects that do not exist (a Service or its port): ResolvedRefs=False.
    unresolved: tuple[str, ...] = ()
    # The Gateways (`namespace/name`) of the routes the policy is attached to (GEP-713).
    ancestors: tuple[str, ...] = ()
    # Whose keyset each of `keyset_urls` is (`providers[i] (issuer …)`), for status messages.
    keyset_owners: tuple[str, ...] = ()

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
    # Port → the hostnames of its listeners ("" for a listener without one); a port not listed
    # has one listener, without a hostname.
    listener_hosts: MappingProxyType[int, tuple[str, ...]] = field(
        default_factory=lambda: MappingProxyType({})
    )

    def hosts_of(self, port: int) -> tuple[str, ...]:
        """The hostnames of the listeners on `port` ("" for one without)."""
        return self.listener_hosts.get(port, ("",))

    @property
    def ok(self) -> bool:
        """No load/resolution errors and every policy Accepted and Attached."""
        return not self.errors and all(p.ok for p in self.policies)

    @classmethod
    def empty(cls) -> Snapshot:
        """Nothing to serve (controller mode before the first list from the API server)."""
        return cls(MappingProxyType({}), (), (), MappingProxyType({}), MappingProxyType({}))


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
