"""GatewayPolicy's `traffic.jwtAuthentication.mcp.workloadIdentity`: the workload issuers whose
JWTs (a Kubernetes service account's token, a SPIFFE JWT-SVID) Broker mode's token endpoint
takes as an RFC 7523 `jwt-bearer` assertion, and what each workload may get for one."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field, field_validator, model_validator

from .cel_rules import Authorization
from .fields import Duration, NonEmpty, ScopeList, StrictModel, not_refresh_scope, parse_duration
from .jwks import RemoteJwks, issuer_url


class KubernetesJwks(StrictModel):
    """The service-account issuer of the cluster the gateway runs in (controller mode)."""

    cache_duration: Duration = "5m"
    """How often the keys are read again, as a duration such as `30s`, `5m` or `1h`: at least
    `1s`, default `5m`. A token naming an unknown `kid` also reads them (at most once per
    10 s), so a rotated key is picked up at once."""

    @field_validator("cache_duration")
    @classmethod
    def _duration(cls, value: str) -> str:
        if parse_duration(value) < 1:
            raise ValueError("cacheDuration must be at least 1s")
        return value


class WorkloadJwks(StrictModel):
    remote: RemoteJwks | None = None
    """Fetch the keys over HTTP, from a Service (`backendRef` and `jwksPath`) or a URL (`url`),
    as for a provider."""
    inline: Annotated[str, Field(min_length=2, max_length=65536)] | None = None
    """The JWKS document itself, as JSON text (`{"keys": [...]}`); never refetched."""
    kubernetes: KubernetesJwks | None = None
    """The keys of the cluster the gateway runs in, read from its API server's
    `/openid/v1/jwks` with the gateway's own credentials (every service account may read it:
    the `system:service-account-issuer-discovery` ClusterRole). Controller mode only; the
    issuer is then the API server's `--service-account-issuer`."""

    @model_validator(mode="after")
    def _one_source(self) -> WorkloadJwks:
        chosen = [self.remote, self.inline, self.kubernetes]
        if sum(source is not None for source in chosen) != 1:
            raise ValueError("set exactly one of remote, inline or kubernetes")
        return self


class WorkloadIssuer(StrictModel):
    """An issuer of workload JWTs the token endpoint trusts, and what its workloads may get."""

    issuer: Annotated[str, Field(min_length=1, max_length=256)]
    """The issuer exactly as its tokens' `iss` says it: for Kubernetes the API server's
    `--service-account-issuer` (`kubectl get --raw /.well-known/openid-configuration` shows
    it); an http(s) URL without user information, query or fragment."""
    jwks: WorkloadJwks
    """Where the issuer's public keys come from: exactly one of `remote`, `inline` or
    `kubernetes`."""
    audiences: Annotated[list[NonEmpty], Field(min_length=1, max_length=64)]
    """The `aud` values accepted: an assertion must name at least one (for Kubernetes, what
    `kubectl create token --audience` or a projected token's `audience` gave). Use a value
    meant for this gateway alone, such as its token endpoint URL, so that a token minted for
    another service is never accepted here."""
    authorization: Authorization
    """Which workloads of this issuer may get a token: CEL over `jwt`, the verified
    assertion's claims, e.g. `jwt["kubernetes.io"].namespace == "agents"` or
    `jwt.sub == "system:serviceaccount:agents:reader"`. Required: an issuer such as a
    cluster signs tokens for every workload in it."""
    scopes: ScopeList = []
    """The scopes the issued token carries (a request may ask for fewer with `scope`, never
    for others). Not `offline_access`: workloads get no refresh token."""

    @field_validator("issuer")
    @classmethod
    def _issuer_url(cls, value: str) -> str:
        return issuer_url(value)

    @field_validator("scopes")
    @classmethod
    def _scopes(cls, values: list[str]) -> list[str]:
        return not_refresh_scope(values, "workloadIdentity scopes")


class WorkloadIdentity(StrictModel):
    issuers: Annotated[list[WorkloadIssuer], Field(min_length=1, max_length=16)]
    """The trusted workload issuers (1 to 16, each `issuer` once). An assertion goes by its
    `iss` to the one issuer with that value (none: `invalid_grant`)."""
