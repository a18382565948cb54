"""The Broker's short-lived records, typed, and where they live in the store.

Records cross replicas through Redis as JSON; one that does not read back as its type (written by
another version, say) counts as absent, like an expired one."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from .store import BrokerStore

PENDING_TTL = 600
CODE_TTL = 300
T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class PendingAuthorization:
    """A client's authorization request, checked and waiting for the user's consent."""

    client_id: str
    client_name: str
    redirect_uri: str  # as the client sent it: the token request must repeat it exactly
    redirect_href: str  # as a browser reads it: where the user is sent back
    state: str | None
    challenge: str
    scope: str
    resource: str | None
    browser: str  # the browser that started the sign-in (its cookie)
    # The provider (its providers[] index) the user signs in at; None: the user chooses it.
    provider: int | None = None
    login_hint: str | None = None  # passed on to the provider
    # RFC 9449 §10: the thumbprint of the DPoP key the code may be redeemed with only.
    dpop_jkt: str | None = None


@dataclass(frozen=True, slots=True)
class UpstreamRequest:
    """The gateway's own sign-in at the provider on behalf of a pending authorization."""

    pending: PendingAuthorization
    verifier: str
    # The redirect URI the provider saw, so the replica that gets the callback repeats it.
    callback: str
    provider: int = 0


@dataclass(frozen=True, slots=True)
class IssuedCode:
    """The gateway's one-time code and the provider's tokens it stands for."""

    client_id: str
    redirect_uri: str
    challenge: str
    tokens: dict[str, Any]
    provider: int = 0  # whose tokens they are: refreshes and revocations go there
    dpop_jkt: str | None = None  # the authorization request's: the redemption's proof's key


def _pending(record: dict[str, Any]) -> PendingAuthorization:
    return PendingAuthorization(**record)


def _code(record: dict[str, Any]) -> IssuedCode:
    return IssuedCode(**record)


def _upstream(record: dict[str, Any]) -> UpstreamRequest:
    return UpstreamRequest(
        _pending(record["pending"]),
        record["verifier"],
        record["callback"],
        record.get("provider", 0),
    )


class BrokerState:
    """Typed puts and single-use takes over the store (atomic across replicas)."""

    def __init__(self, store: BrokerStore):
        self.store = store

    async def put_pending(self, request_id: str, pending: PendingAuthorization) -> None:
        """Keep a request until the user answers the consent page."""
        await self.store.put("authz", request_id, dataclasses.asdict(pending), PENDING_TTL)

    async def take_pending(self, request_id: str) -> PendingAuthorization | None:
        """The request, once (None: unknown, expired or answered)."""
        return _read(await self.store.take("authz", request_id), _pending)

    async def put_upstream(self, state: str, upstream: UpstreamRequest) -> None:
        """Keep the provider sign-in until its callback."""
        await self.store.put("upstream", state, dataclasses.asdict(upstream), PENDING_TTL)

    async def take_upstream(self, state: str) -> UpstreamRequest | None:
        """The provider sign-in for a callback's state, once."""
        return _read(await self.store.take("upstream", state), _upstream)

    async def put_code(self, code: str, issued: IssuedCode) -> None:
        """Keep a code until the client redeems it."""
        await self.store.put("code", code, dataclasses.asdict(issued), CODE_TTL)

    async def take_code(self, code: str) -> IssuedCode | None:
        """The code's record, once."""
        return _read(await self.store.take("code", code), _code)


def _read(record: dict[str, Any] | None, build: Callable[[dict[str, Any]], T]) -> T | None:
    if record is None:
        return None
    try:
        return build(record)
    except (TypeError, KeyError):
        return None
