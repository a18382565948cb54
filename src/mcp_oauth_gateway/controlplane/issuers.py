"""One identity across issuers: `sub` is unique only within its issuer (OpenID Connect Core §2),
so alice at one provider and alice at another are two people. With several providers on a policy,
what the gateway tells a backend about who calls must name the issuer too, or the policy is
refused at load; a backend cannot tell the two apart after the fact."""

from __future__ import annotations

from ..resources.models import GatewayPolicy
from .cel import referenced_claims

IDENTITY_PATH = "spec.backend.credentials.secretHeader.identity.claims"
TARGETS_PATH = "spec.backend.credentials.targets"
SET_PATH = "spec.traffic.transformation.request.set"
WHY = "sub is unique only within its issuer"


def issuer_problems(policy: GatewayPolicy, problems: list[str]) -> None:
    """Add a problem for each way the policy would hand a backend a subject without its issuer."""
    jwt_spec = policy.spec.traffic.jwt_authentication
    providers = len(jwt_spec.providers) if jwt_spec else 0
    if providers < 2:
        return  # one issuer: its subjects are unique
    identity_problems(policy, providers, problems)
    transformation_problems(policy, providers, problems)


def identity_problems(policy: GatewayPolicy, providers: int, problems: list[str]) -> None:
    """The identity header is who calls: it names the issuer, whatever claims it carries (every
    claim is its provider's word). So for each target's own identity header too."""
    credentials = policy.spec.backend.credentials if policy.spec.backend else None
    if credentials is None:
        return
    headers = [(IDENTITY_PATH, credentials.secret_header)]
    headers += [
        (f"{TARGETS_PATH}[{i}].secretHeader.identity.claims", entry.secret_header)
        for i, entry in enumerate(credentials.targets or [])
    ]
    for path, secret in headers:
        identity = secret.identity if secret else None
        if identity is None or "iss" in identity.claims:
            continue
        problems.append(
            f"{path} [{', '.join(identity.claims)}] has no iss, but the policy has "
            f"{providers} providers: {WHY}, and so is every claim a provider asserts (alice at "
            "one provider and alice at another are two people, who would reach the backend as "
            f"one); add iss to {path}"
        )


def transformation_problems(policy: GatewayPolicy, providers: int, problems: list[str]) -> None:
    """Headers set from `jwt.sub` tell the backend who calls: one of the headers set must carry
    the issuer as well (in the same value or beside it)."""
    transformation = policy.spec.traffic.transformation
    if transformation is None:
        return
    read = [referenced_claims(header.value) for header in transformation.request.set]
    # None: the value reads `jwt` as a whole, which holds the issuer.
    if any(claims is None or "iss" in claims for claims in read):
        return
    for i, claims in enumerate(read):
        if claims is not None and "sub" in claims:
            problems.append(
                f"{SET_PATH}[{i}].value reads jwt.sub but no header set reads jwt.iss, and the "
                f"policy has {providers} providers: {WHY} (alice at one provider and alice at "
                "another would reach the backend as one); add jwt.iss to this value, or set "
                "another header to jwt.iss"
            )
