"""The refusals of DPoP (RFC 9449 §5, §7.1, §8, §9): one exception, its code and what to fix."""

from __future__ import annotations

# A proof that is missing, malformed or fails a check (§4.3).
INVALID_DPOP_PROOF = "invalid_dpop_proof"
# The server wants a nonce in the proof, or the one given is stale (§8, §9).
USE_DPOP_NONCE = "use_dpop_nonce"
# The access token is bound to another key than the proof's (§7.1).
INVALID_TOKEN = "invalid_token"

# How much of a value the client sent is quoted back in a description.
_SHOWN = 60


class DpopError(Exception):
    """A DPoP refusal: `error` is the RFC 9449 code, `description` tells the client exactly what
    to fix, and `nonce` (with `use_dpop_nonce` only) goes in the `DPoP-Nonce` response header."""

    def __init__(self, error: str, description: str, nonce: str | None = None):
        super().__init__(f"{error}: {description}")
        self.error = error
        self.description = description
        self.nonce = nonce


def refused(description: str) -> DpopError:
    """An `invalid_dpop_proof` refusal."""
    return DpopError(INVALID_DPOP_PROOF, description)


def shown(value: object) -> str:
    """A value the client sent, quoted short enough for a description."""
    text = repr(value)
    return text if len(text) <= _SHOWN else text[:_SHOWN] + "…"
