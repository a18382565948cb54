"""Workload identity (SEP-1933): a workload trades a JWT its platform issued it (a Kubernetes
service account's token, a SPIFFE JWT-SVID) for an access token to this MCP server, with the
RFC 7523 grant `urn:ietf:params:oauth:grant-type:jwt-bearer` at the Broker's token endpoint: no
browser, no client registration, no shared secret.

What an assertion must be, checked in this order (the first failure is the answer):
1. a JWT signed by a key of a trusted issuer (`workloadIdentity.issuers[]`), picked by its
   `iss`, exactly; verified by the gateway's own JWT verification (the data plane's, given to
   the Broker as `AssertionJudge`): asymmetric algorithms only, `aud` naming one of that
   issuer's `audiences`, `exp` required, `nbf` and `iat` honoured, 60 s of leeway;
2. a `sub` (the workload: `system:serviceaccount:<namespace>:<name>` for Kubernetes), and a
   `jti`, when present, that is a short string;
3. allowed by that issuer's CEL `authorization` over its claims (`unauthorized_client`);
4. asking (`scope`) only for scopes that issuer grants (`invalid_scope`); none asked: all;
5. never used before while it is valid: its `jti` under its issuer, or, for an issuer whose
   tokens carry none (Kubernetes before 1.29), the digest of its signed part (header and
   payload; not the signature, which ECDSA lets anyone re-encode). Recorded in the Broker's
   store (Redis across replicas) until it expires, and only once every other check passed, so
   that only assertions the gateway acts on take room.

The answer is an access token the gateway issues itself (there is no provider sign-in to hand
over): ES256, signed with the route's key (`workload_keys`), `typ: at+jwt` (RFC 9068), `iss`
the route's resource origin and MCP path, `aud` the resource, `sub` the assertion's `sub`,
`workload_issuer` its `iss` (a `sub` is unique only within its issuer), `client_id` the `sub`
too (no client is registered: the workload is its own), `scope` the granted scopes, and an
`exp` no later than the assertion's own (at most an hour): the token never outlives the
credential it was issued for. No refresh token: a workload asks again with a fresh assertion.
The route's JWT stage trusts these tokens beside its providers', so its CEL rules, scopes and
tool rules apply to them as to any other caller's.

With a DPoP proof (`grant_proofs`, checked before the assertion is used up and recorded
just before) the token is bound to the proof's key: it carries `cnf: {"jkt": …}` (RFC 9449
§6.1) and the answer says `token_type: DPoP`; the route's JWT stage then takes it only with
proofs by that key. Without one it is a Bearer token."""

from __future__ import annotations

import hashlib
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from joserfc import jwt

from .. import audit
from ..asgi import Scope
from ..controlplane.snapshot import CompiledWorkloadIdentity, CompiledWorkloadIssuer
from ..dpop import ProofCheck
from ..oauth_scopes import scope_tokens
from ..urls import shown_url
from .errors import OAuthError
from .grant_proofs import grant_proof, record_proof
from .requests import scope_param
from .store import BrokerStore
from .workload_keys import ALGORITHM, WorkloadKeys

JWT_BEARER = "urn:ietf:params:oauth:grant-type:jwt-bearer"
# The longest an issued token lives (shorter when the assertion expires sooner).
MAX_LIFETIME = 3600
# As the route's JWT stage allows (dataplane.tokens.LEEWAY): an assertion is remembered as
# long as it could still be accepted.
LEEWAY = 60
MAX_JTI = 256
MAX_SUBJECT = 1024
STAGE = "oauth-endpoints"


class AssertionRefused(Exception):
    """The assertion is not a valid token of a trusted issuer; the message says why."""


class IssuerKeysPending(Exception):
    """The issuer's keys were never fetched yet: the request waits (503, retry)."""


@dataclass(frozen=True, slots=True)
class Verified:
    """An assertion whose signature and registered claims were checked, and its issuer."""

    issuer: CompiledWorkloadIssuer
    claims: Mapping[str, object]


class AssertionJudge(Protocol):
    async def verify(self, assertion: str) -> Verified:
        """The verified assertion; AssertionRefused or IssuerKeysPending otherwise."""
        ...

    def refusal(
        self, issuer: CompiledWorkloadIssuer, claims: Mapping[str, object], scope: Scope
    ) -> str | None:
        """None when the issuer's CEL authorization allows the workload; else why not."""
        ...


@dataclass(frozen=True, slots=True)
class WorkloadGrant:
    """A route's `jwt-bearer` grant: its settings, who checks assertions, and its key."""

    spec: CompiledWorkloadIdentity
    judge: AssertionJudge
    keys: WorkloadKeys


def subject_of(claims: Mapping[str, object]) -> str:
    """The workload the assertion names (`sub`), checked along with its `jti`."""
    sub = claims.get("sub")
    if not isinstance(sub, str) or not sub or len(sub) > MAX_SUBJECT:
        raise AssertionRefused("it has no sub claim naming the workload (a non-empty string)")
    jti = claims.get("jti")
    if jti is not None and (not isinstance(jti, str) or not jti or len(jti) > MAX_JTI):
        raise AssertionRefused(f"its jti is not a string of 1 to {MAX_JTI} characters")
    return sub


def lifetime_of(claims: Mapping[str, object], now: float) -> int:
    """Seconds the issued token lives: to the assertion's `exp`, at most MAX_LIFETIME."""
    exp = claims.get("exp")
    left = int(exp - now) if isinstance(exp, int | float) else 0
    if left < 1:
        raise AssertionRefused("it has expired; get a new one from its issuer")
    return min(left, MAX_LIFETIME)


def granted_scopes(requested: str | None, issuer: CompiledWorkloadIssuer) -> tuple[str, ...]:
    """The scopes the token carries: those asked for, all of them allowed (none asked: every
    scope the issuer grants)."""
    allowed = issuer.scopes
    asked = scope_tokens(scope_param(requested))
    if not asked:
        return allowed
    extra = [s for s in asked if s not in allowed]
    if extra:
        grants = " ".join(allowed) if allowed else "no scopes"
        raise OAuthError(
            400,
            "invalid_scope",
            f"scope {' '.join(extra)!r} is not granted to workloads of issuer "
            f"{shown_url(issuer.provider.issuer)} (it grants {grants}); ask for fewer, or "
            "leave scope out",
        )
    return tuple(s for s in allowed if s in asked)


def replay_key(assertion: str, issuer: str, claims: Mapping[str, object]) -> str:
    """What an assertion is remembered by: its issuer and `jti`, else its signed part."""
    jti = claims.get("jti")
    if isinstance(jti, str):
        identity = orjson.dumps(["jti", issuer, jti])
    else:
        identity = orjson.dumps(["signed", assertion.rpartition(".")[0]])
    return hashlib.sha256(identity).hexdigest()


def token_claims(
    spec: CompiledWorkloadIdentity,
    verified: Verified,
    scopes: tuple[str, ...],
    now: int,
    lifetime: int,
) -> dict[str, Any]:
    """The issued access token's claims (RFC 9068)."""
    sub = verified.claims["sub"]
    claims: dict[str, Any] = {
        "iss": spec.token_issuer,
        "sub": sub,
        "aud": spec.audience,
        "iat": now,
        "nbf": now,
        "exp": now + lifetime,
        "jti": secrets.token_urlsafe(16),
        "client_id": sub,
        "workload_issuer": verified.issuer.provider.issuer,
    }
    if scopes:
        claims["scope"] = " ".join(scopes)
    return claims


async def issue(
    grant: WorkloadGrant,
    store: BrokerStore,
    scope: Scope,
    form: Mapping[str, str],
    proofs: ProofCheck,
    index: int,
) -> dict[str, Any]:
    """The token response for a `jwt-bearer` request, or OAuthError saying what to fix;
    `proofs` checks its DPoP proof with the rules at `index` (the gateway's as issuer)."""
    assertion = form.get("assertion", "")
    if not assertion:
        raise OAuthError(
            400,
            "invalid_request",
            "assertion is required: the workload's JWT from a trusted issuer (RFC 7523), "
            "e.g. its Kubernetes service account token",
        )
    proof, _ = await grant_proof(proofs, scope, index)
    now = time.time()
    verified, sub, lifetime = await _verified(grant, assertion, now)
    issuer = verified.issuer
    who = {"iss": audit.capped_id(issuer.provider.issuer), "sub": audit.capped_id(sub)}
    audit.acting_user(scope, who)
    _authorize(grant, verified, scope)
    scopes = granted_scopes(form.get("scope"), issuer)
    if proof is not None:
        await record_proof(proofs, proof, index)
    await _first_use(store, assertion, verified, now)
    signing = await grant.keys.signing()
    claims = token_claims(grant.spec, verified, scopes, int(now), lifetime)
    if proof is not None:
        claims["cnf"] = {"jkt": proof.jkt}
        audit.dpop_bound(scope, proof.jkt)
    header = {"alg": ALGORITHM, "typ": "at+jwt", "kid": signing.kid}
    token = jwt.encode(header, claims, signing.key, algorithms=[ALGORITHM])
    bound = "; DPoP-bound" if proof is not None else ""
    audit.event(
        scope,
        "workload-token-issued",
        detail=f"jwt-bearer assertion of issuer {shown_url(issuer.provider.issuer)} for "
        f"{audit.capped_id(sub)}: scopes [{' '.join(scopes)}], expires in {lifetime} s{bound}",
    )
    answer: dict[str, Any] = {
        "access_token": token,
        "token_type": "DPoP" if proof is not None else "Bearer",
        "expires_in": lifetime,
    }
    if scopes:
        answer["scope"] = " ".join(scopes)
    return answer


async def _verified(grant: WorkloadGrant, assertion: str, now: float) -> tuple[Verified, str, int]:
    """The assertion verified, its workload (`sub`) and the issued token's lifetime;
    OAuthError saying what is wrong."""
    try:
        verified = await grant.judge.verify(assertion)
        return verified, subject_of(verified.claims), lifetime_of(verified.claims, now)
    except AssertionRefused as exc:
        raise OAuthError(400, "invalid_grant", f"the assertion is not accepted: {exc}") from None
    except IssuerKeysPending as exc:
        raise OAuthError(
            503, "temporarily_unavailable", str(exc), headers=[(b"retry-after", b"1")]
        ) from None


def _authorize(grant: WorkloadGrant, verified: Verified, scope: Scope) -> None:
    """The issuer's CEL rule: the workload is told it is refused, the audit trail which rule
    refused (the rules themselves are the operator's, not the workload's business)."""
    why = grant.judge.refusal(verified.issuer, verified.claims, scope)
    if why is None:
        return
    audit.deny(scope, STAGE, f"{verified.issuer.label}.authorization: {why}")
    raise OAuthError(
        400,
        "unauthorized_client",
        f"workload {str(verified.claims['sub'])[:200]!r} of issuer "
        f"{shown_url(verified.issuer.provider.issuer)} may not get tokens from this server "
        f"(the rules of workloadIdentity.issuers[{verified.issuer.provider.index}] refuse it)",
    )


async def _first_use(store: BrokerStore, assertion: str, verified: Verified, now: float) -> None:
    """Record the assertion's use while it is valid; refused when it was used already."""
    claims = verified.claims
    exp = claims["exp"]
    assert isinstance(exp, int | float)  # lifetime_of checked it
    ttl = max(int(exp + LEEWAY - now) + 1, 1)
    key = replay_key(assertion, verified.issuer.provider.issuer, claims)
    if not await store.first_use("assertion", key, ttl):
        what = "its jti" if isinstance(claims.get("jti"), str) else "the assertion itself"
        raise OAuthError(
            400,
            "invalid_grant",
            f"the assertion was used already ({what}); each assertion gets one token: get a "
            "new one from its issuer (Kubernetes: kubectl create token, or the kubelet's "
            "next rotation of a projected token)",
        )
