"""Requests with DPoP for the JWT authentication stage: a provider per `dpop` mode, tokens bound
to a client's key (`cnf.jkt`), proofs for a request (made as a client makes them, or bent as an
attacker would), and the stage with a clock, a replay cache and a nonce key of the test's."""

from __future__ import annotations

import dataclasses
import uuid
from typing import Any

from joserfc.jwk import Key

from mcp_oauth_gateway.controlplane.jwks import InlineKeyset
from mcp_oauth_gateway.controlplane.snapshot import (
    CompiledDpop,
    CompiledMcp,
    CompiledProvider,
    KeysetSource,
)
from mcp_oauth_gateway.dataplane.authn import JwtAuthentication
from mcp_oauth_gateway.dataplane.dpop_binding import ProofCheck, SealedTokens
from mcp_oauth_gateway.dpop import MemoryReplayCache, ReplayCache, access_token_hash
from support import mint
from unit.dpop.dpop_support import KEYS, NOW, header, public_jwk, rfc7638, sign
from unit.tokens_support import ISSUER, KEY, KEYSET, compiled_mcp, good

from .harness import Inner

URL = "http://gw.test/mcp"
CLIENT_KEY = KEYS["ES256"]
JKT = rfc7638(public_jwk(CLIENT_KEY))
NONCE_SECRET = b"n" * 32


def provider(mode: str = "Allowed", **settings: Any) -> CompiledProvider:
    """The test issuer's provider with this `dpop` mode and proof settings."""
    return CompiledProvider(
        ISSUER,
        frozenset({"mcp-public"}),
        KeysetSource("inline", 0.0),
        "http://idp/.well-known/openid-configuration",
        dpop=CompiledDpop(mode, **settings),  # type: ignore[arg-type]
    )


def bound_token(jkt: str = JKT, **claims: object) -> str:
    """An access token of the test issuer bound to the key with thumbprint `jkt`."""
    return mint(KEY, good(cnf={"jkt": jkt}, **claims))


def plain_token(**claims: object) -> str:
    """An unbound (bearer) access token of the test issuer."""
    return mint(KEY, good(**claims))


def proof(
    token: str | None,
    method: str = "POST",
    htu: str = URL,
    key: Key = CLIENT_KEY,
    alg: str = "ES256",
    head: dict[str, Any] | None = None,
    **changes: Any,
) -> bytes:
    """A proof for `method` to `htu` at NOW with `token`'s hash, signed by `key`; `changes`
    replace claims (`name=None` removes one)."""
    claims: dict[str, Any] = {"jti": str(uuid.uuid4()), "htm": method, "htu": htu, "iat": int(NOW)}
    if token is not None:
        claims["ath"] = access_token_hash(token)
    claims.update(changes)
    claims = {name: value for name, value in claims.items() if value is not None}
    return sign(head or header(alg, key), claims, key, alg).encode()


def dpop(token: str, *proofs: bytes) -> list[tuple[bytes, bytes]]:
    """The headers of a DPoP request: the token with the DPoP scheme, and each proof."""
    return [(b"authorization", f"DPoP {token}".encode()), *((b"dpop", p) for p in proofs)]


@dataclasses.dataclass
class Clock:
    """The time the stage's proof checks see (the token's own checks use the real time)."""

    now: float = NOW

    def __call__(self) -> float:
        return self.now


def stage(
    inner: Inner,
    *providers: CompiledProvider,
    mode: str = "Strict",
    replay: ReplayCache | None = None,
    clock: Clock | None = None,
    mcp: CompiledMcp | None = None,
    forward_token: bool = False,
    context: str = "resource-server default/policy",
    sealed: SealedTokens | None = None,
) -> JwtAuthentication:
    """The stage for `providers` (default: one Allowed), with its own replay cache unless
    one is shared, nonces keyed by NONCE_SECRET, and the proofs judged at `clock`; `sealed`:
    the Broker's DPoP-bound tokens it opens."""
    chosen = providers or (provider(),)
    cache = replay if replay is not None else MemoryReplayCache()

    async def nonce_key() -> bytes:
        return NONCE_SECRET

    check = ProofCheck(
        [p.dpop for p in chosen], lambda: cache, nonce_key, context, clock or Clock()
    )
    keys = InlineKeyset(KEYSET)
    return JwtAuthentication(
        inner,
        [(p, keys) for p in chosen],  # type: ignore[misc]
        mcp if mcp is not None else compiled_mcp(None),
        forward_token,
        None,
        mode,
        proofs=check,
        sealed=sealed,
    )
