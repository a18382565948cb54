"""The key a Broker route signs workload access tokens with, and the keyset that verifies them.

For a workload there is no provider sign-in whose tokens the gateway could hand over, so the
gateway issues an access token of its own. It signs it with an ES256 key derived from the Broker
store's secret (HKDF-SHA256, with the route key as context): every replica sharing the store
derives the same key with nothing more to store or distribute, a route's key is its own (a token
minted for one route never verifies at another), and the private key never leaves memory. The
public half is the route's JWKS (`<mcp path>/oauth/jwks`), and the keyset the route's own JWT
stage checks these tokens with, beside its providers'.

The key is derived once per process and route (`serving.process_state` keeps it across reloads), as
soon as the event loop runs: at once with an in-memory store, after one read of Redis otherwise.
Until then a workload token waits as one whose provider's keys are not yet fetched does (503
with `Retry-After`), and the wait starts the derivation if nothing did."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from dataclasses import dataclass
from typing import Any

from cryptography.hazmat.primitives import hashes
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.hazmat.primitives.kdf.hkdf import HKDF
from joserfc.jwk import ECKey
from redis.exceptions import RedisError

from ..controlplane.keys import Keyset, parse_jwks
from ..redis_clients import RedisUnavailable
from .store import BrokerStore

log = logging.getLogger("mcp_oauth_gateway.broker")

ALGORITHM = "ES256"
_SALT = b"mcp-oauth-gateway workload access tokens v1"
# The order of P-256's group: a private scalar is in [1, n-1].
_ORDER = 0xFFFFFFFF00000000FFFFFFFFFFFFFFFFBCE6FAADA7179E84F3B9CAC2FC632551


@dataclass(frozen=True, slots=True)
class SigningKey:
    """The private key (joserfc's) and what is published of it."""

    key: ECKey
    kid: str
    public: dict[str, Any]


def derive_key(secret: bytes, route: str) -> SigningKey:
    """The route's signing key from the store's secret (pure: the same on every replica)."""
    seed = HKDF(
        algorithm=hashes.SHA256(), length=48, salt=_SALT, info=route.encode("utf-8")
    ).derive(secret)
    # 384 bits reduced modulo a 256-bit order: the bias is below 2^-128 (FIPS 186-5 A.2.1).
    scalar = int.from_bytes(seed, "big") % (_ORDER - 1) + 1
    key = ECKey.import_key(ec.derive_private_key(scalar, ec.SECP256R1()))
    kid = key.thumbprint()
    public = {**key.as_dict(private=False), "kid": kid, "use": "sig", "alg": ALGORITHM}
    return SigningKey(key, kid, public)


class WorkloadKeys:
    """One route's workload-token key: derived from the store's secret when first needed, then
    kept. Read by the token endpoint (to sign) and the route's JWT stage (to verify)."""

    def __init__(self, store: BrokerStore, route: str):
        self.store = store
        self.route = route
        self.shown = "the gateway's workload-token key"
        self._signing: SigningKey | None = None
        self._keyset: Keyset | None = None
        self._deriving: asyncio.Task[None] | None = None
        self.warm()

    async def signing(self) -> SigningKey:
        """The key (RedisUnavailable while the store's secret cannot be read)."""
        if self._signing is None:
            self._set(derive_key(await self.store.secret(), self.route))
        assert self._signing is not None
        return self._signing

    def _set(self, signing: SigningKey) -> None:
        if self._signing is None:
            self._signing = signing
            self._keyset = parse_jwks({"keys": [signing.public]}, version=1)

    @property
    def keyset(self) -> Keyset | None:
        """The public keyset, or None until the key is derived (which this starts)."""
        if self._keyset is None:
            self._derive_soon()
        return self._keyset

    @property
    def available(self) -> bool:
        """Whether the key is derived."""
        return self._keyset is not None

    def warm(self) -> None:
        """Start deriving the key in the background when it is not yet (nothing without a
        running event loop: the process's start, or the next request, starts it)."""
        if self._signing is None:
            self._derive_soon()

    def _derive_soon(self) -> None:
        """Start deriving the key in the background (a request's JWT stage cannot wait)."""
        if self._deriving is not None and not self._deriving.done():
            return
        with contextlib.suppress(RuntimeError):  # no running loop: the next request starts it
            self._deriving = asyncio.get_running_loop().create_task(self._derive())

    async def _derive(self) -> None:
        try:
            await self.signing()
        except (RedisUnavailable, RedisError, OSError, RuntimeError) as exc:
            # Tried again by the next request that needs it; until then such tokens wait.
            log.warning("the workload-token key is not yet derived: %s", exc)

    async def refetch_for_unknown_kid(self) -> bool:
        """Nothing to fetch: the key never changes while the store's secret stays."""
        return False

    async def jwks(self) -> dict[str, Any]:
        """The JWKS document published for the route."""
        return {"keys": [(await self.signing()).public]}
