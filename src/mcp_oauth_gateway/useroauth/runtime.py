"""What every userOAuth route of a process shares: the grant store and its keys, the upstream
authorization servers found so far, the elicitations asked, the GET streams waiting for them."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import aiohttp

from ..usertokens.keys import TokenKeys
from ..usertokens.store import GrantStore
from .access import GrantAccess
from .connects import Connects
from .servers import Servers
from .streams import Streams


@dataclass(frozen=True)
class UserOAuthRuntime:
    """The process's user-OAuth state; `session` is the control plane's HTTP client (its
    connections are checked against the egress rules as they are made)."""

    store: GrantStore
    keys: TokenKeys
    servers: Servers
    access: GrantAccess
    connects: Connects
    streams: Streams
    session: Callable[[], aiohttp.ClientSession | None]

    @classmethod
    def create(
        cls,
        store: GrantStore,
        keys: TokenKeys,
        session: Callable[[], aiohttp.ClientSession | None],
    ) -> UserOAuthRuntime:
        """The runtime over a store opened with `keys`."""
        servers = Servers(session)
        return cls(
            store,
            keys,
            servers,
            GrantAccess(store, servers, session),
            Connects(store),
            Streams(),
            session,
        )

    async def close(self) -> None:
        """Close the store."""
        await self.store.close()
