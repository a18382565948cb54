"""RFC 6750 `WWW-Authenticate` challenges, written one way for the 401 and the 403, with the
RFC 9449 `DPoP` challenge beside the `Bearer` one where a route accepts DPoP."""

from __future__ import annotations

from dataclasses import dataclass

from ..asgi import Headers, Scope, Send, quoted_string, request_origin, send_error
from ..dpop import dpop_challenge

INVALID_TOKEN = "invalid_token"


def challenge(
    resource_metadata: str | None,
    scope: str | None,
    error: str | None,
    code: str = INVALID_TOKEN,
) -> bytes:
    """`Bearer` first (TS clients read only the first token), then error, metadata, scope."""
    params = []
    if error:
        params.append(f'error="{code}", error_description="{quoted_string(error)}"')
    if resource_metadata:
        params.append(f'resource_metadata="{resource_metadata}"')
    if scope:
        params.append(f'scope="{scope}"')
    return ("Bearer " + ", ".join(params)).strip().encode("latin-1", "replace")


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why a request's credentials were refused: the RFC 6750 / RFC 9449 error code, the
    scheme they came with (the error goes on that scheme's challenge, RFC 9449 §7.2), and the
    nonce the client must use from now on (`use_dpop_nonce`)."""

    why: str
    code: str = INVALID_TOKEN
    scheme: str = "Bearer"
    nonce: str | None = None


@dataclass(frozen=True, slots=True)
class Challenger:
    """What a route's 401 names: its metadata path, the scopes to sign in with, and the
    algorithms a DPoP proof may use (empty: the route takes no DPoP tokens)."""

    prm_path: str | None
    scope_hint: str | None
    dpop_algs: tuple[str, ...] = ()

    def metadata_url(self, scope: Scope) -> str | None:
        """The protected resource metadata URL as this request reaches the gateway."""
        return request_origin(scope) + self.prm_path if self.prm_path else None

    async def unauthorized(
        self, scope: Scope, send: Send, why: str, token_sent: bool, refusal: Refusal | None = None
    ) -> None:
        """401 asking for a token (`error=` only when one was sent, as RFC 6750 says), on the
        challenge of the scheme it was sent with."""
        refusal = refusal or Refusal(why)
        metadata = self.metadata_url(scope)
        on_dpop = refusal.scheme == "DPoP" and token_sent
        bearer_error = why if token_sent and not on_dpop else None
        headers: Headers = [
            (b"www-authenticate", challenge(metadata, self.scope_hint, bearer_error, refusal.code))
        ]
        if self.dpop_algs:
            error, description = (refusal.code, why) if on_dpop else (None, None)
            value = dpop_challenge(self.dpop_algs, error, description, metadata, self.scope_hint)
            headers.append((b"www-authenticate", value))
        if refusal.nonce is not None:
            headers.append((b"dpop-nonce", refusal.nonce.encode("ascii")))
        await send_error(send, 401, refusal.code, why, headers)
