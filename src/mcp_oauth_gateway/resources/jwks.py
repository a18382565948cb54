"""Where a token issuer's public keys come from (a Service, a URL, or inline), and what an
issuer URL may be: shared by the providers of `jwtAuthentication` and its workload issuers."""

from __future__ import annotations

from typing import Annotated, Literal
from urllib.parse import urlsplit

from pydantic import Field, field_validator, model_validator

from ..urls import shown_url
from .fields import (
    AbsolutePath,
    Duration,
    NonEmpty,
    Port,
    StrictModel,
    absolute_http_url,
    parse_duration,
)


class ServiceBackendRef(StrictModel):
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


class RemoteJwks(StrictModel):
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
        return None if value is None else absolute_http_url(value)

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


class Jwks(StrictModel):
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


def issuer_url(value: str) -> str:
    """An issuer as OpenID Connect Discovery §3 has it: an http(s) URL without query or
    fragment. User-info is refused too: it would become Basic credentials on the discovery
    fetch and be published as it is in the protected resource metadata."""
    parts = urlsplit(value)
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        raise ValueError(f"{shown_url(value)!r}: an issuer holds no user information")
    if parts.query or parts.fragment or "?" in value or "#" in value:
        raise ValueError(f"{shown_url(value)!r}: an issuer has no query or fragment")
    return absolute_http_url(value)
