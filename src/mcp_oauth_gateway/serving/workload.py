"""What the Broker's `jwt-bearer` grant is given of the data plane: the gateway's own JWT
verification over the trusted workload issuers' keysets (as the JWT stage verifies a provider's
tokens: issuer picked by `iss`, keys fetched and refetched for an unknown `kid`, 60 s leeway),
and the CEL decision over the verified assertion (as the authorization stage decides)."""

from __future__ import annotations

from collections.abc import Mapping

from ..asgi import Scope
from ..broker.workload_grant import AssertionRefused, IssuerKeysPending, Verified
from ..controlplane.control import Keyholder
from ..controlplane.snapshot import CompiledWorkloadIdentity, CompiledWorkloadIssuer
from ..dataplane.authn import JwtAuthentication, KeysetPending
from ..dataplane.authz import decide, explain, request_variables
from ..dataplane.tokens import TokenError

# Assertions kept verified per route: each is used once, so the cache only spares a replay
# (refused anyway) its signature check.
CACHED_ASSERTIONS = 64


class WorkloadAssertions:
    """Checks assertions against the issuers of one policy's workloadIdentity."""

    def __init__(self, spec: CompiledWorkloadIdentity, keysets: Mapping[str, Keyholder]):
        self.by_issuer = {trusted.provider.issuer: trusted for trusted in spec.issuers}
        self.verifier = JwtAuthentication(
            _verifies_only,
            [(t.provider, keysets[t.provider.keyset.url]) for t in spec.issuers],
            None,
            False,
            cache_entries=CACHED_ASSERTIONS,
        )

    async def verify(self, assertion: str) -> Verified:
        """The verified assertion and its issuer."""
        try:
            claims = await self.verifier.verify(assertion)
        except KeysetPending as exc:
            raise IssuerKeysPending(str(exc)) from None
        except TokenError as exc:
            raise AssertionRefused(str(exc).replace(assertion, "[assertion]")) from None
        issuer = claims.get("iss")
        trusted = self.by_issuer.get(issuer) if isinstance(issuer, str) else None
        assert trusted is not None  # verified against the rules of the issuer its iss names
        return Verified(trusted, claims)

    def refusal(
        self, issuer: CompiledWorkloadIssuer, claims: Mapping[str, object], scope: Scope
    ) -> str | None:
        """None when the issuer's rules allow the workload; else which rule refused."""
        activation: dict[str, object] = {"jwt": dict(claims), "request": request_variables(scope)}
        if decide(issuer.authorization, activation):
            return None
        return explain(issuer.authorization, activation)


async def _verifies_only(scope: object, receive: object, send: object) -> None:
    raise AssertionError("the workload assertions' verifier only verifies")
