"""Grants in Redis (`--user-token-store redis://…`, a Sentinel set or a Cluster), shared by
every replica; the keys' names are `redis_names`'. Every write is acknowledged by the replicas
the URL asks for (`acks`), so a grant, a pending sign-in or a lock a failover would lose is
never reported stored: the caller gets StoreError (503) instead. Resealing is not (a grant it
did not reach stays readable under the key that sealed it)."""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable, Iterator
from contextlib import AbstractAsyncContextManager
from typing import Any, TypeVar

from redis.asyncio import Redis
from redis.asyncio.client import Pipeline
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import RedisError, WatchError

from ..redis_clients import RedisConnection, RedisUnavailable
from .grants import Grant, GrantKey, GrantSummary
from .keys import TokenKeys
from .locking import StoreError, check_ttl, held
from .redis_names import PREFIX, SCHEMA, KeyNames, lock, pending
from .sealing import Sealer, check_id, check_kind, grant_aad, pending_aad, usable_id

T = TypeVar("T")

SCHEMA_VERSION = b"1"
# Compare-and-delete: only the holder's token gives the lock back.
_GIVE = """
if redis.call('GET', KEYS[1]) == ARGV[1] then return redis.call('DEL', KEYS[1]) end
return 0
"""
# A grant replaced (no field of the one before left) and indexed, in one step.
_PUT = """
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], unpack(ARGV, 2))
return redis.call('SADD', KEYS[2], ARGV[1])
"""
# A grant and its index entry gone in one step.
_DELETE = """
local deleted = redis.call('DEL', KEYS[1])
redis.call('SREM', KEYS[2], ARGV[1])
return deleted
"""
# Every grant of one user, and the user's set, gone in one step.
_DELETE_USER = """
local count = 0
for _, text in ipairs(redis.call('SMEMBERS', KEYS[1])) do
  count = count + redis.call('DEL', ARGV[1] .. text)
end
redis.call('DEL', KEYS[1])
return count
"""
_TIMES = ("obtained_at", "refreshed_at", "expires_at")
_RESEAL_TRIES = 3


class RedisStore:
    """The GrantStore over one Redis (its own connection, or the process's shared one)."""

    def __init__(self, url: str, keys: TokenKeys, connection: RedisConnection | None = None):
        self._owned = connection is None
        self.connection = connection or RedisConnection(url, "--user-token-store")
        self.where = self.connection.shown
        self._client: Redis | RedisCluster = self.connection.client
        self.names = KeyNames(tagged=self.connection.target.kind == "cluster")
        self._sealer = Sealer(keys, self.where)
        self._checked = False

    @contextlib.contextmanager
    def _errors(self) -> Iterator[None]:
        try:
            yield
        except RedisUnavailable as exc:
            raise StoreError(f"user token store {self.where}: {exc.reason}") from exc
        except (RedisError, OSError) as exc:
            raise StoreError(f"user token store {self.where}: {exc}") from exc

    async def _do(self, call: Callable[[], Awaitable[T]]) -> T:
        """`call()`'s result once the layout is checked; StoreError when Redis fails."""
        if not self._checked:
            await self.ping()
        with self._errors():
            return await call()

    async def _acked(self, key: str, build: Callable[[Pipeline], object]) -> list[Any]:
        """The replies of an acknowledged write on `key`'s slot (StoreError when not)."""
        return await self._do(lambda: self.connection.acknowledged(key, build))

    async def ping(self) -> None:
        """Reach Redis; the layout's version written by the first replica, checked by all."""
        with self._errors():

            def build(pipe: Pipeline) -> None:
                pipe.set(SCHEMA, SCHEMA_VERSION, nx=True)
                pipe.get(SCHEMA)

            found = (await self.connection.acknowledged(SCHEMA, build))[1]
        if found != SCHEMA_VERSION:
            raise StoreError(
                f"user token store {self.where}: the layout of version {found!r}, this gateway "
                f"knows {SCHEMA_VERSION.decode()}; run the gateway version that wrote it"
            )
        self._checked = True

    async def get(self, key: GrantKey) -> Grant | None:
        """`key`'s grant, or None."""
        name = self.names.grant(key)
        sealed = _raw(await self._do(lambda: self._client.hget(name, "sealed")))
        return None if sealed is None else self._sealer.open_grant(key, sealed)

    async def put(self, key: GrantKey, grant: Grant) -> None:
        """Replace `key`'s grant (no field of the one before left) and index it."""
        fields: list[bytes | str | float] = [
            "sealed",
            self._sealer.seal_grant(key, grant),
            "key_id",
            self._sealer.keys.sealing_id,
        ]
        for name in _TIMES:
            if (value := getattr(grant, name)) is not None:
                fields += [name, value]
        if grant.scope is not None:
            fields += ["scope", grant.scope]
        grant_name = self.names.grant(key)
        keys = [grant_name, self.names.user(key.issuer, key.subject)]
        await self._acked(grant_name, lambda pipe: pipe.eval(_PUT, 2, *keys, key.text(), *fields))

    async def delete(self, key: GrantKey) -> bool:
        """Remove `key`'s grant and its index entry."""
        grant_name = self.names.grant(key)
        keys = [grant_name, self.names.user(key.issuer, key.subject)]
        (deleted,) = await self._acked(
            grant_name, lambda pipe: pipe.eval(_DELETE, 2, *keys, key.text())
        )
        return bool(deleted)

    async def list_user(self, issuer: str, subject: str) -> list[GrantSummary]:
        """One user's grants, by backend."""
        texts = await self._do(lambda: self._client.smembers(self.names.user(issuer, subject)))
        prefix = self.names.grants_of(issuer, subject).encode()
        found = await self._summaries([prefix + _text(text) for text in texts])
        return sorted(found, key=lambda s: s.key.backend)

    async def list_all(self) -> list[GrantSummary]:
        """Every grant, by issuer, subject and backend."""
        names = await self._do(lambda: _scanned(self._client, self.names.every_grant))
        found = await self._summaries(names)
        return sorted(found, key=lambda s: (s.key.issuer, s.key.subject, s.key.backend))

    async def _summaries(self, names: list[bytes]) -> list[GrantSummary]:
        pipe = self._client.pipeline(transaction=False)
        for name in names:
            pipe.hgetall(name)
        rows = await self._do(pipe.execute)
        found = []
        for name, row in zip(names, rows, strict=True):
            summary = _summary(self.names.key_text(name), row)
            if summary is not None:
                found.append(summary)
        return found

    async def delete_user(self, issuer: str, subject: str, backend: str | None = None) -> int:
        """Remove one user's grants (at one backend)."""
        if backend is not None:
            return int(await self.delete(GrantKey(issuer, subject, backend)))
        user = self.names.user(issuer, subject)
        prefix = self.names.grants_of(issuer, subject)
        (count,) = await self._acked(user, lambda pipe: pipe.eval(_DELETE_USER, 1, user, prefix))
        return int(count)

    async def put_pending(self, kind: str, id: str, value: dict[str, Any], ttl: float) -> None:
        """SET with PX: Redis forgets it when it expires."""
        check_kind(kind)
        check_id(id)
        millis = max(1, round(check_ttl(ttl, "a pending value's ttl") * 1000))
        sealed = self._sealer.seal_pending(kind, id, value)
        name = pending(kind, id)
        await self._acked(name, lambda pipe: pipe.set(name, sealed, px=millis))

    async def get_pending(self, kind: str, id: str) -> dict[str, Any] | None:
        """GET: the value stays."""
        if not usable_id(check_kind(kind)) or not usable_id(id):
            return None
        sealed = _raw(await self._do(lambda: self._client.get(pending(kind, id))))
        return None if sealed is None else self._sealer.open_pending(kind, id, sealed)

    async def take_pending(self, kind: str, id: str) -> dict[str, Any] | None:
        """GETDEL: one step, so one caller gets it even when replicas race."""
        if not usable_id(check_kind(kind)) or not usable_id(id):
            return None
        name = pending(kind, id)
        (raw,) = await self._acked(name, lambda pipe: pipe.getdel(name))
        sealed = _raw(raw)
        return None if sealed is None else self._sealer.open_pending(kind, id, sealed)

    def lock(
        self, name: str, ttl: float, wait: float | None = None
    ) -> AbstractAsyncContextManager[None]:
        """SET NX PX with a random token; given back by compare-and-delete."""
        return held(self._take, self._give, name, ttl, wait)

    async def _take(self, name: str, token: str, ttl: float) -> bool:
        millis, key = max(1, round(ttl * 1000)), lock(name)
        (taken,) = await self._acked(key, lambda pipe: pipe.set(key, token, nx=True, px=millis))
        return bool(taken)

    async def _give(self, name: str, token: str) -> None:
        key = lock(name)
        await self._acked(key, lambda pipe: pipe.eval(_GIVE, 1, key, token))

    async def reseal(self) -> int:
        """Every grant and pending value sealed anew, each only if unchanged meanwhile."""
        count = 0
        for name in await self._do(lambda: _scanned(self._client, self.names.every_grant)):
            count += await self._reseal_grant(name)
        for name in await self._do(lambda: _scanned(self._client, PREFIX + "pending:*")):
            await self._reseal_pending(name)
        return count

    async def _reseal_grant(self, name: bytes) -> int:
        try:
            aad = grant_aad(GrantKey.from_text(self.names.key_text(name)))
        except ValueError:
            return 0
        return int(await self._resealed(name, aad, grant=True))

    async def _reseal_pending(self, name: bytes) -> None:
        kind, _, id = name[len(PREFIX + "pending:") :].decode("utf-8").partition(":")
        await self._resealed(name, pending_aad(kind, id), grant=False)

    async def _resealed(self, name: bytes, aad: bytes, grant: bool) -> bool:
        """Whether the record at `name` was sealed anew: WATCH, so a write meanwhile wins."""
        for _ in range(_RESEAL_TRIES):
            with self._errors(), contextlib.suppress(WatchError):
                async with self._client.pipeline(transaction=True) as pipe:
                    await pipe.watch(name)
                    old = _raw(await (pipe.hget(name, "sealed") if grant else pipe.get(name)))
                    new = None if old is None else self._sealer.resealed(old, aad)
                    if new is None:
                        return False
                    pipe.multi()  # type: ignore[no-untyped-call]
                    if grant:
                        kid = self._sealer.keys.sealing_id
                        pipe.hset(name, mapping={"sealed": new, "key_id": kid})
                    else:
                        pipe.set(name, new, keepttl=True, xx=True)
                    await pipe.execute()
                    return True
        return False

    async def close(self) -> None:
        """Close the connection when it is the store's own."""
        if self._owned:
            await self.connection.close()


def _raw(value: bytes | str | None) -> bytes | None:
    """A value as the bytes Redis holds (the client decodes nothing; the types allow str)."""
    return value.encode("utf-8") if isinstance(value, str) else value


def _text(value: bytes | str) -> bytes:
    return value.encode("utf-8") if isinstance(value, str) else value


async def _scanned(client: Redis | RedisCluster, match: str) -> list[bytes]:
    return [name async for name in client.scan_iter(match=match, count=500)]


def _summary(text: bytes, row: dict[bytes, bytes]) -> GrantSummary | None:
    """The summary of the grant hash `row` stored under `text`; None for one gone meanwhile
    or that no gateway wrote."""
    if b"key_id" not in row or b"obtained_at" not in row:
        return None
    try:
        key = GrantKey.from_text(text)
        times = {name: _time(row.get(name.encode())) for name in _TIMES}
        scope = row.get(b"scope")
        obtained = times["obtained_at"]
        assert obtained is not None
        return GrantSummary(
            key,
            None if scope is None else scope.decode("utf-8"),
            obtained,
            times["refreshed_at"],
            times["expires_at"],
            row[b"key_id"].decode("ascii"),
        )
    except (ValueError, UnicodeDecodeError):
        return None


def _time(raw: bytes | None) -> float | None:
    return None if raw is None else float(raw)
