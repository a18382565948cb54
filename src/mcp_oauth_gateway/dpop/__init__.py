"""DPoP (RFC 9449): proofs of possession of a key, checked where a resource server and the
Broker's token endpoint need them. Pure decisions: `verify_proof`, `htu_of`, `dpop_challenge`,
`DpopNonces`."""

from .challenge import dpop_challenge
from .errors import INVALID_DPOP_PROOF, INVALID_TOKEN, USE_DPOP_NONCE, DpopError
from .header import ASYMMETRIC_ALGORITHMS
from .htu import htu_of, normalize_htu
from .nonces import DEFAULT_NONCE_PERIOD, DpopNonces
from .proofs import (
    DEFAULT_IAT_WINDOW,
    MAX_JTI_LENGTH,
    MAX_PROOF_BYTES,
    Proof,
    ProofRules,
    access_token_hash,
    verify_proof,
)

__all__ = [
    "ASYMMETRIC_ALGORITHMS",
    "DEFAULT_IAT_WINDOW",
    "DEFAULT_NONCE_PERIOD",
    "INVALID_DPOP_PROOF",
    "INVALID_TOKEN",
    "MAX_JTI_LENGTH",
    "MAX_PROOF_BYTES",
    "USE_DPOP_NONCE",
    "DpopError",
    "DpopNonces",
    "Proof",
    "ProofRules",
    "access_token_hash",
    "dpop_challenge",
    "htu_of",
    "normalize_htu",
    "verify_proof",
]
