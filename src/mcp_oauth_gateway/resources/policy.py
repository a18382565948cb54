"""GatewayPolicy itself, with what it does for the backend (the credentials it receives)."""

from __future__ import annotations

import re
from typing import Annotated, Literal

from pydantic import AfterValidator, Field, ValidationError, field_validator, model_validator
from pydantic_core import InitErrorDetails, PydanticCustomError

from .authentication import PolicyTargetRef
from .backend import MAX_TARGETS, TargetName
from .fields import (
    ENV_NAME,
    AbsolutePath,
    HeaderName,
    NamespaceName,
    NonEmpty,
    ScopeList,
    StrictModel,
    absolute_http_url,
)
from .gateway_api import ObjectMeta
from .traffic import McpPolicy, Traffic

# Kubernetes object names: a Secret's is a DNS subdomain, a namespace's a DNS label, a key
# what `kubectl create secret` accepts (ConfigMap/Secret key rules).
SECRET_NAME = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
SECRET_KEY = re.compile(r"[-._a-zA-Z0-9]+")


def _secret_name(value: str) -> str:
    if len(value) > 253 or not SECRET_NAME.fullmatch(value):
        raise ValueError(
            f"{value[:60]!r} is not a Secret name (lowercase letters, digits, '-' and '.', at "
            "most 253)"
        )
    return value


def _secret_key(value: str) -> str:
    if len(value) > 253 or not SECRET_KEY.fullmatch(value):
        raise ValueError(
            f"{value[:60]!r} is not a Secret key (letters, digits, '-', '_' and '.', at most 253)"
        )
    return value


SecretName = Annotated[str, AfterValidator(_secret_name)]
SecretKey = Annotated[str, AfterValidator(_secret_key)]


class SecretKeyRef(StrictModel):
    """One key of a Kubernetes Secret, read by the controller (controller mode only)."""

    name: SecretName
    """Name of the Secret."""
    key: SecretKey
    """The key in the Secret's `data` whose value is the secret (one line; one trailing newline
    is dropped)."""
    namespace: NamespaceName | None = None
    """Namespace of the Secret; default: the policy's. Another namespace needs a ReferenceGrant
    there that lets GatewayPolicies of the policy's namespace refer to Secrets (optionally this
    one by name); without one the Secret is never read."""


class SecretSource(StrictModel):
    """Where a secret comes from: never the resource itself, so it stays out of git and out of
    `kubectl get -o yaml`. Exactly one of a Kubernetes Secret (`secretRef`, in a cluster), a
    file (its content, one trailing newline dropped) or an environment variable of the gateway
    process (`file` and `env` from resource files; in a cluster `env` is refused and `file`
    only under the operator's `--secret-files-dir`, per namespace)."""

    secret_ref: SecretKeyRef | None = None
    """A key of a Secret of the policy's namespace (or of another one that grants it), read by
    the controller and followed as it changes: controller mode only. Missing, without the key,
    empty or more than one line: the policy is not accepted and its routes answer 503."""
    file: AbsolutePath | None = None
    """Absolute path of a file holding the secret; one trailing newline is dropped. Read when
    the configuration loads. From resource files any file of the gateway; in a cluster refused
    unless the gateway runs with `--secret-files-dir DIR`, and then only under
    `DIR/<policy namespace>/`."""
    env: str | None = None
    """Name of an environment variable of the gateway process holding the secret. From resource
    files only: refused in a cluster (every namespace would share the process's environment)."""

    @field_validator("env")
    @classmethod
    def _env_name(cls, value: str | None) -> str | None:
        if value is not None and not ENV_NAME.fullmatch(value):
            raise ValueError(f"{value!r} is not an environment variable name")
        return value

    @model_validator(mode="after")
    def _one_source(self) -> SecretSource:
        if sum(x is not None for x in (self.secret_ref, self.file, self.env)) != 1:
            raise ValueError("set exactly one of secretRef, file or env")
        return self


class TokenExchange(StrictModel):
    """RFC 8693 at the provider that issued the caller's token: the backend gets a token of its
    own audience naming the same user, never the caller's. If the provider refuses (502) or
    cannot be reached (503), nothing reaches the backend."""

    client_id: NonEmpty
    """The confidential client the gateway exchanges tokens as."""
    client_secret: SecretSource
    """Where that client's secret is read from: exactly one of `secretRef` (in a cluster),
    `file` or `env`."""
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
        return None if value is None else absolute_http_url(value)

    @model_validator(mode="after")
    def _target(self) -> TokenExchange:
        if self.audience is None and self.resource is None:
            raise ValueError(
                "set audience (the backend's client id at the provider) or resource (its URL): "
                "the exchanged token must be for the backend"
            )
        return self


class UserOAuth(StrictModel):
    """Each user's own sign-in at a third-party MCP server's OAuth authorization server: the
    gateway is every user's OAuth client there, asks the user once (a URL the MCP client opens)
    and sends the backend `Authorization: Bearer <that user's token>`, refreshed as it expires.
    Needs `jwtAuthentication.mcp.clientId` (the gateway checks, at the route's provider, that
    whoever opens the link is the caller who was asked) and a gateway run with
    `--user-token-key`."""

    client_id: NonEmpty
    """The gateway's client id at the upstream authorization server (registered there with the
    redirect URI `<gateway origin><MCP path>/connect/callback`)."""
    client_secret: SecretSource | None = None
    """Where that client's secret is read from: exactly one of `secretRef` (in a cluster),
    `file` or `env`. Unset: a public client (PKCE only)."""
    scopes: ScopeList = []
    """The scopes asked of the upstream (e.g. GitHub's `repo`, `read:org`); none: the
    upstream's default."""
    issuer: str | None = None
    """The upstream authorization server's issuer: its metadata is read from RFC 8414 or OpenID
    discovery under it. Unset, with no endpoints: found the way an MCP client finds it (the
    backend's 401 `WWW-Authenticate`, then its RFC 9728 metadata)."""
    authorization_endpoint: str | None = None
    """For an upstream without discovery (GitHub): its authorization endpoint. Set with
    `tokenEndpoint`, instead of `issuer`."""
    token_endpoint: str | None = None
    """For an upstream without discovery: its token endpoint. Set with
    `authorizationEndpoint`."""
    revocation_endpoint: str | None = None
    """For an upstream without discovery: its RFC 7009 revocation endpoint, used when a user
    disconnects. Optional."""
    resource: str | None = None
    """The RFC 8707 `resource` sent to the upstream. Default: the backend's own, from its RFC
    9728 metadata when the server is found that way; otherwise none."""
    display_name: Annotated[str, Field(min_length=1, max_length=64)] | None = None
    """The service's name as users read it ("GitHub"). Default: the GatewayBackend's name (or
    the target's)."""

    @field_validator("issuer", "authorization_endpoint", "token_endpoint", "revocation_endpoint")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return None if value is None else absolute_http_url(value)

    @field_validator("resource")
    @classmethod
    def _resource(cls, value: str | None) -> str | None:
        return None if value is None else absolute_http_url(value)

    @model_validator(mode="after")
    def _endpoints(self) -> UserOAuth:
        explicit = self.authorization_endpoint is not None or self.token_endpoint is not None
        if explicit and (self.authorization_endpoint is None or self.token_endpoint is None):
            raise ValueError(
                "set authorizationEndpoint and tokenEndpoint together (an upstream without "
                "discovery), or neither"
            )
        if explicit and self.issuer is not None:
            raise ValueError(
                "set issuer (discovery) or authorizationEndpoint/tokenEndpoint, not both"
            )
        if self.revocation_endpoint is not None and not explicit:
            raise ValueError(
                "revocationEndpoint goes with authorizationEndpoint/tokenEndpoint; with "
                "discovery it is read from the upstream's metadata"
            )
        return self


class IdentityHeader(StrictModel):
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


class SecretHeader(StrictModel):
    """A static header (an API key) the backend requires, and optionally who the caller is."""

    header: HeaderName
    """The header's name, e.g. `X-Api-Key`."""
    value: SecretSource
    """Where the header's value is read from: exactly one of `secretRef` (in a cluster),
    `file` or `env`."""
    identity: IdentityHeader | None = None


ONE_MODE = "set exactly one of tokenExchange, passthrough, secretHeader or userOAuth"


def _modes(spec: BackendCredentialsSpec | TargetCredentials) -> int:
    """How many of the four modes are set."""
    return sum(
        [
            spec.token_exchange is not None,
            spec.passthrough,
            spec.secret_header is not None,
            spec.user_oauth is not None,
        ]
    )


class TargetCredentials(StrictModel):
    """What one target of a federated backend receives, in place of the default (the modes
    beside `targets`): exactly one mode."""

    name: TargetName
    """The target's name in the route's GatewayBackend (`spec.mcp.targets[].name`). A name the
    backend has no target of makes the policy invalid (its routes answer 503), so a typo never
    gives a target the default credential."""
    token_exchange: TokenExchange | None = None
    """RFC 8693 for this target: its own `audience` or `resource`, its own cached tokens."""
    passthrough: bool = False
    """Send this target the caller's verified token itself (only for a target that is its
    audience). Default false."""
    secret_header: SecretHeader | None = None
    """A static header (an API key) for this target, and optionally who calls."""
    # to_camel would say `userOauth`; the API says OAuth as the specifications do.
    user_oauth: UserOAuth | None = Field(default=None, alias="userOAuth")
    """Each user's own token at this target's authorization server."""

    @model_validator(mode="after")
    def _one_mode(self) -> TargetCredentials:
        if _modes(self) != 1:
            raise ValueError(ONE_MODE)
        return self


class BackendCredentialsSpec(StrictModel):
    """What the backend receives in place of the caller's token (which it never gets unless
    `passthrough` says so): exactly one mode, or, with `targets`, at most one (the default of
    the targets not listed)."""

    token_exchange: TokenExchange | None = None
    passthrough: bool = False
    """Send the caller's verified token itself: only for a backend that is its audience.
    Default false."""
    secret_header: SecretHeader | None = None
    # to_camel would say `userOauth`; the API says OAuth as the specifications do.
    user_oauth: UserOAuth | None = Field(default=None, alias="userOAuth")
    """Each user's own token at a third-party MCP server's authorization server, asked for once
    per user through a link the MCP client opens (URL-mode elicitation)."""
    targets: (
        Annotated[list[TargetCredentials], Field(min_length=1, max_length=MAX_TARGETS)] | None
    ) = None
    """Credentials per target of a backend with several (1 to 16 entries, names unique), each
    with exactly one mode; a target not listed gets the mode set beside `targets`, or nothing
    when none is. On a backend with a single target, an entry naming it replaces that mode."""

    @field_validator("targets")
    @classmethod
    def _unique_names(
        cls, targets: list[TargetCredentials] | None
    ) -> list[TargetCredentials] | None:
        seen: set[str] = set()
        for index, entry in enumerate(targets or []):
            if entry.name in seen:
                # Named at the repeated item, as the API server names it (`targets[i]`).
                why = PydanticCustomError(
                    "value_error",
                    # The name passed its pattern: no braces for the template to read.
                    f"the name '{entry.name}' is used by an earlier entry; each target has "
                    "one entry",
                )
                detail = InitErrorDetails(type=why, loc=(index,), input=entry.name)
                raise ValidationError.from_exception_data("BackendCredentialsSpec", [detail])
            seen.add(entry.name)
        return targets

    @model_validator(mode="after")
    def _one_mode(self) -> BackendCredentialsSpec:
        chosen = _modes(self)
        if self.targets is None and chosen != 1:
            raise ValueError(ONE_MODE)
        if chosen > 1:
            raise ValueError(
                "set at most one of tokenExchange, passthrough, secretHeader or userOAuth beside "
                "targets "
                "(the default of the targets not listed)"
            )
        return self


class BackendPolicy(StrictModel):
    mcp: McpPolicy | None = None
    """Rules per MCP tool, prompt and resource; they read the verified token, so they need
    `traffic.jwtAuthentication`."""
    credentials: BackendCredentialsSpec | None = None
    """What the MCP server receives in place of the caller's token: exactly one of
    `tokenExchange`, `passthrough`, `secretHeader` or `userOAuth`, and per target with
    `targets`. Unset: no credential at all."""


class GatewayPolicySpec(StrictModel):
    target_refs: Annotated[list[PolicyTargetRef], Field(min_length=1, max_length=16)]
    """The HTTPRoutes this policy governs. A route takes one policy: when several name it, the
    first by namespace/name applies and the others are Attached=False reason Conflicted."""
    traffic: Traffic
    """What every request on the routes goes through: JWT authentication, then the optional
    authorization, scope, rate limit and header rules."""
    backend: BackendPolicy | None = None
    """What the gateway does for the MCP server: rules per tool, prompt and resource, and the
    credential it receives."""


class GatewayPolicy(StrictModel):
    api_version: Literal["mcp-oauth-gateway.dev/v1alpha1"]
    kind: Literal["GatewayPolicy"]
    metadata: ObjectMeta
    spec: GatewayPolicySpec
    """How requests to the targeted routes are authenticated and authorized, how MCP clients
    find where to sign in, and what the MCP server receives."""
