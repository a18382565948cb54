"""DPoP proofs at the Broker's token endpoint (RFC 9449 §4.3, §5, §10), every grant alike: a
`DPoP` header is checked as the route's resource server checks one (`htm` POST, `htu` the
token endpoint's URL as the client used it, `iat` within the provider's window, its
algorithms, its nonces) but with no access token (`ath` is not asked for), and its `jti` is
remembered in the same replay cache. The provider is the one whose token the grant gives: the
code's, the refresh token's, or the gateway itself for a workload.

What a grant asks of its proof, besides being valid:
- a provider with `dpop: Disabled`: nothing, the proof is not read and the token is a Bearer
  token (§5 lets an authorization server issue one), unless the grant is bound to a key;
- `dpop: Required`: a proof, since the route refuses the unbound token it would otherwise get;
- a code whose authorization request named `dpop_jkt` (§10): a proof by that key;
- a refresh token bound to a key (§5, public clients): a proof by that key, else
  `invalid_grant` (the token stays its holder's).

Every refusal is 400 `invalid_dpop_proof` naming the check, or `use_dpop_nonce` with a
`DPoP-Nonce` header. The grant is judged first and the proof's `jti` recorded last
(`record_proof`), so that a request refused for anything else uses up no proof and a proof
refused uses up no code or refresh token (the caller gives them back)."""

from __future__ import annotations

from ..asgi import Scope
from ..dpop import (
    USE_DPOP_NONCE,
    DpopError,
    Proof,
    ProofCheck,
    ReplayCacheFull,
    proof_values,
)
from .errors import OAuthError

INVALID_DPOP_PROOF = "invalid_dpop_proof"
REQUIRED = (
    "this MCP server accepts DPoP-bound tokens only; send a DPoP proof with the token request "
    "(RFC 9449 §5)"
)
BOUND_REFRESH = "the refresh token is bound to a DPoP key; send a proof signed by it"
NAMED_KEY = (
    "the authorization request named a DPoP key (dpop_jkt): send a DPoP proof signed by it "
    "with the token request"
)
OTHER_KEY = (
    "the DPoP proof is signed by another key than the one the authorization request named "
    "(dpop_jkt); sign it with that key"
)


async def grant_proof(
    proofs: ProofCheck,
    scope: Scope,
    index: int,
    dpop_jkt: str | None = None,
    refresh_jkt: str | None = None,
) -> tuple[Proof | None, str | None]:
    """The token request's proof for a token of provider `index` (None: no proof to bind to,
    or one not read), checked but not recorded, and a fresh nonce for the client if one is
    due; OAuthError saying what to fix. `dpop_jkt`: the key the authorization request named;
    `refresh_jkt`: the key the refresh token is bound to."""
    values = proof_values(scope)
    settings = proofs.settings[index]
    if not values:
        if refresh_jkt is not None:
            raise OAuthError(400, "invalid_grant", BOUND_REFRESH)
        if dpop_jkt is not None:
            raise OAuthError(400, INVALID_DPOP_PROOF, NAMED_KEY)
        if settings.mode == "Required":
            raise OAuthError(400, INVALID_DPOP_PROOF, REQUIRED)
        return None, None
    if not settings.enabled and refresh_jkt is None and dpop_jkt is None:
        return None, None
    try:
        proof, fresh = await proofs.verify(scope, values, index)
    except DpopError as exc:
        raise refusal(exc) from None
    if refresh_jkt is not None and proof.jkt != refresh_jkt:
        raise OAuthError(400, "invalid_grant", BOUND_REFRESH)
    if dpop_jkt is not None and proof.jkt != dpop_jkt:
        raise OAuthError(400, INVALID_DPOP_PROOF, OTHER_KEY)
    return proof, fresh


async def record_proof(proofs: ProofCheck, proof: Proof, index: int) -> None:
    """Remember the proof as used: 400 when it was, 503 when it cannot be remembered
    (RedisUnavailable passes through: the Broker answers it 503 too)."""
    try:
        await proofs.record(proof, index)
    except DpopError as exc:
        raise refusal(exc) from None
    except ReplayCacheFull as exc:
        raise OAuthError(
            503,
            "temporarily_unavailable",
            "the gateway cannot record DPoP proofs right now (each is accepted once); try "
            "again shortly",
            headers=[(b"retry-after", str(exc.retry_after).encode())],
        ) from None


def refusal(exc: DpopError) -> OAuthError:
    """The token endpoint's answer to a refused proof (§5: 400; §8: a nonce to use)."""
    headers = None
    if exc.error == USE_DPOP_NONCE and exc.nonce is not None:
        headers = [(b"dpop-nonce", exc.nonce.encode("ascii"))]
    return OAuthError(400, exc.error, exc.description, headers=headers)


def binds(proofs: ProofCheck, proof: Proof | None, index: int) -> bool:
    """Whether the token of provider `index` is bound to the proof's key (not under
    `Disabled`, whose tokens the route takes as Bearer tokens only)."""
    return proof is not None and proofs.settings[index].enabled
