"""Typed models of the resources the gateway reads, mirroring the YAML field for field.

Unknown fields are rejected (like `kubectl apply --validate=strict`) so a typo in a policy is an
error that names the field instead of a setting that silently does nothing.
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from ..urls import navigable, origin_of, shown_url

POLICY_API_GROUP: Final = "mcp-oauth-gateway.dev"
POLICY_API_VERSION = f"{POLICY_API_GROUP}/v1alpha1"
GATEWAY_API_GROUP: Final = "gateway.networking.k8s.io"
GATEWAY_API_VERSION = f"{GATEWAY_API_GROUP}/v1"

# fullmatch and [0-9]: `$` also matches before a final newline and `\d` any Unicode digit,
# neither of which the API server's (RE2) validation of the same field admits.
_DURATION = re.compile(
    r"(?:([0-9]{1,5})h)?(?:([0-9]{1,5})m(?!s))?(?:([0-9]{1,5})s)?(?:([0-9]{1,5})ms)?"
)


def parse_duration(text: str) -> float:
    """Parse a Gateway API duration such as `5m`, `1h30m`, `500ms` into seconds."""
    match = _DURATION.fullmatch(text)
    if not text or match is None or not any(match.groups()):
        raise ValueError(f"{text!r} is not a duration; write it like 30s, 5m, 1h30m or 500ms")
    hours, minutes, seconds, millis = (int(g) if g else 0 for g in match.groups())
    return hours * 3600 + minutes * 60 + seconds + millis / 1000


# What the CRD schema can say of an http(s) URL, so the API server refuses what the gateway
# would (a refused policy fails its routes closed, but it should not be stored at all):
# `http(s)://`, a host without user information, no fragment, no ASCII space or backslash
# (explicit classes: `\s` is Unicode in Python, ASCII in the API server's RE2). The
# WHATWG parser then reads the rest (a host it refuses is the controller's to report).
HTTP_URL = re.compile(
    r"[Hh][Tt][Tt][Pp][Ss]?://[^\t\n\v\f\r /?#@\\]+(?:[/?][^\t\n\v\f\r #\\]*)?"
)
# And of a Redis URL: its scheme, as urllib reads it.
REDIS_URL = re.compile(r"(?:[Rr][Ee][Dd][Ii][Ss][Ss]?|[Uu][Nn][Ii][Xx]):[^\t\n\v\f\r ]*")


def _absolute_http_url(value: str) -> str:
    # Read as browsers and MCP clients read it (WHATWG), not as urllib does, and written as the
    # CRD schema says (HTTP_URL).
    if navigable(value) is None or not HTTP_URL.fullmatch(value):
        raise ValueError(f"{shown_url(value)!r} is not an absolute http(s) URL")
    return value


def _cors_origin(value: str) -> str:
    if value == "*":
        return value
    if "*" in value:
        raise ValueError(
            f"{shown_url(value)!r}: wildcard origins are not supported; list each origin, "
            "or use '*' alone"
        )
    origin = origin_of(value)
    if origin is None or value.rstrip("/") != origin:
        hint = f"; browsers send it as {origin!r}" if origin else ""
        raise ValueError(
            f"{shown_url(value)!r} is not an origin (scheme://host[:port], as browsers send "
            f"it in the Origin header; wildcards other than '*' are not "
            f"supported){hint}"
        )
    return value


def _starts_with_slash(value: str) -> str:
    if not value.startswith("/"):
        raise ValueError(f"path {value!r} must start with '/'")
    return value


AbsolutePath = Annotated[str, AfterValidator(_starts_with_slash)]


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, populate_by_name=True, alias_generator=to_camel
    )


NonEmpty = Annotated[str, Field(min_length=1)]
Port = Annotated[int, Field(ge=1, le=65535)]
Duration = Annotated[str, Field(min_length=1)]


class ObjectMeta(_Model):
    name: NonEmpty
    namespace: NonEmpty = "default"
    generation: int = 1
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    # Set by the API server (RFC 3339, UTC): the older of two routes with the same match wins.
    creation_timestamp: str | None = None

    @property
    def key(self) -> str:
        """`namespace/name`, the identity used in references and messages."""
        return f"{self.namespace}/{self.name}"


# --- Gateway (gateway.networking.k8s.io/v1) -------------------------------------------------


class RouteNamespaces(_Model):
    # Selector would need the cluster's Namespace objects, which the gateway does not read.
    from_: Literal["Same", "All"] = Field("Same", alias="from")


class RouteGroupKind(_Model):
    group: str = GATEWAY_API_GROUP
    kind: NonEmpty


class AllowedRoutes(_Model):
    """Which routes a listener takes (Gateway API; the API server fills in the defaults)."""

    namespaces: RouteNamespaces = RouteNamespaces()
    kinds: list[RouteGroupKind] = []


class Listener(_Model):
    name: NonEmpty
    port: Port
    protocol: Literal["HTTP"] = "HTTP"
    hostname: str | None = None
    allowed_routes: AllowedRoutes = AllowedRoutes()

    def takes(self, route_namespace: str, gateway_namespace: str) -> str | None:
        """Why this listener does not take an HTTPRoute from `route_namespace`, or None."""
        kinds = self.allowed_routes.kinds
        if kinds and not any(k.kind == "HTTPRoute" and k.group == GATEWAY_API_GROUP for k in kinds):
            return f"listener {self.name!r} takes no HTTPRoute (allowedRoutes.kinds)"
        if self.allowed_routes.namespaces.from_ == "Same" and route_namespace != gateway_namespace:
            return (
                f"listener {self.name!r} takes routes from namespace {gateway_namespace} only "
                "(allowedRoutes.namespaces.from: Same; set All to take this one)"
            )
        return None


class GatewaySpec(_Model):
    gateway_class_name: str | None = None
    listeners: Annotated[list[Listener], Field(min_length=1)]

    @model_validator(mode="after")
    def _unique_listener_names(self) -> GatewaySpec:
        names = [listener.name for listener in self.listeners]
        if len(names) != len(set(names)):
            raise ValueError("listener names must be unique")
        return self


class Gateway(_Model):
    api_version: Literal["gateway.networking.k8s.io/v1"]
    kind: Literal["Gateway"]
    metadata: ObjectMeta
    spec: GatewaySpec


# --- HTTPRoute (gateway.networking.k8s.io/v1) ----------------------------------------------


class ParentRef(_Model):
    group: Literal["gateway.networking.k8s.io"] = GATEWAY_API_GROUP
    kind: Literal["Gateway"] = "Gateway"
    name: NonEmpty
    namespace: str | None = None
    section_name: str | None = None
    port: Port | None = None


class PathMatch(_Model):
    type: Literal["PathPrefix", "Exact"] = "PathPrefix"
    value: AbsolutePath = "/"


class RouteMatch(_Model):
    path: PathMatch = PathMatch()


class CorsPolicy(_Model):
    allow_credentials: bool = False
    allow_headers: list[NonEmpty] = []
    allow_methods: list[NonEmpty] = []
    allow_origins: list[Annotated[str, Field(min_length=1), AfterValidator(_cors_origin)]] = []
    expose_headers: list[NonEmpty] = []
    max_age: Annotated[int, Field(ge=0)] = 5


class RouteFilter(_Model):
    type: Literal["CORS"]
    cors: CorsPolicy

    @model_validator(mode="before")
    @classmethod
    def _cors_needs_settings(cls, data: object) -> object:
        if isinstance(data, dict) and data.get("type") == "CORS" and "cors" not in data:
            raise ValueError("a filter of type CORS needs a `cors` object")
        return data


class RouteBackendRef(_Model):
    group: Literal["mcp-oauth-gateway.dev"] = POLICY_API_GROUP
    kind: Literal["GatewayBackend"] = "GatewayBackend"
    name: NonEmpty
    namespace: str | None = None
    weight: int | None = None

    @model_validator(mode="before")
    @classmethod
    def _not_a_service(cls, data: object) -> object:
        # Gateway API defaults a backendRef without group and kind to a core Service, and an
        # API server stores it that way: say what to write instead of "group should be ...".
        if (
            isinstance(data, dict)
            and data.get("kind", "Service") == "Service"
            and not data.get("group")
            and ("kind" in data or "group" in data)
        ):
            raise ValueError(
                "routes send MCP traffic to a GatewayBackend, not to a Service: set group: "
                "mcp-oauth-gateway.dev and kind: GatewayBackend (an API server fills in a "
                "backendRef without them as a Service)"
            )
        return data


class RouteTimeouts(_Model):
    # `backendRequest` bounds the wait for the backend's response headers; a streamed body may
    # then run as long as it needs (MCP SSE streams are long-lived by design).
    request: Duration | None = None
    backend_request: Duration | None = None

    @field_validator("request", "backend_request")
    @classmethod
    def _duration(cls, value: str | None) -> str | None:
        if value is not None:
            parse_duration(value)
        return value


class RouteRule(_Model):
    name: str | None = None
    matches: list[RouteMatch] = [RouteMatch()]
    filters: list[RouteFilter] = []
    backend_refs: Annotated[list[RouteBackendRef], Field(min_length=1)]
    timeouts: RouteTimeouts | None = None

    @field_validator("filters")
    @classmethod
    def _one_cors_filter(cls, filters: list[RouteFilter]) -> list[RouteFilter]:
        if sum(1 for f in filters if f.type == "CORS") > 1:
            raise ValueError("at most one CORS filter per rule")
        return filters


class HTTPRouteSpec(_Model):
    parent_refs: Annotated[list[ParentRef], Field(min_length=1)]
    hostnames: list[NonEmpty] = []
    rules: Annotated[list[RouteRule], Field(min_length=1)]


class HTTPRoute(_Model):
    api_version: Literal["gateway.networking.k8s.io/v1"]
    kind: Literal["HTTPRoute"]
    metadata: ObjectMeta
    spec: HTTPRouteSpec


# --- GatewayBackend (mcp-oauth-gateway.dev/v1alpha1) ---------------------------------------


class StaticTarget(_Model):
    host: NonEmpty
    port: Port
    path: AbsolutePath = "/mcp"
    protocol: Literal["StreamableHTTP"] = "StreamableHTTP"


class McpTarget(_Model):
    name: NonEmpty
    static: StaticTarget


class McpBackend(_Model):
    # One target is what the data plane serves today; the list keeps the resource shape stable.
    targets: Annotated[list[McpTarget], Field(min_length=1, max_length=1)]


class GatewayBackendSpec(_Model):
    mcp: McpBackend


class GatewayBackend(_Model):
    api_version: Literal["mcp-oauth-gateway.dev/v1alpha1"]
    kind: Literal["GatewayBackend"]
    metadata: ObjectMeta
    spec: GatewayBackendSpec


# --- GatewayPolicy (mcp-oauth-gateway.dev/v1alpha1) ----------------------------------------


class PolicyTargetRef(_Model):
    group: Literal["gateway.networking.k8s.io"] = GATEWAY_API_GROUP
    kind: Literal["HTTPRoute"] = "HTTPRoute"
    name: NonEmpty
    section_name: str | None = None


class ServiceBackendRef(_Model):
    group: Literal[""] = ""
    kind: Literal["Service"] = "Service"
    name: NonEmpty
    namespace: str | None = None
    port: Port


class RemoteJwks(_Model):
    backend_ref: ServiceBackendRef | None = None
    jwks_path: Annotated[AbsolutePath, Field(max_length=1024)] | None = None
    url: str | None = None
    cache_duration: Duration = "5m"

    @field_validator("cache_duration")
    @classmethod
    def _duration(cls, value: str) -> str:
        if parse_duration(value) < 1:
            raise ValueError("cacheDuration must be at least 1s")
        return value

    @field_validator("url")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else _absolute_http_url(value)

    @model_validator(mode="after")
    def _one_source(self) -> RemoteJwks:
        if (self.backend_ref is None) == (self.url is None):
            raise ValueError("set exactly one of backendRef or url")
        if self.backend_ref is not None and self.jwks_path is None:
            raise ValueError(
                "jwksPath is required with backendRef (the path of the JWKS document on that "
                "service, e.g. /application/o/<slug>/jwks/ for authentik)"
            )
        if self.url is not None and self.jwks_path is not None:
            raise ValueError("jwksPath cannot be combined with url; put the path in the url")
        return self


class Jwks(_Model):
    remote: RemoteJwks | None = None
    inline: Annotated[str, Field(min_length=2, max_length=65536)] | None = None

    @model_validator(mode="after")
    def _one_source(self) -> Jwks:
        if (self.remote is None) == (self.inline is None):
            raise ValueError("set exactly one of remote or inline")
        return self


PROVIDER_ALIASES = {"ProviderB": "ProviderB", "Authentik": "ProviderB", "Keycloak": "Keycloak"}


DOMAIN = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+")


def _domain(value: str) -> str:
    if not DOMAIN.fullmatch(value):
        raise ValueError(f"{value!r} is not a lowercase DNS domain such as corp.example")
    return value


class JwtProvider(_Model):
    issuer: Annotated[str, Field(min_length=1, max_length=256)]
    audiences: Annotated[list[NonEmpty], Field(min_length=1, max_length=64)] | None = None
    jwks: Jwks
    # With several providers on a route, what tells them apart beyond the issuer:
    # the name users choose on the Broker's consent page (default: the issuer's host),
    name: Annotated[str, Field(min_length=1, max_length=100)] | None = None
    # its kind (how its access tokens are recognised; default: mcp.provider),
    kind: str | None = None
    # the client the Broker signs users in as there (default: mcp.clientId),
    client_id: NonEmpty | None = None
    # and the e-mail domains whose `login_hint` picks it without asking.
    login_hint_domains: Annotated[
        list[Annotated[str, Field(max_length=253), AfterValidator(_domain)]],
        Field(max_length=64),
    ] = []

    @field_validator("issuer")
    @classmethod
    def _issuer_url(cls, value: str) -> str:
        # OpenID Connect Discovery §3: an http(s) URL without query or fragment. User-info is
        # refused too: it would become Basic credentials on the discovery fetch and be published
        # as it is in the protected resource metadata.
        parts = urlsplit(value)
        if parts.username is not None or parts.password is not None or "@" in parts.netloc:
            raise ValueError(f"{shown_url(value)!r}: an issuer holds no user information")
        if parts.query or parts.fragment or "?" in value or "#" in value:
            raise ValueError(f"{shown_url(value)!r}: an issuer has no query or fragment")
        return _absolute_http_url(value)

    @field_validator("kind")
    @classmethod
    def _known_kind(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if value not in PROVIDER_ALIASES:
            allowed = ", ".join(PROVIDER_ALIASES)
            raise ValueError(f"unknown provider kind {value!r}; allowed values: {allowed}")
        return PROVIDER_ALIASES[value]


# RFC 6749 §3.3 scope-token: printable ASCII without space, `"` or a backslash, so a scope can be
# written into a quoted WWW-Authenticate parameter as it is.
_SCOPE_TOKEN = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]{1,256}")
REFRESH_SCOPE = "offline_access"


def _scope_token(value: str) -> str:
    if not _SCOPE_TOKEN.fullmatch(value):
        raise ValueError(
            f"{value!r} is not an OAuth scope (printable ASCII without spaces, quotes or "
            "backslashes, RFC 6749 §3.3)"
        )
    return value


ScopeToken = Annotated[str, AfterValidator(_scope_token)]


def _not_refresh_scope(values: list[str], where: str) -> list[str]:
    """it asks for a refresh token, not for access to this resource; MCP 2026-07-28 clients add
    it themselves when the authorization server offers refresh tokens"""
    if REFRESH_SCOPE in values:
        reason = " ".join((_not_refresh_scope.__doc__ or "").split())
        raise ValueError(f"{REFRESH_SCOPE} does not belong in {where}: {reason}")
    return values


class ResourceMetadata(_Model):
    resource: str | None = None
    scopes_supported: Annotated[list[ScopeToken], Field(max_length=64)] = []
    bearer_methods_supported: list[Literal["header"]] = ["header"]
    resource_name: str | None = None
    resource_documentation: str | None = None
    resource_policy_uri: str | None = None
    resource_tos_uri: str | None = None

    @field_validator("scopes_supported")
    @classmethod
    def _minimal(cls, values: list[str]) -> list[str]:
        return _not_refresh_scope(values, "scopesSupported")

    @field_validator("resource")
    @classmethod
    def _resource(cls, value: str | None) -> str | None:
        if value is None:
            return None
        _absolute_http_url(value)
        if urlsplit(value).fragment:
            raise ValueError("resource must not have a fragment")
        return value


def _redis_url(value: str) -> str:
    if not REDIS_URL.fullmatch(value) or urlsplit(value).scheme not in ("redis", "rediss", "unix"):
        raise ValueError(f"{shown_url(value)!r} is not a redis:// or rediss:// URL")
    return value


RedisUrl = Annotated[str, AfterValidator(_redis_url)]


class BrokerSettings(_Model):
    # Shared state for several replicas; MCP_OAUTH_GATEWAY_REDIS_URL also sets it.
    redis_url: RedisUrl | None = None


class McpAuthentication(_Model):
    provider: str | None = None
    client_id: NonEmpty | None = None
    resource_metadata: ResourceMetadata = ResourceMetadata()
    # Facade (the spec): metadata copied from the provider. Broker: the gateway is the
    # authorization server clients see, for clients that check issuer and RFC 9207 `iss`.
    authorization_server_mode: Literal["Facade", "Broker"] = "Facade"
    broker: BrokerSettings | None = None

    @field_validator("provider")
    @classmethod
    def _known_provider(cls, value: str | None) -> str | None:
        if value is None:
            return None
        if value not in PROVIDER_ALIASES:
            allowed = ", ".join(PROVIDER_ALIASES)
            raise ValueError(f"unknown provider {value!r}; allowed values: {allowed}")
        return PROVIDER_ALIASES[value]


class JwtAuthentication(_Model):
    # Strict: a valid token or 401. Optional: no token passes as an anonymous caller, a bad one
    # is 401. Permissive: a bad token also passes as anonymous, and why is logged and counted.
    mode: Literal["Strict", "Optional", "Permissive"] = "Strict"
    providers: Annotated[list[JwtProvider], Field(min_length=1, max_length=64)]
    mcp: McpAuthentication | None = None
    # Not in the reference API: the bearer token is stripped before proxying (MCP forbids token
    # passthrough); set this only for a backend that validates the same token itself.
    forward_token: bool = False


class AuthorizationRules(_Model):
    match_expressions: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=16384)]],
        Field(min_length=1, max_length=256),
    ]


class Authorization(_Model):
    action: Literal["Allow", "Deny", "Require"] = "Allow"
    policy: AuthorizationRules


ScopeList = Annotated[list[ScopeToken], Field(max_length=64)]


class Scopes(_Model):
    """The scopes every request on the route needs, and which granted scopes imply others."""

    required: ScopeList = []
    # A granted scope (key) also grants the listed ones, transitively: how a provider's scope
    # hierarchy (`mcp:admin` ⊇ `mcp:tools`) is told to the gateway.
    implies: Annotated[dict[ScopeToken, ScopeList], Field(max_length=256)] = {}

    @field_validator("required")
    @classmethod
    def _required(cls, values: list[str]) -> list[str]:
        return _not_refresh_scope(values, "scopes.required")


class McpScopeRule(_Model):
    """Scopes a tool, prompt or resource needs: a CEL `match` over `mcp` (and `jwt`, `request`)."""

    match: Annotated[str, Field(min_length=1, max_length=16384)]
    required: Annotated[list[ScopeToken], Field(min_length=1, max_length=64)]

    @field_validator("required")
    @classmethod
    def _required(cls, values: list[str]) -> list[str]:
        return _not_refresh_scope(values, "required")


# RFC 9110 token; matched whole (a trailing newline would otherwise pass and end a header line).
_HEADER_NAME = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_PROTECTED = frozenset(
    {"host", "content-length", "transfer-encoding", "connection", "authorization"}
)


def _header_name(value: str) -> str:
    if not _HEADER_NAME.fullmatch(value):
        raise ValueError(f"{value!r} is not a valid HTTP header name")
    if value.lower() in _PROTECTED:
        raise ValueError(f"the gateway manages {value!r} itself; it cannot be set or removed")
    return value


HeaderName = Annotated[str, AfterValidator(_header_name)]


class HeaderValue(_Model):
    name: HeaderName
    # A CEL expression over `jwt` and `request`, e.g. `jwt.sub` or `jwt.groups.join(",")`.
    value: Annotated[str, Field(min_length=1, max_length=4096)]


class RequestTransformation(_Model):
    set: list[HeaderValue] = []
    remove: list[HeaderName] = []


class Transformation(_Model):
    request: RequestTransformation = RequestTransformation()


class RateLimit(_Model):
    # A CEL expression naming the caller, e.g. `jwt.sub`, bucketed with the token's issuer (a
    # value is unique only within it); callers without it share one bucket.
    key: Annotated[str, Field(min_length=1, max_length=4096)]
    requests: Annotated[int, Field(ge=1)]
    window: Duration = "1m"
    # Shared across replicas through Redis (token bucket, atomic); in process when unset.
    redis_url: RedisUrl | None = None

    @field_validator("window")
    @classmethod
    def _window(cls, value: str) -> str:
        if parse_duration(value) <= 0:
            raise ValueError("window must be longer than 0")
        return value


class Traffic(_Model):
    jwt_authentication: JwtAuthentication | None = None
    authorization: Authorization | None = None
    transformation: Transformation | None = None
    rate_limit: RateLimit | None = None
    scopes: Scopes | None = None


class McpPolicy(_Model):
    # Evaluated per MCP item with `mcp.tool.name`, `mcp.prompt.name`, `mcp.resource.uri`.
    authorization: Authorization | None = None
    # Calls of matching items need these scopes (403 insufficient_scope: clients step up).
    scopes: Annotated[list[McpScopeRule], Field(max_length=256)] = []


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SecretSource(_Model):
    """Where a secret comes from: never the resource itself, so it stays out of git and out of
    `kubectl get -o yaml`. Exactly one of a file (its content, one trailing newline dropped) or
    an environment variable of the gateway process. In Kubernetes both come from a Secret
    mounted into the gateway's pod, so the controller itself needs no access to Secrets."""

    file: AbsolutePath | None = None
    env: str | None = None

    @field_validator("env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not _ENV_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> SecretSource:
        if (self.file is None) == (self.env is None):
            raise ValueError("set exactly one of file or env")
        return self


class TokenExchange(_Model):
    """RFC 8693 at the provider that issued the caller's token: the backend gets a token of its
    own audience naming the same user, never the caller's."""

    client_id: NonEmpty
    client_secret: SecretSource
    audience: NonEmpty | None = None
    resource: str | None = None
    scope: Annotated[str, Field(min_length=1, max_length=1024)] | None = None

    @field_validator("resource")
    @classmethod
    def _resource(cls, value: str | None) -> str | None:
        return None if value is None else _absolute_http_url(value)

    @model_validator(mode="after")
    def _target(self) -> TokenExchange:
        if self.audience is None and self.resource is None:
            raise ValueError(
                "set audience (the backend's client id at the provider) or resource (its URL): "
                "the exchanged token must be for the backend"
            )
        return self


class IdentityHeader(_Model):
    """The caller's identity for a backend that trusts the gateway: the named claims as a JSON
    object, or, with `signingKey`, as a short-lived HS256 JWS the backend can verify."""

    header: HeaderName
    # `sub` is unique only within its issuer (OpenID Connect Core §2), so the pair by default.
    claims: Annotated[list[NonEmpty], Field(min_length=1, max_length=32)] = ["iss", "sub"]
    signing_key: SecretSource | None = None


class SecretHeader(_Model):
    """A static header (an API key) the backend requires, and optionally who the caller is."""

    header: HeaderName
    value: SecretSource
    identity: IdentityHeader | None = None


class BackendCredentials(_Model):
    """What the backend receives in place of the caller's token (which it never gets unless
    `passthrough` says so): exactly one mode."""

    token_exchange: TokenExchange | None = None
    # The verified token itself: only for a backend that is the same audience.
    passthrough: bool = False
    secret_header: SecretHeader | None = None

    @model_validator(mode="after")
    def _one_mode(self) -> BackendCredentials:
        chosen = [self.token_exchange is not None, self.passthrough, self.secret_header is not None]
        if sum(chosen) != 1:
            raise ValueError("set exactly one of tokenExchange, passthrough or secretHeader")
        return self


class BackendPolicy(_Model):
    mcp: McpPolicy | None = None
    credentials: BackendCredentials | None = None


class GatewayPolicySpec(_Model):
    target_refs: Annotated[list[PolicyTargetRef], Field(min_length=1, max_length=16)]
    traffic: Traffic
    backend: BackendPolicy | None = None


class GatewayPolicy(_Model):
    api_version: Literal["mcp-oauth-gateway.dev/v1alpha1"]
    kind: Literal["GatewayPolicy"]
    metadata: ObjectMeta
    spec: GatewayPolicySpec


# --- Service (v1) --------------------------------------------------------------------------


class ServicePort(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True, populate_by_name=True)
    port: Port
    name: str | None = None


class ServiceSpec(BaseModel):
    # Core Services carry many fields the gateway has no use for (selector, clusterIP, ...);
    # they are accepted and ignored so real manifests load unchanged.
    model_config = ConfigDict(
        extra="allow", frozen=True, populate_by_name=True, alias_generator=to_camel
    )
    type: Literal["ExternalName", "ClusterIP", "NodePort", "LoadBalancer"] = "ClusterIP"
    external_name: str | None = None
    ports: list[ServicePort] = []

    @model_validator(mode="after")
    def _external_name(self) -> ServiceSpec:
        if self.type == "ExternalName" and not self.external_name:
            raise ValueError("externalName is required when type is ExternalName")
        return self


class Service(_Model):
    api_version: Literal["v1"]
    kind: Literal["Service"]
    metadata: ObjectMeta
    spec: ServiceSpec


# --- GatewayClass and ReferenceGrant (Kubernetes mode) --------------------------------------


class ParametersReference(_Model):
    group: str
    kind: NonEmpty
    name: NonEmpty
    namespace: str | None = None


class GatewayClassSpec(_Model):
    controller_name: NonEmpty
    description: str | None = None
    # Accepted so that classes of other controllers load; this gateway takes no parameters.
    parameters_ref: ParametersReference | None = None


class ClusterMeta(_Model):
    """Metadata of a cluster-scoped object (no namespace)."""

    name: NonEmpty
    generation: int = 1
    labels: dict[str, str] = {}
    annotations: dict[str, str] = {}
    creation_timestamp: str | None = None  # set by the API server

    @property
    def namespace(self) -> str:
        """Cluster-scoped objects have none; "" keeps keys uniform."""
        return ""

    @property
    def key(self) -> str:
        """The name: cluster-scoped objects are unique by name alone."""
        return self.name


class GatewayClass(_Model):
    api_version: Literal["gateway.networking.k8s.io/v1"]
    kind: Literal["GatewayClass"]
    metadata: ClusterMeta
    spec: GatewayClassSpec


class GrantFrom(_Model):
    group: str
    kind: NonEmpty
    namespace: NonEmpty


class GrantTo(_Model):
    group: str
    kind: NonEmpty
    name: str | None = None


class ReferenceGrantSpec(_Model):
    from_: Annotated[list[GrantFrom], Field(min_length=1, alias="from")]
    to: Annotated[list[GrantTo], Field(min_length=1)]


class ReferenceGrant(_Model):
    api_version: Literal["gateway.networking.k8s.io/v1beta1", "gateway.networking.k8s.io/v1"]
    kind: Literal["ReferenceGrant"]
    metadata: ObjectMeta
    spec: ReferenceGrantSpec

    def permits(
        self, group: str, kind: str, namespace: str, to_group: str, to_kind: str, to_name: str
    ) -> bool:
        """Whether this grant lets `kind` objects in `namespace` refer to the named object
        (in the grant's own namespace)."""
        return any(
            f.group == group and f.kind == kind and f.namespace == namespace
            for f in self.spec.from_
        ) and any(
            t.group == to_group and t.kind == to_kind and t.name in (None, to_name)
            for t in self.spec.to
        )


Resource = (
    Gateway | HTTPRoute | GatewayBackend | GatewayPolicy | Service | GatewayClass | ReferenceGrant
)

KINDS: dict[tuple[str, str], type[Resource]] = {
    (GATEWAY_API_VERSION, "Gateway"): Gateway,
    (GATEWAY_API_VERSION, "HTTPRoute"): HTTPRoute,
    (POLICY_API_VERSION, "GatewayBackend"): GatewayBackend,
    (POLICY_API_VERSION, "GatewayPolicy"): GatewayPolicy,
    ("v1", "Service"): Service,
    (GATEWAY_API_VERSION, "GatewayClass"): GatewayClass,
    ("gateway.networking.k8s.io/v1beta1", "ReferenceGrant"): ReferenceGrant,
    (GATEWAY_API_VERSION, "ReferenceGrant"): ReferenceGrant,
}
