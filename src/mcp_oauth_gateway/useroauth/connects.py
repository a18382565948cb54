"""Connections users were asked for: each elicitation is a random id kept (encrypted, with a
deadline) in the grant store with who was asked and for which backend, so any replica can serve
the link. One caller asking again for the same backend before connecting gets the same link,
whatever session the request names: a caller cannot grow the store by naming sessions."""

from __future__ import annotations

import hashlib
import secrets
import time
from dataclasses import dataclass

from ..usertokens.grants import GrantKey
from ..usertokens.store import GrantStore
from .elicitation import Elicitation, connect_message

# How long a link stays valid; the user follows it while their client waits.
LIFETIME = 15 * 60
ELICITATION = "elicitation"
LATEST = "elicitation-of"
DONE = "elicitation-done"


@dataclass(frozen=True, slots=True)
class Asked:
    """One elicitation as kept: who was asked, for which backend."""

    id: str
    key: GrantKey
    service: str

    def value(self) -> dict[str, object]:
        """As stored."""
        return {
            "iss": self.key.issuer,
            "sub": self.key.subject,
            "backend": self.key.backend,
            "service": self.service,
        }


def _asked(eid: str, value: dict[str, object]) -> Asked | None:
    fields = [value.get(n) for n in ("iss", "sub", "backend", "service")]
    if not all(isinstance(f, str) for f in fields):
        return None
    iss, sub, backend, service = (str(f) for f in fields)
    return Asked(eid, GrantKey(iss, sub, backend), service)


def _latest_key(key: GrantKey) -> str:
    return hashlib.sha256(key.text().encode()).hexdigest()


def connect_url(origin: str, mcp_path: str, eid: str) -> str:
    """The link users open: the gateway's page, never the upstream's; nothing but the id."""
    return f"{origin}{mcp_path}/connect?id={eid}"


class Connects:
    """The elicitations of every route of the process, kept in the grant store."""

    def __init__(self, store: GrantStore):
        self.store = store

    async def ask(self, key: GrantKey, service: str) -> Asked:
        """The caller's open elicitation for this backend, or a new one."""
        latest = _latest_key(key)
        known = await self.store.get_pending(LATEST, latest)
        if known is not None and isinstance(known.get("id"), str):
            asked = await self.find(str(known["id"]))
            if asked is not None and asked.key == key:
                return asked
        asked = Asked(secrets.token_urlsafe(24), key, service)
        await self.store.put_pending(ELICITATION, asked.id, asked.value(), LIFETIME)
        await self.store.put_pending(LATEST, latest, {"id": asked.id}, LIFETIME)
        return asked

    async def find(self, eid: str) -> Asked | None:
        """The elicitation behind a link's id (None: unknown or expired)."""
        if not eid or len(eid) > 64:
            return None
        value = await self.store.get_pending(ELICITATION, eid)
        return None if value is None else _asked(eid, value)

    async def finish(self, asked: Asked) -> None:
        """The user connected: the link is spent and its completion can be told."""
        await self.store.take_pending(ELICITATION, asked.id)
        await self.store.take_pending(LATEST, _latest_key(asked.key))
        await self.store.put_pending(DONE, asked.id, {"at": time.time()}, LIFETIME)

    async def finished(self, eid: str) -> bool:
        """Whether the user connected through this elicitation."""
        return await self.store.get_pending(DONE, eid) is not None


def elicitation(asked: Asked, origin: str, mcp_path: str) -> Elicitation:
    """What the client is sent for one elicitation."""
    return Elicitation(
        asked.id, connect_url(origin, mcp_path, asked.id), connect_message(asked.service)
    )
