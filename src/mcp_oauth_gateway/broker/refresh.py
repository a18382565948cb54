"""Broker refresh tokens: bound to the client they were issued to, and rotated on every use.

Clients never see the provider's refresh token. They get an opaque gateway token that stands for
it, bound to their client id, and a new one at each refresh (OAuth 2.1 §4.3.1: refresh tokens of
public clients must be sender-constrained or rotated; this works whether or not the provider
rotates). A token that was rotated away and comes back means two parties hold it: the whole chain
(the "family") is revoked, so the legitimate client signs in again and the thief gets nothing.

Only SHA-256 digests of gateway tokens are used as store keys, so a store dump reveals no token
that a client could present.

A refresh token issued in answer to a request with a DPoP proof is bound to its key (`jkt`,
RFC 9449 §5: every Broker client is a public client), and so is every token it is rotated into:
each refresh must then carry a proof by that key (`grant_proofs`).
"""

from __future__ import annotations

import dataclasses
import hashlib
import secrets
import time
from dataclasses import dataclass
from typing import Any

from ..audit import identity
from .store import BrokerStore, give_back

DEFAULT_TTL = 30 * 86400  # when the provider does not say (authentik's default validity)
MAX_TTL = 365 * 86400


@dataclass(frozen=True, slots=True)
class RefreshGrant:
    """What a gateway refresh token stands for."""

    digest: str
    client_id: str
    provider_token: str
    family: str
    expires_at: float
    idp: int = 0  # the provider (providers[] index) the provider token belongs to
    # Who signed in (`iss`, `sub`), for the audit lines of a refresh, a reuse or a revocation,
    # whose requests carry no token naming them. None for records stored before it was kept.
    user: dict[str, str] | None = None
    # The thumbprint of the DPoP key the token is bound to (None: not bound).
    jkt: str | None = None

    def as_record(self) -> dict[str, Any]:
        """The stored form."""
        record: dict[str, Any] = {
            "client_id": self.client_id,
            "provider": self.provider_token,
            "family": self.family,
            "expires_at": self.expires_at,
            "idp": self.idp,
        }
        if self.user is not None:
            record["user"] = self.user
        if self.jkt is not None:
            record["jkt"] = self.jkt
        return record

    @classmethod
    def of(cls, key: str, record: dict[str, Any]) -> RefreshGrant:
        """The grant a stored record under `key` stands for."""
        return cls(
            key,
            record["client_id"],
            record["provider"],
            record["family"],
            float(record["expires_at"]),
            int(record.get("idp", 0)),
            user_of(record),
            jkt_of(record),
        )


def user_of(record: dict[str, Any]) -> dict[str, str] | None:
    """The `user` a stored record keeps, when it is one (`iss`, `sub` strings)."""
    user = record.get("user")
    if not isinstance(user, dict):
        return None
    kept = {k: v for k, v in user.items() if k in ("iss", "sub") and isinstance(v, str)}
    return kept or None


def jkt_of(record: dict[str, Any]) -> str | None:
    """The key a stored record's token is bound to. A value that is not a thumbprint's string
    binds it to a key no proof has, rather than to none."""
    if "jkt" not in record:
        return None
    jkt = record["jkt"]
    return jkt if isinstance(jkt, str) and jkt else "unreadable"


class RefreshReused(Exception):
    """A rotated-away refresh token came back; its family has been revoked."""

    def __init__(self, user: dict[str, str] | None = None):
        super().__init__("a rotated-away refresh token was presented")
        self.user = user


def digest(token: str) -> str:
    """The store key of a gateway refresh token."""
    return hashlib.sha256(token.encode("utf-8", "surrogatepass")).hexdigest()


def lifetime(tokens: dict[str, Any]) -> int:
    """How long the refresh token lives: the provider's `refresh_expires_in` when it gives one."""
    given = tokens.get("refresh_expires_in")
    if isinstance(given, int) and not isinstance(given, bool) and given > 0:
        return min(given, MAX_TTL)
    return DEFAULT_TTL


class RefreshTokens:
    """Issues, redeems and revokes gateway refresh tokens in the broker store."""

    def __init__(self, store: BrokerStore):
        self.store = store

    async def issue(
        self,
        client_id: str,
        tokens: dict[str, Any],
        family: str | None = None,
        idp: int = 0,
        user: dict[str, str] | None = None,
        jkt: str | None = None,
    ) -> dict[str, Any]:
        """`tokens` with the provider's refresh token replaced by a new gateway token (bound
        to DPoP key `jkt`, when given); `user` is who signed in when the provider's answer
        does not say (a refresh without tokens naming a subject)."""
        provider_token = tokens.get("refresh_token")
        if not isinstance(provider_token, str) or not provider_token:
            return tokens
        token = secrets.token_urlsafe(32)
        ttl = lifetime(tokens)
        grant = RefreshGrant(
            digest(token),
            client_id,
            provider_token,
            family or secrets.token_urlsafe(16),
            time.time() + ttl,
            idp,
            identity(tokens) or user,
            jkt,
        )
        await self.store.put("refresh", grant.digest, grant.as_record(), ttl)
        await self.store.put("refresh-family", grant.family, {"current": grant.digest}, ttl)
        return {**tokens, "refresh_token": token}

    async def take(self, token: str) -> RefreshGrant | None:
        """Claim a token for one refresh (atomic across replicas); None when unknown or expired.
        Raises RefreshReused (after revoking its family) for a token that was rotated away."""
        key = digest(token)
        record = await self.store.take("refresh", key)
        if record is not None:
            return RefreshGrant.of(key, record)
        rotated = await self.store.take("refresh-rotated", key)
        if rotated is not None:
            await self.revoke_family(rotated["family"])
            raise RefreshReused(user_of(rotated))
        return None

    async def put_back(self, grant: RefreshGrant) -> bool:
        """Return a claimed token unused (the refresh did not happen through no fault of its
        holder): nothing a client holds is lost to a provider outage, nor to a failover
        (`give_back`); whether it stands again."""
        ttl = int(grant.expires_at - time.time())
        if ttl <= 0:
            return True  # expired meanwhile: nothing to give back
        record = grant.as_record()
        return await give_back(
            lambda: self.store.put("refresh", grant.digest, record, ttl), "a refresh token"
        )

    async def rotate(
        self, grant: RefreshGrant, tokens: dict[str, Any], jkt: str | None = None
    ) -> dict[str, Any]:
        """The provider's answer to a refresh, with a new gateway token in the same family
        (carrying the provider's new refresh token, or the old one if it did not rotate),
        bound to the key the old one was bound to, else to `jkt` (the refresh's proof's)."""
        if not isinstance(tokens.get("refresh_token"), str):
            tokens = {**tokens, "refresh_token": grant.provider_token}
            if "refresh_expires_in" not in tokens:
                tokens["refresh_expires_in"] = max(1, int(grant.expires_at - time.time()))
        answer = await self.issue(
            grant.client_id, tokens, grant.family, grant.idp, grant.user, grant.jkt or jkt
        )
        # Remembered as long as the old token could have lived, to recognise it if it returns.
        ttl = int(grant.expires_at - time.time())
        if ttl > 0:
            rotated: dict[str, Any] = {
                "family": grant.family,
                "client_id": grant.client_id,
                "expires_at": grant.expires_at,
            }
            if grant.user is not None:
                rotated["user"] = grant.user
            await self.store.put("refresh-rotated", grant.digest, rotated, ttl)
        return answer

    async def restore(self, grant: RefreshGrant, tokens: dict[str, Any]) -> bool:
        """After a rotation the store did not acknowledge: the client still holds `grant`'s
        token, so it stands again for the provider's newest refresh token (a provider that
        rotates has already retired the old one), as its family's current token. Tried until
        the store takes it (`give_back`): the claim on the old token was acknowledged, so it
        is gone after a failover unless this lands; whether it did."""
        newest = tokens.get("refresh_token")
        if isinstance(newest, str) and newest:
            grant = dataclasses.replace(grant, provider_token=newest)
        ttl = int(grant.expires_at - time.time())
        if ttl <= 0:
            return True  # expired meanwhile: nothing to give back

        async def write() -> None:
            await self.store.put("refresh", grant.digest, grant.as_record(), ttl)
            await self.store.put("refresh-family", grant.family, {"current": grant.digest}, ttl)

        return await give_back(write, "a refresh token")

    async def revoke_family(self, family: str) -> None:
        """Revoke the current token of a family."""
        current = await self.store.take("refresh-family", family)
        if current is not None:
            await self.store.take("refresh", current["current"])
