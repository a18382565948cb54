"""How the models' validators are written in the CRD schemas (gen_crds): an OpenAPI keyword
when one can say it, a CEL rule only for what OpenAPI cannot, or a note that only the
controller checks it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from pydantic import BaseModel

from mcp_oauth_gateway.resources import backend, fields, models, policy

Schema = dict[str, Any]

# Kubernetes evaluates `pattern` with Go's RE2: no look-around, `$` is the end of the text.
# The models' duration regex uses `(?!s)` (redundant once the pattern is anchored: after the
# minutes group only a digit or the end can follow) and `\d` (Unicode digits in Python).
DURATION_PATTERN = r"^(?:[0-9]{1,5}h)?(?:[0-9]{1,5}m)?(?:[0-9]{1,5}s)?(?:[0-9]{1,5}ms)?$"
# The longest string DURATION_PATTERN matches; bounding it keeps the CEL rules' cost small.
DURATION_MAX_LENGTH = 25
# Kubernetes matches `pattern` anywhere in the value: anchor the model's whole-value pattern.
HEADER_NAME_PATTERN = f"^{fields._HEADER_NAME.pattern}$"
DOMAIN_PATTERN = f"^{models.DOMAIN.pattern}$"
# RFC 6749 scope-token: printable ASCII but space, `"` and backslash.
SCOPE_PATTERN = r"^[!#-\[\]-~]{1,256}$"
PROTECTED_HEADERS_PATTERN = "(?i)^(" + "|".join(sorted(fields._PROTECTED)) + ")$"


# How many of a credential's four modes are set (`passthrough: false` is none).
_MODES = (
    "[has(self.tokenExchange), has(self.passthrough) && self.passthrough, "
    "has(self.secretHeader), has(self.userOAuth)].filter(x, x).size()"
)


@dataclass(frozen=True, slots=True)
class Rule:
    """How one model validator reaches the CRD: schema keywords, CEL rules, controller notes."""

    keywords: Mapping[str, Any] = field(default_factory=dict)
    cel: tuple[tuple[str, str], ...] = ()  # (rule, message); messages are the loader's words
    controller: str = ""  # what only the controller checks (listed in the CRD's comment)


def _http_url_rule(field: str) -> Rule:
    # The models' own grammar (HTTP_URL) as the pattern; what only the WHATWG parser can say
    # (a host it refuses, a port out of range) is the controller's.
    return Rule(
        keywords={"pattern": f"^{models.HTTP_URL.pattern}$"},
        controller=f"{field}: an http(s) URL whose host and port the WHATWG URL parser reads",
    )


def _duration_rule(bound: str, message: str) -> Rule:
    # The guard keeps a malformed duration to the pattern's error instead of a CEL
    # evaluation error on top of it.
    return Rule(
        keywords={"pattern": DURATION_PATTERN, "maxLength": DURATION_MAX_LENGTH},
        cel=((f"!self.matches('{DURATION_PATTERN}') || duration(self) {bound}", message),),
    )


def _https_port_rule() -> Rule:
    return Rule(
        cel=(
            (
                # The guard: a missing port is the schema's error alone (as the API server says it).
                f"!has(self.port) || self.port != {backend.HTTPS_PORT} || has(self.tls)",
                backend.IN_THE_CLEAR,
            ),
        )
    )


def _no_refresh_scope(where: str) -> Rule:
    message = " ".join((fields.not_refresh_scope.__doc__ or "").split())
    return Rule(
        cel=(
            (
                f"!('{models.REFRESH_SCOPE}' in self)",
                f"{models.REFRESH_SCOPE} does not belong in {where}: {message}",
            ),
        )
    )


# Validators attached to a type with `Annotated[..., AfterValidator(f)]`, keyed by `f`.
AFTER_VALIDATORS: dict[Callable[..., Any], Rule] = {
    fields._starts_with_slash: Rule(keywords={"pattern": "^/"}),
    fields._scope_token: Rule(keywords={"pattern": SCOPE_PATTERN}),
    fields.domain: Rule(keywords={"pattern": DOMAIN_PATTERN}),
    # Not CEL: a rule on these unbounded strings in unbounded lists exceeds the API server's
    # cost budget (it needs maxLength and maxItems the models do not have). The server words a
    # `not` failure poorly, so the description says what it means (`kubectl explain`).
    fields._header_name: Rule(
        keywords={
            "description": "An HTTP header name, other than those the gateway manages itself: "
            + ", ".join(sorted(fields._PROTECTED))
            + " (in any case; the API server reports one as `must not validate the schema "
            "(not)`).",
            "pattern": HEADER_NAME_PATTERN,
            "not": {"pattern": PROTECTED_HEADERS_PATTERN},
        }
    ),
    fields._redis_url: Rule(keywords={"pattern": f"^{models.REDIS_URL.pattern}$"}),
    backend._target_name: Rule(keywords={"pattern": f"^{backend.TARGET_NAME.pattern}$"}),
    backend._host: Rule(
        keywords={
            "pattern": f"^(?:{backend.HOST_NAME.pattern}|{backend.IPV6_HOST.pattern})$",
            "maxLength": 253,
        },
        controller="static.host: digits and dots only as a canonical IPv4 address, and an "
        "IPv6 address the controller can read",
    ),
    policy._secret_name: Rule(
        keywords={"pattern": f"^{policy.SECRET_NAME.pattern}$", "maxLength": 253}
    ),
    policy._secret_key: Rule(
        keywords={"pattern": f"^{policy.SECRET_KEY.pattern}$", "maxLength": 253}
    ),
    fields._namespace_name: Rule(
        keywords={"pattern": f"^{fields.NAMESPACE_NAME.pattern}$", "maxLength": 63}
    ),
}

# `@field_validator` and `@model_validator` methods, keyed by (model, method name).
DECORATED: dict[tuple[type[BaseModel], str], Rule] = {
    (models.RemoteJwks, "_duration"): _duration_rule(
        ">= duration('1s')", "cacheDuration must be at least 1s"
    ),
    (models.RemoteJwks, "_url"): _http_url_rule("jwks.remote.url"),
    (models.RemoteJwks, "_one_source"): Rule(
        cel=(
            ("has(self.backendRef) != has(self.url)", "set exactly one of backendRef or url"),
            (
                "!has(self.backendRef) || has(self.jwksPath)",
                "jwksPath is required with backendRef (the path of the JWKS document on that "
                "service, e.g. /application/o/<slug>/jwks/ for authentik)",
            ),
            (
                "!(has(self.url) && has(self.jwksPath))",
                "jwksPath cannot be combined with url; put the path in the url",
            ),
        )
    ),
    (models.KubernetesJwks, "_duration"): _duration_rule(
        ">= duration('1s')", "cacheDuration must be at least 1s"
    ),
    (models.WorkloadJwks, "_one_source"): Rule(
        cel=(
            (
                "[has(self.remote), has(self.inline), has(self.kubernetes)]"
                ".filter(x, x).size() == 1",
                "set exactly one of remote, inline or kubernetes",
            ),
        )
    ),
    (models.WorkloadIssuer, "_issuer_url"): Rule(
        keywords={"pattern": r"^https?://[^/?#@\s\\]+(/[^?#\s\\]*)?$"},
        controller="workloadIdentity.issuers[].issuer: an absolute http(s) URL (WHATWG) "
        "without user information, query or fragment",
    ),
    (models.WorkloadIssuer, "_scopes"): _no_refresh_scope("workloadIdentity scopes"),
    (models.Jwks, "_one_source"): Rule(
        cel=(("has(self.remote) != has(self.inline)", "set exactly one of remote or inline"),)
    ),
    (models.ResourceMetadata, "_resource"): _http_url_rule("mcp.resourceMetadata.resource"),
    (models.ResourceMetadata, "_minimal"): _no_refresh_scope("scopesSupported"),
    (models.Scopes, "_required"): _no_refresh_scope("scopes.required"),
    (models.McpScopeRule, "_required"): _no_refresh_scope("required"),
    (models.JwtProvider, "_known_kind"): Rule(keywords={"enum": list(models.PROVIDER_ALIASES)}),
    (models.JwtProvider, "_proofs_need_dpop"): Rule(
        cel=(
            (
                "!(has(self.dpop) && self.dpop == 'Disabled' && has(self.dpopProofs))",
                "dpopProofs cannot be set with dpop: Disabled; remove one of them",
            ),
        )
    ),
    (models.DpopProofs, "_window"): _duration_rule(
        ">= duration('1s') && duration(self) <= duration('1h')", "maxAge must be between 1s and 1h"
    ),
    (models.JwtProvider, "_issuer_url"): Rule(
        # What the API server can say of it: http(s), a host without user-info, no query or
        # fragment; the controller reads the rest as the WHATWG URL parser does.
        keywords={"pattern": r"^https?://[^/?#@\s\\]+(/[^?#\s\\]*)?$"},
        controller="jwtAuthentication.providers[].issuer: an absolute http(s) URL (WHATWG) "
        "without user information, query or fragment",
    ),
    (models.SecretSource, "_env_name"): Rule(keywords={"pattern": f"^{fields.ENV_NAME.pattern}$"}),
    (models.SecretSource, "_one_source"): Rule(
        cel=(
            (
                "[has(self.secretRef), has(self.file), has(self.env)].filter(x, x).size() == 1",
                "set exactly one of secretRef, file or env",
            ),
        )
    ),
    (models.TokenExchange, "_resource"): _http_url_rule("credentials.tokenExchange.resource"),
    (models.TokenExchange, "_target"): Rule(
        cel=(
            (
                "has(self.audience) || has(self.resource)",
                "set audience (the backend's client id at the provider) or resource (its "
                "URL): the exchanged token must be for the backend",
            ),
        )
    ),
    (models.BackendCredentialsSpec, "_one_mode"): Rule(
        cel=(
            (
                f"has(self.targets) || {_MODES} == 1",
                models.ONE_MODE,
            ),
            (
                f"!has(self.targets) || {_MODES} <= 1",
                "set at most one of tokenExchange, passthrough, secretHeader or userOAuth beside "
                "targets (the default of the targets not listed)",
            ),
        )
    ),
    # One entry per target, as Kubernetes says it of a list: a map keyed by `name`.
    (models.BackendCredentialsSpec, "_unique_names"): Rule(
        keywords={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}
    ),
    (models.TargetCredentials, "_one_mode"): Rule(cel=((f"{_MODES} == 1", models.ONE_MODE),)),
    (models.UserOAuth, "_url"): _http_url_rule("credentials.userOAuth endpoints and issuer"),
    (models.UserOAuth, "_resource"): _http_url_rule("credentials.userOAuth.resource"),
    (models.UserOAuth, "_endpoints"): Rule(
        cel=(
            (
                "has(self.authorizationEndpoint) == has(self.tokenEndpoint)",
                "set authorizationEndpoint and tokenEndpoint together (an upstream without "
                "discovery), or neither",
            ),
            (
                "!(has(self.issuer) && has(self.tokenEndpoint))",
                "set issuer (discovery) or authorizationEndpoint/tokenEndpoint, not both",
            ),
            (
                "!has(self.revocationEndpoint) || has(self.tokenEndpoint)",
                "revocationEndpoint goes with authorizationEndpoint/tokenEndpoint; with "
                "discovery it is read from the upstream's metadata",
            ),
        )
    ),
    (models.McpAuthentication, "_known_provider"): Rule(
        keywords={"enum": list(models.PROVIDER_ALIASES)}
    ),
    # Unique names as Kubernetes says it of a list: a map keyed by `name`.
    (models.McpBackend, "_unique_names"): Rule(
        keywords={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["name"]}
    ),
    (models.RateLimitSpec, "_window"): _duration_rule(
        "> duration('0s')", "window must be longer than 0"
    ),
    (backend.McpTarget, "_one_address"): Rule(
        cel=(("has(self.static) != has(self.service)", "set exactly one of static or service"),)
    ),
    (backend.McpTarget, "_timeout"): _duration_rule(
        "> duration('0s')", "timeout must be more than zero"
    ),
    (backend.StaticTarget, "_https_port"): _https_port_rule(),
    (backend.ServiceTarget, "_https_port"): _https_port_rule(),
}
