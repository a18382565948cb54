"""Typed models of the resources the gateway reads, mirroring the YAML field for field.

Unknown fields are rejected (like `kubectl apply --validate=strict`) so a typo in a policy is an
error that names the field instead of a setting that silently does nothing.

The docstring under a field of GatewayPolicy and GatewayBackend is its description in the CRDs
(tools/gen_crds.py), which `kubectl explain` shows: what the field means, its default, its form
and what it is for. A model's own docstring describes the items of a list of it.
"""

from __future__ import annotations

import re
from typing import Annotated, Final, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from ..provider_kinds import ALIASES, ProviderKind, parse_kind
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
HTTP_URL = re.compile(r"[Hh][Tt][Tt][Pp][Ss]?://[^\t\n\v\f\r /?#@\\]+(?:[/?][^\t\n\v\f\r #\\]*)?")
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
    """Host name or IP address of the MCP server, e.g. the Service name
    `mcp-server.mcp.svc.cluster.local`. The gateway connects to it over plain HTTP."""
    port: Port
    """TCP port of the MCP server, 1-65535."""
    path: AbsolutePath = "/mcp"
    """Path of the server's MCP endpoint, starting with `/`; default `/mcp`. Every request the
    route forwards is sent to this path, with its query string (the request's own path is not
    appended)."""
    protocol: Literal["StreamableHTTP"] = "StreamableHTTP"
    """MCP transport: `StreamableHTTP` only, the default (JSON and SSE responses are streamed
    through unbuffered)."""


class McpTarget(_Model):
    """One MCP server and how the gateway reaches it."""

    name: NonEmpty
    """A name for the target, for people reading the resource; the gateway does not use it."""
    static: StaticTarget
    """A fixed address: `http://<host>:<port><path>`."""


class McpBackend(_Model):
    targets: Annotated[list[McpTarget], Field(min_length=1, max_length=1)]
    """The MCP server: exactly one entry. One target is what the gateway serves today; the list
    keeps the resource's shape stable for more."""


class GatewayBackendSpec(_Model):
    mcp: McpBackend
    """The MCP server behind this backend."""


class GatewayBackend(_Model):
    api_version: Literal["mcp-oauth-gateway.dev/v1alpha1"]
    kind: Literal["GatewayBackend"]
    metadata: ObjectMeta
    spec: GatewayBackendSpec
    """Where the gateway sends the MCP requests of the HTTPRoute rules whose `backendRefs` name
    this backend (group `mcp-oauth-gateway.dev`, kind `GatewayBackend`; from another namespace
    only with a ReferenceGrant here)."""


# --- GatewayPolicy (mcp-oauth-gateway.dev/v1alpha1) ----------------------------------------


class PolicyTargetRef(_Model):
    """An HTTPRoute in the policy's namespace."""

    group: Literal["gateway.networking.k8s.io"] = GATEWAY_API_GROUP
    """`gateway.networking.k8s.io`, the only value and the default."""
    kind: Literal["HTTPRoute"] = "HTTPRoute"
    """`HTTPRoute`, the only value and the default: a policy governs whole routes."""
    name: NonEmpty
    """Name of the HTTPRoute."""
    section_name: str | None = None
    """Accepted for Gateway API compatibility and ignored: the policy governs every rule of the
    route."""


class ServiceBackendRef(_Model):
    group: Literal[""] = ""
    """`""` (the core API group), the only value and the default."""
    kind: Literal["Service"] = "Service"
    """`Service`, the only value and the default."""
    name: NonEmpty
    """Name of the Service."""
    namespace: str | None = None
    """Namespace of the Service; default: the policy's. Another namespace needs a ReferenceGrant
    there that lets GatewayPolicies of the policy's namespace refer to Services."""
    port: Port
    """Port of the Service, 1-65535."""


class RemoteJwks(_Model):
    backend_ref: ServiceBackendRef | None = None
    """The Service the keys, and the provider's OpenID discovery document, are fetched from: in
    a cluster `http://<name>.<namespace>.svc.<cluster domain>:<port>`, from files the Service's
    `externalName`. Needs `jwksPath`; set this or `url`."""
    jwks_path: Annotated[AbsolutePath, Field(max_length=1024)] | None = None
    """Path of the JWKS document on the `backendRef` Service, starting with `/`: authentik
    `/application/o/<slug>/jwks/`, Keycloak `/realms/<realm>/protocol/openid-connect/certs`.
    Required with `backendRef`, refused with `url`."""
    url: str | None = None
    """The JWKS document's http(s) URL, without user information or fragment, instead of
    `backendRef`; the discovery document is then fetched from the issuer's host."""
    cache_duration: Duration = "5m"
    """How often the keys are fetched again, as a duration such as `30s`, `5m` or `1h30m`: at
    least `1s`, default `5m`. A token naming an unknown `kid` also fetches them (at most once
    per 10 s); when a fetch fails, the last good keys stay in use."""

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
    """Fetch the keys over HTTP, from a Service (`backendRef` and `jwksPath`) or a URL (`url`).
    Until the first fetch succeeds the route serves nobody (503 or 401) and `ResolvedRefs` is
    False."""
    inline: Annotated[str, Field(min_length=2, max_length=65536)] | None = None
    """The JWKS document itself, as JSON text (`{"keys": [...]}`); never refetched, so only for
    keys that do not rotate."""

    @model_validator(mode="after")
    def _one_source(self) -> Jwks:
        if (self.remote is None) == (self.inline is None):
            raise ValueError("set exactly one of remote or inline")
        return self


# Every spelling of a provider kind configuration accepts (the CRDs' enum).
PROVIDER_ALIASES = tuple(ALIASES)


def _provider_kind(value: object, noun: str) -> object:
    """A provider kind from any of its spellings (a non-string is left to the type check)."""
    if not isinstance(value, str):
        return value
    try:
        return parse_kind(value)
    except ValueError as exc:
        raise ValueError(f"unknown {noun} {exc}") from None


DOMAIN = re.compile(r"[a-z0-9]([a-z0-9-]*[a-z0-9])?(\.[a-z0-9]([a-z0-9-]*[a-z0-9])?)+")


def _domain(value: str) -> str:
    if not DOMAIN.fullmatch(value):
        raise ValueError(f"{value!r} is not a lowercase DNS domain such as corp.example")
    return value


class JwtProvider(_Model):
    """An OpenID Connect provider whose access tokens the route accepts."""

    issuer: Annotated[str, Field(min_length=1, max_length=256)]
    """The provider's issuer URL, exactly as its tokens' `iss` says it (a trailing slash
    counts: authentik's is `<url>/application/o/<slug>/`): http(s), without user information,
    query or fragment. OpenID discovery is read at its path plus
    `/.well-known/openid-configuration`, through `jwks.remote.backendRef` when set."""
    audiences: Annotated[list[NonEmpty], Field(min_length=1, max_length=64)] | None = None
    """The `aud` values accepted: a token must name at least one. Keycloak: the MCP resource
    URL (an audience mapper puts it there); authentik (ProviderB): the client id. Unset: the
    audience is not checked."""
    jwks: Jwks
    """Where the provider's public signing keys come from: exactly one of `remote` or
    `inline`."""
    name: Annotated[str, Field(min_length=1, max_length=100)] | None = None
    """With several providers, what users pick on the Broker's consent page; default: the
    issuer's host."""
    kind: ProviderKind | None = None
    """The provider's product, which decides how its access tokens are told from its ID tokens
    (docs/access-tokens.md): `Keycloak`, or `ProviderB` (`Authentik` is the same). Default:
    `mcp.provider`; neither set: a generic OpenID provider."""
    client_id: NonEmpty | None = None
    """Broker mode: the client the gateway signs users in as at this provider; default:
    `mcp.clientId`."""
    login_hint_domains: Annotated[
        list[Annotated[str, Field(max_length=253), AfterValidator(_domain)]],
        Field(max_length=64),
    ] = []
    """Broker mode: lowercase e-mail domains, such as `corp.example`, whose `login_hint`
    (`alice@corp.example`) picks this provider without asking. A domain belongs to one provider
    at most."""

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

    @field_validator("kind", mode="before")
    @classmethod
    def _known_kind(cls, value: object) -> object:
        return _provider_kind(value, "provider kind")


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
    """The exact URL MCP clients connect to, e.g. `https://mcp.example/mcp`: http(s), no
    fragment. Clients ask for tokens for it (RFC 8707), and its path places the well-known
    endpoints. Default: the request's origin and `/mcp`."""
    scopes_supported: Annotated[list[ScopeToken], Field(max_length=64)] = []
    """Scopes advertised in the metadata and the 401 challenge, with `scopes.required` added:
    the minimal set that gets a client in, e.g. `[openid, profile]`. Not `offline_access`
    (clients add it themselves)."""
    bearer_methods_supported: list[Literal["header"]] = ["header"]
    """How clients send the token: `header` (`Authorization: Bearer`) only, the default."""
    resource_name: str | None = None
    """Human-readable name of the MCP server, published as `resource_name`."""
    resource_documentation: str | None = None
    """URL of documentation for developers, published as `resource_documentation`."""
    resource_policy_uri: str | None = None
    """URL of the policy on how client data is used, published as `resource_policy_uri`."""
    resource_tos_uri: str | None = None
    """URL of the terms of service, published as `resource_tos_uri`."""

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
    redis_url: RedisUrl | None = None
    """Redis holding sign-ins in progress, codes and refresh tokens for every replica:
    `redis://`, `rediss://` (TLS) or `unix:`. Required when several processes serve, unless the
    gateway's MCP_OAUTH_GATEWAY_REDIS_URL sets it; unset, state stays in memory."""


class McpAuthentication(_Model):
    provider: ProviderKind | None = None
    """The identity provider MCP clients sign in at, which the gateway adapts to: `Keycloak`
    (registration goes to Keycloak's own endpoint) or `ProviderB` (`Authentik` is the same: no
    dynamic registration, so the gateway answers registrations with `clientId`). Unset: the
    metadata lists every provider's issuer, and clients sign in there directly."""
    client_id: NonEmpty | None = None
    """The pre-registered public client (PKCE, no secret). ProviderB: what the registration
    endpoint returns to MCP clients (required, and one of the audiences). Broker mode: the
    client the gateway signs users in as."""
    resource_metadata: ResourceMetadata = ResourceMetadata()
    """The protected resource metadata (RFC 9728) served at
    `/.well-known/oauth-protected-resource<resource path>`: what MCP clients read first to find
    where to sign in."""
    authorization_server_mode: Literal["Facade", "Broker"] = "Facade"
    """`Facade` (default): clients get the provider's own authorization server metadata, with
    the gateway's registration endpoint, and sign in at the provider. `Broker`: the gateway is
    the authorization server clients see and signs users in at the provider itself; needed by
    clients that check the metadata's `issuer` and the RFC 9207 `iss`."""
    broker: BrokerSettings | None = None
    """Broker mode settings; refused in Facade mode."""

    @field_validator("provider", mode="before")
    @classmethod
    def _known_provider(cls, value: object) -> object:
        return _provider_kind(value, "provider")


class JwtAuthentication(_Model):
    mode: Literal["Strict", "Optional", "Permissive"] = "Strict"
    """`Strict` (default): a valid token or 401. `Optional`: a request without a token goes on
    as an anonymous caller (`jwt` is an empty map), a bad token is 401. `Permissive`: a bad
    token also goes on as anonymous, and why is logged and counted."""
    providers: Annotated[list[JwtProvider], Field(min_length=1, max_length=64)]
    """The identity providers whose tokens are accepted. A token goes by its `iss` to the one
    provider with that issuer (none: 401) and is checked against its keys and audiences."""
    mcp: McpAuthentication | None = None
    """MCP OAuth discovery: the gateway serves the metadata and registration endpoints MCP
    clients use to sign in, and 401 challenges point at them. Unset: tokens are only
    verified."""
    forward_token: bool = False
    """Pass the caller's token on to the backend. Default false: it is removed before proxying,
    as MCP forbids token passthrough. Prefer `spec.backend.credentials` (`passthrough: true` is
    the same); the two cannot be combined."""


class AuthorizationRules(_Model):
    match_expressions: Annotated[
        list[Annotated[str, Field(min_length=1, max_length=16384)]],
        Field(min_length=1, max_length=256),
    ]
    """CEL expressions returning a boolean, over `jwt` (the verified claims, e.g.
    `"mcp-agent" in jwt.groups`) and `request` (method, path, headers, host); under
    `backend.mcp` also `mcp.tool.name`, `mcp.prompt.name`, `mcp.resource.uri`. One that does
    not compile makes the policy Accepted=False."""


class Authorization(_Model):
    action: Literal["Allow", "Deny", "Require"] = "Allow"
    """`Allow` (default): allowed when any expression is true. `Deny`: refused when any is
    true. `Require`: allowed when all are true. An expression that cannot be evaluated (a
    missing claim, not a boolean) never lets a request through."""
    policy: AuthorizationRules
    """The expressions the action applies to."""


ScopeList = Annotated[list[ScopeToken], Field(max_length=64)]


class Scopes(_Model):
    """The scopes every request on the route needs, and which granted scopes imply others."""

    required: ScopeList = []
    """Scopes every request on the route needs, read from the token's `scope` or `scp`; short
    of one: 403 `insufficient_scope`, so MCP clients step up. Also advertised to clients. Not
    `offline_access`."""
    implies: Annotated[dict[ScopeToken, ScopeList], Field(max_length=256)] = {}
    """The provider's scope hierarchy: a granted scope (the key) also grants the listed ones,
    transitively, e.g. `mcp:admin: [mcp:tools]`. Nothing is inferred from names."""

    @field_validator("required")
    @classmethod
    def _required(cls, values: list[str]) -> list[str]:
        return _not_refresh_scope(values, "scopes.required")


class McpScopeRule(_Model):
    """Scopes a tool, prompt or resource needs: a CEL `match` over `mcp` (and `jwt`, `request`)."""

    match: Annotated[str, Field(min_length=1, max_length=16384)]
    """CEL choosing the items, e.g. `mcp.tool.name.startsWith("delete_")`; a rule applies to the
    kinds it reads (tools, prompts, resources; all if none), and one that cannot be evaluated
    counts as matching."""
    required: Annotated[list[ScopeToken], Field(min_length=1, max_length=64)]
    """Scopes a call of a matching item needs, e.g. `[mcp:admin]`; not `offline_access`."""

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
    """A request header and the CEL expression that gives its value."""

    name: HeaderName
    """The header to set; a header of that name from the client is always dropped."""
    value: Annotated[str, Field(min_length=1, max_length=4096)]
    """CEL over `jwt` and `request`, e.g. `jwt.sub` or `jwt.groups.join(",")`. A missing claim
    leaves the header unset; CR, LF or NUL in the value refuses the request (400)."""


class RequestTransformation(_Model):
    set: list[HeaderValue] = []
    """Headers to set from the verified token (clients cannot supply them). With several
    providers, one set from `jwt.sub` needs `jwt.iss` in it or in another header set: `sub` is
    unique only within its issuer."""
    remove: list[HeaderName] = []
    """Headers to remove from the request, e.g. `X-Internal-Secret`."""


class Transformation(_Model):
    request: RequestTransformation = RequestTransformation()
    """Changes to the request before it is forwarded to the backend."""


class RateLimit(_Model):
    key: Annotated[str, Field(min_length=1, max_length=4096)]
    """CEL naming the caller, e.g. `jwt.sub`. Each value has its own bucket within the token's
    issuer (a value is unique only there); callers whose key cannot be computed share one."""
    requests: Annotated[int, Field(ge=1)]
    """Requests a caller may make per window, at least 1; also the largest burst."""
    window: Duration = "1m"
    """The window, as a duration such as `30s`, `1m` or `1h`: longer than 0, default `1m`."""
    redis_url: RedisUrl | None = None
    """Redis shared by every replica, so the limit holds across them: `redis://`, `rediss://`
    or `unix:`. Unset: each process counts alone. Redis not answering: 503."""

    @field_validator("window")
    @classmethod
    def _window(cls, value: str) -> str:
        if parse_duration(value) <= 0:
            raise ValueError("window must be longer than 0")
        return value


class Traffic(_Model):
    jwt_authentication: JwtAuthentication | None = None
    """Bearer JWT validation. Required: without it the policy is Accepted=False. A request
    without a valid token gets 401 with a `WWW-Authenticate` challenge."""
    authorization: Authorization | None = None
    """CEL rules over the verified claims and the request; refused: 403 (401 for an anonymous
    caller)."""
    transformation: Transformation | None = None
    """Request headers set from the verified token, or removed, before proxying."""
    rate_limit: RateLimit | None = None
    """A token bucket per caller; over the limit: 429 with `Retry-After`."""
    scopes: Scopes | None = None
    """The scopes every request needs, and which scopes imply others."""


class McpPolicy(_Model):
    authorization: Authorization | None = None
    """Tool-level authorization, evaluated per tool, prompt and resource with `mcp.tool.name`,
    `mcp.prompt.name` or `mcp.resource.uri`: lists lose the items the caller may not use, and
    calls of them are answered as unknown without reaching the backend."""
    scopes: Annotated[list[McpScopeRule], Field(max_length=256)] = []
    """Scopes that calls of matching items need; short of one: 403 `insufficient_scope` naming
    every scope the call needs, so MCP clients step up once."""


_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class SecretSource(_Model):
    """Where a secret comes from: never the resource itself, so it stays out of git and out of
    `kubectl get -o yaml`. Exactly one of a file (its content, one trailing newline dropped) or
    an environment variable of the gateway process. In Kubernetes both come from a Secret
    mounted into the gateway's pod, so the controller itself needs no access to Secrets."""

    file: AbsolutePath | None = None
    """Absolute path of a file holding the secret (in a cluster, a Secret mounted into the
    gateway's pod); one trailing newline is dropped. Read when the configuration loads."""
    env: str | None = None
    """Name of an environment variable of the gateway process holding the secret (in a
    cluster, set from a Secret with `secretKeyRef`)."""

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
    own audience naming the same user, never the caller's. If the provider refuses (502) or
    cannot be reached (503), nothing reaches the backend."""

    client_id: NonEmpty
    """The confidential client the gateway exchanges tokens as."""
    client_secret: SecretSource
    """Where that client's secret is read from: exactly one of `file` or `env`."""
    audience: NonEmpty | None = None
    """The backend's client id at the provider: the new token's `aud`. Set this or
    `resource`."""
    resource: str | None = None
    """The backend's http(s) URL, sent as RFC 8707 `resource`. Set this or `audience`; authentik
    refuses it."""
    scope: Annotated[str, Field(min_length=1, max_length=1024)] | None = None
    """Scopes to ask for, separated by spaces; optional."""

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
    """The header carrying the identity, e.g. `X-Mcp-Identity`."""
    claims: Annotated[list[NonEmpty], Field(min_length=1, max_length=32)] = ["iss", "sub"]
    """The claims sent; default `[iss, sub]`: `sub` is unique only within its issuer, so
    backends should key users on the pair (with several providers, `iss` is required)."""
    signing_key: SecretSource | None = None
    """Where the HS256 key is read from: with it, the claims go as a JWS valid for 60 s instead
    of plain JSON."""


class SecretHeader(_Model):
    """A static header (an API key) the backend requires, and optionally who the caller is."""

    header: HeaderName
    """The header's name, e.g. `X-Api-Key`."""
    value: SecretSource
    """Where the header's value is read from: exactly one of `file` or `env`."""
    identity: IdentityHeader | None = None


class BackendCredentials(_Model):
    """What the backend receives in place of the caller's token (which it never gets unless
    `passthrough` says so): exactly one mode."""

    token_exchange: TokenExchange | None = None
    passthrough: bool = False
    """Send the caller's verified token itself: only for a backend that is its audience.
    Default false."""
    secret_header: SecretHeader | None = None

    @model_validator(mode="after")
    def _one_mode(self) -> BackendCredentials:
        chosen = [self.token_exchange is not None, self.passthrough, self.secret_header is not None]
        if sum(chosen) != 1:
            raise ValueError("set exactly one of tokenExchange, passthrough or secretHeader")
        return self


class BackendPolicy(_Model):
    mcp: McpPolicy | None = None
    """Rules per MCP tool, prompt and resource; they read the verified token, so they need
    `traffic.jwtAuthentication`."""
    credentials: BackendCredentials | None = None
    """What the MCP server receives in place of the caller's token: exactly one of
    `tokenExchange`, `passthrough` or `secretHeader`. Unset: no credential at all."""


class GatewayPolicySpec(_Model):
    target_refs: Annotated[list[PolicyTargetRef], Field(min_length=1, max_length=16)]
    """The HTTPRoutes this policy governs. A route takes one policy: when several name it, the
    first by namespace/name applies and the others are Attached=False reason Conflicted."""
    traffic: Traffic
    """What every request on the routes goes through: JWT authentication, then the optional
    authorization, scope, rate limit and header rules."""
    backend: BackendPolicy | None = None
    """What the gateway does for the MCP server: rules per tool, prompt and resource, and the
    credential it receives."""


class GatewayPolicy(_Model):
    api_version: Literal["mcp-oauth-gateway.dev/v1alpha1"]
    kind: Literal["GatewayPolicy"]
    metadata: ObjectMeta
    spec: GatewayPolicySpec
    """How requests to the targeted routes are authenticated and authorized, how MCP clients
    find where to sign in, and what the MCP server receives."""


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
