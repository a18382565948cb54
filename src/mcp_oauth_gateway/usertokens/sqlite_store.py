"""Grants in an embedded SQLite file (`--user-token-store sqlite:///PATH`), the default for one
gateway process or several on one machine. The file is made readable by its owner only; WAL lets
readers go on while one process writes. The stdlib driver blocks, so every statement runs on
one worker thread of the store's own, which holds the store's one connection."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager
from pathlib import Path
from typing import Any, TypeVar

from .filemode import exposure
from .grants import Grant, GrantKey, GrantSummary
from .keys import TokenKeys
from .locking import StoreError, check_ttl, held
from .sealing import Sealer, check_id, check_kind, grant_aad, pending_aad, usable_id

T = TypeVar("T")

SCHEMA_VERSION = 1
_SCHEMA = (
    """CREATE TABLE grants (
        grant_key TEXT PRIMARY KEY, issuer TEXT NOT NULL, subject TEXT NOT NULL,
        backend TEXT NOT NULL, sealed BLOB NOT NULL, key_id TEXT NOT NULL, scope TEXT,
        obtained_at REAL NOT NULL, refreshed_at REAL, expires_at REAL, updated_at REAL NOT NULL)""",
    "CREATE INDEX grants_by_user ON grants (issuer, subject)",
    """CREATE TABLE pending (
        kind TEXT NOT NULL, id TEXT NOT NULL, sealed BLOB NOT NULL, key_id TEXT NOT NULL,
        expires_at REAL NOT NULL, PRIMARY KEY (kind, id))""",
    """CREATE TABLE locks (
        name TEXT PRIMARY KEY, token TEXT NOT NULL, expires_at REAL NOT NULL)""",
    f"PRAGMA user_version = {SCHEMA_VERSION}",
)
_PUT = (
    "INSERT OR REPLACE INTO grants (grant_key, issuer, subject, backend, sealed, key_id, scope, "
    "obtained_at, refreshed_at, expires_at, updated_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)"
)
_SUMMARY = (
    "SELECT issuer, subject, backend, scope, obtained_at, refreshed_at, expires_at, key_id "
    "FROM grants"
)
# Another process writing waits this long for its turn before the store says it is busy.
_BUSY_SECONDS = 30.0
_FILE_MODE = 0o600


def prepare_file(path: str, flag: str, create: bool = True) -> None:
    """Create the store's file readable by its owner only (when `create`), or check the one
    there is not open to others; ValueError naming `flag` and the fix."""
    parent = Path(path).parent
    if not parent.is_dir():
        raise ValueError(f"{flag} sqlite://{path}: no directory {parent}; create it first")
    flags = os.O_RDWR | os.O_CLOEXEC | os.O_NONBLOCK | (os.O_CREAT if create else 0)
    try:
        fd = os.open(path, flags, _FILE_MODE)
    except FileNotFoundError:
        raise ValueError(
            f"{flag} sqlite://{path}: no such file (the gateway makes it when it first "
            "starts with this flag); give the path the gateway uses"
        ) from None
    except OSError as exc:
        raise ValueError(
            f"{flag} sqlite://{path}: cannot be opened for writing ({exc.strerror}); give a "
            "path in a directory the gateway may write"
        ) from None
    try:
        found = os.fstat(fd)
    finally:
        os.close(fd)
    if not stat.S_ISREG(found.st_mode):
        raise ValueError(f"{flag} sqlite://{path}: not a regular file")
    too_open = exposure(found.st_mode)
    if too_open is not None:
        raise ValueError(f"{flag} sqlite://{path}: {too_open}; chmod 600 {path}")


class SqliteStore:
    """The GrantStore over one SQLite file."""

    def __init__(
        self, path: str, keys: TokenKeys, flag: str = "--user-token-store", create: bool = True
    ):
        prepare_file(path, flag, create)
        self.path = path
        self.where = f"sqlite://{path}"
        self._sealer = Sealer(keys, self.where)
        self._executor = ThreadPoolExecutor(1, thread_name_prefix="usertokens-sqlite")
        self._db: sqlite3.Connection | None = None  # touched on the worker thread only

    async def _run(self, job: Callable[[sqlite3.Connection], T]) -> T:
        loop = asyncio.get_running_loop()
        try:
            return await loop.run_in_executor(self._executor, self._on_worker, job)
        except (sqlite3.Error, OSError) as exc:
            raise StoreError(f"user token store {self.where}: {exc}") from exc

    def _on_worker(self, job: Callable[[sqlite3.Connection], T]) -> T:
        if self._db is None:
            self._db = _connect(self.path, self.where)
        return job(self._db)

    async def ping(self) -> None:
        """Open the file and create or check its tables."""
        await self._run(lambda db: None)

    async def get(self, key: GrantKey) -> Grant | None:
        """`key`'s grant, or None."""
        query, text = "SELECT sealed FROM grants WHERE grant_key = ?", key.text()
        row = await self._run(lambda db: db.execute(query, (text,)).fetchone())
        return None if row is None else self._sealer.open_grant(key, row[0])

    async def put(self, key: GrantKey, grant: Grant) -> None:
        """Insert or replace `key`'s grant."""
        sealed = self._sealer.seal_grant(key, grant)
        row = (
            key.text(),
            key.issuer,
            key.subject,
            key.backend,
            sealed,
            self._sealer.keys.sealing_id,
            grant.scope,
            grant.obtained_at,
            grant.refreshed_at,
            grant.expires_at,
            time.time(),
        )
        await self._run(lambda db: db.execute(_PUT, row))

    async def delete(self, key: GrantKey) -> bool:
        """Remove `key`'s grant."""
        text = key.text()
        done = await self._run(
            lambda db: db.execute("DELETE FROM grants WHERE grant_key = ?", (text,)).rowcount
        )
        return done > 0

    async def list_user(self, issuer: str, subject: str) -> list[GrantSummary]:
        """One user's grants."""
        query = f"{_SUMMARY} WHERE issuer = ? AND subject = ? ORDER BY backend"
        rows = await self._run(lambda db: db.execute(query, (issuer, subject)).fetchall())
        return _summaries(rows)

    async def list_all(self) -> list[GrantSummary]:
        """Every grant."""
        query = f"{_SUMMARY} ORDER BY issuer, subject, backend"
        return _summaries(await self._run(lambda db: db.execute(query).fetchall()))

    async def delete_user(self, issuer: str, subject: str, backend: str | None = None) -> int:
        """Remove one user's grants (at one backend)."""
        query, args = "DELETE FROM grants WHERE issuer = ? AND subject = ?", [issuer, subject]
        if backend is not None:
            query, args = query + " AND backend = ?", [*args, backend]
        return await self._run(lambda db: db.execute(query, args).rowcount)

    async def put_pending(self, kind: str, id: str, value: dict[str, Any], ttl: float) -> None:
        """Keep `value` for `ttl` seconds; expired values are swept here."""
        check_kind(kind)
        check_id(id)
        check_ttl(ttl, "a pending value's ttl")
        sealed, now = self._sealer.seal_pending(kind, id, value), time.time()
        row = (kind, id, sealed, self._sealer.keys.sealing_id, now + ttl)

        def job(db: sqlite3.Connection) -> None:
            db.execute("DELETE FROM pending WHERE expires_at <= ?", (now,))
            db.execute("INSERT OR REPLACE INTO pending VALUES (?, ?, ?, ?, ?)", row)

        await self._run(job)

    async def get_pending(self, kind: str, id: str) -> dict[str, Any] | None:
        """The pending value, left in place."""
        if not usable_id(check_kind(kind)) or not usable_id(id):
            return None
        query = "SELECT sealed FROM pending WHERE kind = ? AND id = ? AND expires_at > ?"
        row = await self._run(lambda db: db.execute(query, (kind, id, time.time())).fetchone())
        return None if row is None else self._sealer.open_pending(kind, id, row[0])

    async def take_pending(self, kind: str, id: str) -> dict[str, Any] | None:
        """The pending value, deleted by the same statement that reads it."""
        if not usable_id(check_kind(kind)) or not usable_id(id):
            return None
        query = "DELETE FROM pending WHERE kind = ? AND id = ? RETURNING sealed, expires_at"
        row = await self._run(lambda db: db.execute(query, (kind, id)).fetchone())
        if row is None or row[1] <= time.time():
            return None
        return self._sealer.open_pending(kind, id, row[0])

    def lock(
        self, name: str, ttl: float, wait: float | None = None
    ) -> AbstractAsyncContextManager[None]:
        """A lock row with an expiry, shared by every process on this file."""
        return held(self._take, self._give, name, ttl, wait)

    async def _take(self, name: str, token: str, ttl: float) -> bool:
        now = time.time()
        # One statement: a free or expired lock becomes ours; a live one is left alone.
        query = (
            "INSERT INTO locks VALUES (?, ?, ?) ON CONFLICT (name) DO UPDATE SET "
            "token = excluded.token, expires_at = excluded.expires_at WHERE locks.expires_at <= ?"
        )
        done = await self._run(lambda db: db.execute(query, (name, token, now + ttl, now)).rowcount)
        return done > 0

    async def _give(self, name: str, token: str) -> None:
        query = "DELETE FROM locks WHERE name = ? AND token = ?"
        await self._run(lambda db: db.execute(query, (name, token)))

    async def reseal(self) -> int:
        """Every record sealed anew with the first key, each only if unchanged meanwhile."""
        return await self._run(self._reseal)

    def _reseal(self, db: sqlite3.Connection) -> int:
        sealer, kid = self._sealer, self._sealer.keys.sealing_id
        count = 0
        query = "SELECT grant_key, sealed FROM grants WHERE key_id != ?"
        for text, sealed in db.execute(query, (kid,)).fetchall():
            try:
                aad = grant_aad(GrantKey.from_text(text))
            except ValueError:
                continue
            new = sealer.resealed(sealed, aad)
            if new is not None:
                count += db.execute(
                    "UPDATE grants SET sealed = ?, key_id = ? WHERE grant_key = ? AND sealed = ?",
                    (new, kid, text, sealed),
                ).rowcount
        query = "SELECT kind, id, sealed FROM pending WHERE key_id != ?"
        for kind, id, sealed in db.execute(query, (kid,)).fetchall():
            new = sealer.resealed(sealed, pending_aad(kind, id))
            if new is not None:
                db.execute(
                    "UPDATE pending SET sealed = ?, key_id = ? "
                    "WHERE kind = ? AND id = ? AND sealed = ?",
                    (new, kid, kind, id, sealed),
                )
        return count

    async def close(self) -> None:
        """Close the connection, then the worker thread."""

        def job() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await asyncio.get_running_loop().run_in_executor(self._executor, job)
        self._executor.shutdown(wait=False)


def _connect(path: str, where: str) -> sqlite3.Connection:
    """The connection, in WAL mode, its tables created on first use or checked."""
    db = sqlite3.connect(path, timeout=_BUSY_SECONDS, isolation_level=None)
    try:
        db.execute("PRAGMA journal_mode = WAL")
        version = db.execute("PRAGMA user_version").fetchone()[0]
        if version == 0:
            _create(db)
        elif version != SCHEMA_VERSION:
            raise StoreError(
                f"user token store {where}: tables of version {version}, this gateway knows "
                f"{SCHEMA_VERSION}; run the gateway version that wrote them, or another file"
            )
    except BaseException:
        db.close()
        raise
    return db


def _create(db: sqlite3.Connection) -> None:
    """The tables, made by one process only when several open a new file at once."""
    db.execute("BEGIN IMMEDIATE")
    try:
        if db.execute("PRAGMA user_version").fetchone()[0] == 0:
            for statement in _SCHEMA:
                db.execute(statement)
        db.execute("COMMIT")
    except BaseException:
        db.execute("ROLLBACK")
        raise


def _summaries(rows: list[tuple[Any, ...]]) -> list[GrantSummary]:
    found = []
    for issuer, subject, backend, scope, obtained, refreshed, expires, kid in rows:
        try:
            key = GrantKey(issuer, subject, backend)
        except ValueError:
            continue  # a row no gateway wrote
        found.append(GrantSummary(key, scope, obtained, refreshed, expires, kid))
    return found
