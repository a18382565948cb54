"""Where users' grants are kept: the interface every store offers, and the store a URL names
(`--user-token-store`): `sqlite:///ABSOLUTE/PATH` for one gateway process (or several on one
machine), `redis://`, `rediss://` or `unix:` for several replicas. Every value is sealed with
the key file's keys (`keys.py`); a store holds no token in clear."""

from __future__ import annotations

from contextlib import AbstractAsyncContextManager
from typing import Any, Protocol
from urllib.parse import urlsplit

from ..redis_clients import RedisConnections
from ..redis_targets import CLUSTER, SENTINEL, SINGLE
from ..urls import shown_url
from .grants import Grant, GrantKey, GrantSummary
from .keys import TokenKeys
from .locking import LockTimeout, StoreError

__all__ = [
    "FLAG",
    "GrantStore",
    "LockTimeout",
    "StoreError",
    "open_store",
    "reseal_all",
    "sqlite_path",
]

FLAG = "--user-token-store"
_SQLITE = "sqlite://"
_REDIS_SCHEMES = SINGLE + SENTINEL + CLUSTER
_FORMS = (
    "give sqlite:///ABSOLUTE/PATH (the gateway's processes on one machine) or "
    "redis://HOST:PORT/DB, rediss://…, unix:/PATH, redis+sentinel://H1:PORT,H2:PORT/SERVICE/DB "
    "or redis+cluster://H1:PORT,H2:PORT/ (several replicas)"
)


class GrantStore(Protocol):
    """Grants by (issuer, subject, backend), short-lived pending values, and a lock shared by
    every process using the same store."""

    where: str  # the store's URL as it may be shown (no password)

    async def ping(self) -> None:
        """Reach the store and check its layout; StoreError saying why not."""
        ...

    async def get(self, key: GrantKey) -> Grant | None:
        """`key`'s grant; None when there is none or it does not open (logged, never raised)."""
        ...

    async def put(self, key: GrantKey, grant: Grant) -> None:
        """Store `grant` as `key`'s, sealed with the first key."""
        ...

    async def delete(self, key: GrantKey) -> bool:
        """Remove `key`'s grant; whether there was one."""
        ...

    async def list_user(self, issuer: str, subject: str) -> list[GrantSummary]:
        """Summaries of one user's grants, by backend."""
        ...

    async def list_all(self) -> list[GrantSummary]:
        """Summaries of every grant (the operator's CLI)."""
        ...

    async def delete_user(self, issuer: str, subject: str, backend: str | None = None) -> int:
        """Remove one user's grants (at one backend when given); how many there were."""
        ...

    async def put_pending(self, kind: str, id: str, value: dict[str, Any], ttl: float) -> None:
        """Keep `value` (sealed) for `ttl` seconds under `kind` and `id`."""
        ...

    async def get_pending(self, kind: str, id: str) -> dict[str, Any] | None:
        """The pending value, if not expired; it stays."""
        ...

    async def take_pending(self, kind: str, id: str) -> dict[str, Any] | None:
        """The pending value, removed in the same step: only one caller ever gets it."""
        ...

    def lock(
        self, name: str, ttl: float, wait: float | None = None
    ) -> AbstractAsyncContextManager[None]:
        """Hold `name` against every process of this store for at most `ttl` seconds (then it
        expires, so a crashed holder never blocks); LockTimeout after `wait` (default `ttl`)."""
        ...

    async def reseal(self) -> int:
        """Seal every record anew with the first key; how many grants were."""
        ...

    async def close(self) -> None:
        """Release connections and threads."""
        ...


async def reseal_all(store: GrantStore) -> int:
    """Rewrite every grant (and pending value) under the key file's first key, so the keys
    before it can be dropped; how many grants were rewritten. Records no key opens stay."""
    return await store.reseal()


def sqlite_path(url: str, flag: str = FLAG) -> str:
    """The absolute file path of a `sqlite:///ABSOLUTE/PATH` URL (taken as written, nothing
    decoded); ValueError naming `flag` and the fix otherwise."""
    if not url.startswith(_SQLITE):
        raise ValueError(f"{flag} {url!r}: not a sqlite:// URL; {_FORMS}")
    path = url[len(_SQLITE) :]
    fix = "write sqlite:/// then the absolute path, e.g. sqlite:///var/lib/gateway/grants.db"
    if not path.startswith("/"):
        raise ValueError(f"{flag} {url!r}: the path must be absolute; {fix}")
    if path.startswith("//"):
        raise ValueError(f"{flag} {url!r}: more than three slashes; {fix}")
    if path.endswith("/"):
        raise ValueError(f"{flag} {url!r}: names a directory; {fix}")
    for char, what in (("?", "a query"), ("#", "a fragment"), ("\x00", "a NUL character")):
        if char in path:
            raise ValueError(f"{flag} {url!r}: the path holds {what} ('{char}'); {fix}")
    return path


def open_store(
    url: str,
    keys: TokenKeys,
    flag: str = FLAG,
    *,
    create: bool = True,
    connections: RedisConnections | None = None,
) -> GrantStore:
    """The store `url` names, its values sealed with `keys`; ValueError naming `flag` and the
    fix when `url` names none (or, unless `create`, a SQLite file that is not there yet). A
    Redis store uses the process's connection from `connections` when given. Nothing is
    connected yet (`ping` does)."""
    if url.startswith("sqlite:"):
        from .sqlite_store import SqliteStore

        return SqliteStore(sqlite_path(url, flag), keys, flag, create=create)
    try:
        scheme = urlsplit(url).scheme.lower()
    except ValueError:
        scheme = ""
    if scheme not in _REDIS_SCHEMES:
        raise ValueError(f"{flag} {shown_url(url)!r}: not a store URL; {_FORMS}")
    from .redis_store import RedisStore

    try:
        connection = connections.connection(url, flag) if connections is not None else None
        return RedisStore(url, keys, connection)
    except ValueError as exc:
        raise ValueError(f"{flag} {shown_url(url)!r}: {exc}; {_FORMS}") from None
