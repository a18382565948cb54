"""GatewayPolicy's `traffic.jwtAuthentication`: the providers whose tokens a route accepts,
their keys, and the MCP OAuth settings (metadata, Facade or Broker)."""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import AfterValidator, Field, field_validator, model_validator

from ..authorization_server_modes import AuthorizationServerMode
from ..provider_kinds import ProviderKind
from .fields import (
    GATEWAY_API_GROUP,
    Duration,
    NonEmpty,
    RedisUrl,
    ScopeToken,
    StrictModel,
    absolute_http_url,
    domain,
    not_refresh_scope,
    parse_duration,
    provider_kind,
)
from .jwks import Jwks, issuer_url
from .workload import WorkloadIdentity

# --- GatewayPolicy (mcp-oauth-gateway.dev/v1alpha1) ----------------------------------------


class PolicyTargetRef(StrictModel):
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


# The DPoP proof algorithms (RFC 9449 §4.3 check 5: asymmetric only), in the order offered.
DpopAlgorithm = Literal[
    "ES256",
    "ES384",
    "ES512",
    "EdDSA",
    "Ed25519",
    "PS256",
    "PS384",
    "PS512",
    "RS256",
    "RS384",
    "RS512",
]
# A provider's DPoP mode (`providers[].dpop`).
DpopMode = Literal["Disabled", "Allowed", "Required"]
# How a route treats a missing or bad token, in the order of how much each lets in.
JwtMode = Literal["Strict", "Optional", "Permissive"]


class DpopProofs(StrictModel):
    """What a DPoP proof (RFC 9449) sent with this provider's tokens must be."""

    algorithms: Annotated[list[DpopAlgorithm], Field(min_length=1, max_length=11)] | None = None
    """The JWS algorithms a proof may be signed with, asymmetric only (`none` and HMAC never
    are): `ES256`, `ES384`, `ES512`, `EdDSA`, `Ed25519`, `PS256`, `PS384`, `PS512`, `RS256`,
    `RS384`, `RS512`. Default: all of them. Advertised in the 401 challenge (`algs`) and the
    protected resource metadata (`dpop_signing_alg_values_supported`), and in Broker mode in
    the gateway's authorization server metadata."""
    max_age: Duration = "5m"
    """How far a proof's `iat` may be from the gateway's clock, either way, as a duration from
    `1s` to `1h`: default `5m` (the MCP DPoP profile's window). A proof is also remembered (its
    `jti`) this long, so that it is accepted once."""
    require_nonce: bool = False
    """Require a server nonce in every proof (RFC 9449 §9): a proof without the current one is
    answered 401 `use_dpop_nonce` with a fresh nonce in `DPoP-Nonce`, which the client signs
    into its next proof (in Broker mode also at the token endpoint: 400 `use_dpop_nonce`).
    Proves a proof was made after the gateway asked, not in advance by someone who held the
    key for a while. Every replica accepts another's nonces when they share a Redis
    (`mcp.broker.redisUrl` or the gateway's MCP_OAUTH_GATEWAY_REDIS_URL)."""

    @field_validator("max_age")
    @classmethod
    def _window(cls, value: str) -> str:
        if not 1 <= parse_duration(value) <= 3600:
            raise ValueError("maxAge must be between 1s and 1h")
        return value


class JwtProvider(StrictModel):
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
        list[Annotated[str, Field(max_length=253), AfterValidator(domain)]],
        Field(max_length=64),
    ] = []
    """Broker mode: lowercase e-mail domains, such as `corp.example`, whose `login_hint`
    (`alice@corp.example`) picks this provider without asking. A domain belongs to one provider
    at most."""

    dpop: DpopMode = "Allowed"
    """DPoP (RFC 9449), sender-constrained tokens: a token bound to a key (`cnf.jkt`) is
    accepted only as `Authorization: DPoP` with a proof signed by that key, made for this
    request. `Allowed` (default): bound tokens with a proof, and unbound tokens as `Bearer`.
    `Required`: bound tokens only, so a copied token is useless without its key. `Disabled`:
    `Bearer` only; a bound token is refused (accepting it as a bearer token would undo its
    binding). Broker mode: the gateway binds the tokens it hands out for this provider to the
    key of a proof sent to its token endpoint (`token_type: DPoP`); under `Required` a token
    request without a proof is refused, under `Disabled` a proof is not read."""
    dpop_proofs: DpopProofs | None = None
    """What a DPoP proof must be: algorithms, age, server nonces. Refused with
    `dpop: Disabled`."""

    @model_validator(mode="after")
    def _proofs_need_dpop(self) -> JwtProvider:
        if self.dpop == "Disabled" and self.dpop_proofs is not None:
            raise ValueError("dpopProofs cannot be set with dpop: Disabled; remove one of them")
        return self

    @field_validator("issuer")
    @classmethod
    def _issuer_url(cls, value: str) -> str:
        return issuer_url(value)

    @field_validator("kind", mode="before")
    @classmethod
    def _known_kind(cls, value: object) -> object:
        return provider_kind(value, "provider kind")


class ResourceMetadata(StrictModel):
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
        return not_refresh_scope(values, "scopesSupported")

    @field_validator("resource")
    @classmethod
    def _resource(cls, value: str | None) -> str | None:
        if value is None:
            return None
        absolute_http_url(value)
        if urlsplit(value).fragment:
            raise ValueError("resource must not have a fragment")
        return value


class BrokerSettings(StrictModel):
    redis_url: RedisUrl | None = None
    """Redis holding sign-ins in progress, codes and refresh tokens for every replica: one
    server (`redis://`, `rediss://` for TLS, `unix:`), a Sentinel set
    (`redis+sentinel://:PASSWORD@H1:26379,H2:26379/SERVICE/DB`) or a Cluster
    (`redis+cluster://:PASSWORD@H1:7000,H2:7001/`); `acks=N` in the query: replicas every write
    waits for (1 by default with Sentinel or Cluster). Required when several processes serve,
    unless the gateway's MCP_OAUTH_GATEWAY_REDIS_URL sets it; unset, state stays in memory."""


class McpAuthentication(StrictModel):
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
    authorization_server_mode: AuthorizationServerMode = AuthorizationServerMode.FACADE
    """`Facade` (default): clients get the provider's own authorization server metadata, with
    the gateway's registration endpoint, and sign in at the provider. `Broker`: the gateway is
    the authorization server clients see and signs users in at the provider itself; needed by
    clients that check the metadata's `issuer` and the RFC 9207 `iss`."""
    broker: BrokerSettings | None = None
    """Broker mode settings; refused in Facade mode."""
    workload_identity: WorkloadIdentity | None = None
    """Broker mode: workloads (a pod's service account, a SPIFFE JWT-SVID) get an access token
    with no browser and no secret, by sending a JWT of a trusted issuer to the token endpoint
    (RFC 7523 `jwt-bearer`). Needs `resourceMetadata.resource`."""

    @field_validator("provider", mode="before")
    @classmethod
    def _known_provider(cls, value: object) -> object:
        return provider_kind(value, "provider")


class JwtAuthenticationSpec(StrictModel):
    mode: JwtMode = "Strict"
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
