"""DPoP (RFC 9449): proofs of possession of a key, checked where a resource server and the
Broker's token endpoint need them. Pure decisions (`verify_proof`, `htu_of`, `dpop_challenge`,
`DpopNonces`) and the one I/O they need, remembering each proof's `jti` (`check_replay` with
a `MemoryReplayCache` or a `RedisReplayCache`); `ProofCheck` puts them together for a server."""

from .bound_tokens import SEALED_PREFIX, BoundToken, SealError, TokenSeal
from .challenge import dpop_challenge
from .errors import INVALID_DPOP_PROOF, INVALID_TOKEN, USE_DPOP_NONCE, DpopError
from .header import ASYMMETRIC_ALGORITHMS
from .htu import htu_of, normalize_htu
from .nonces import DEFAULT_NONCE_PERIOD, DpopNonces
from .proof_check import (
    NonceKey,
    ProofCheck,
    nonce_context,
    offered_algorithms,
    proof_values,
    request_htu,
)
from .proofs import (
    DEFAULT_IAT_WINDOW,
    MAX_JTI_LENGTH,
    MAX_PROOF_BYTES,
    Proof,
    ProofRules,
    access_token_hash,
    verify_proof,
)
from .replay import (
    MemoryReplayCache,
    RedisReplayCache,
    ReplayCache,
    ReplayCacheFull,
    check_replay,
    replay_key,
    replay_ttl,
)

__all__ = [
    "ASYMMETRIC_ALGORITHMS",
    "DEFAULT_IAT_WINDOW",
    "DEFAULT_NONCE_PERIOD",
    "INVALID_DPOP_PROOF",
    "INVALID_TOKEN",
    "MAX_JTI_LENGTH",
    "MAX_PROOF_BYTES",
    "SEALED_PREFIX",
    "USE_DPOP_NONCE",
    "BoundToken",
    "DpopError",
    "DpopNonces",
    "MemoryReplayCache",
    "NonceKey",
    "Proof",
    "ProofCheck",
    "ProofRules",
    "RedisReplayCache",
    "ReplayCache",
    "ReplayCacheFull",
    "SealError",
    "TokenSeal",
    "access_token_hash",
    "check_replay",
    "dpop_challenge",
    "htu_of",
    "nonce_context",
    "normalize_htu",
    "offered_algorithms",
    "proof_values",
    "replay_key",
    "replay_ttl",
    "request_htu",
    "verify_proof",
]
