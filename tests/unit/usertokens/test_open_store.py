"""Which store a `--user-token-store` URL names, and what is refused before anything is
stored: every URL that is not `sqlite:///ABSOLUTE/PATH`, `redis://`, `rediss://` or `unix:` (one
line naming the flag and the fix, no password shown), a SQLite file in a missing directory or
one others may touch; the SQLite file is made for its owner only, WAL and all; a store whose
layout another version wrote is refused, not read."""

from __future__ import annotations

import asyncio
import os
import sqlite3
import stat

import pytest
import redis

from mcp_oauth_gateway.usertokens import StoreError, open_store
from mcp_oauth_gateway.usertokens.redis_store import PREFIX, RedisStore
from mcp_oauth_gateway.usertokens.sqlite_store import SqliteStore
from mcp_oauth_gateway.usertokens.store import sqlite_path

from .store_support import ALICE, grant


def test_a_sqlite_url_names_an_absolute_path():
    assert sqlite_path("sqlite:///var/lib/gateway/grants.db") == "/var/lib/gateway/grants.db"
    assert sqlite_path("sqlite:///grants.db") == "/grants.db"
    assert sqlite_path("sqlite:///a b/%41.db") == "/a b/%41.db", "taken as written"


@pytest.mark.parametrize(
    ("url", "why"),
    [
        ("sqlite:////var/lib/grants.db", "more than three slashes"),
        ("sqlite://grants.db", "the path must be absolute"),
        ("sqlite:grants.db", "not a sqlite:// URL"),
        ("sqlite://", "the path must be absolute"),
        ("sqlite:///", "names a directory"),
        ("sqlite:///var/lib/", "names a directory"),
        ("sqlite:///:memory:?cache=shared", "the path holds a query"),
        ("sqlite:///var/grants.db#x", "the path holds a fragment"),
        ("sqlite:///var/grants\x00.db", "the path holds a NUL character"),
    ],
)
def test_a_sqlite_url_that_is_no_absolute_path_is_refused(url, why, token_keys):
    with pytest.raises(ValueError, match=r"^--user-token-store") as raised:
        open_store(url, token_keys)
    message = str(raised.value)
    assert message.startswith(f"--user-token-store {url!r}: "), message
    assert why in message
    assert "sqlite:///" in message.split(why, 1)[1], "the fix"


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("http://127.0.0.1:6379/0", "'http://127.0.0.1:6379/0': not a store URL"),
        ("postgres://u:pw@db/x", "'postgres://***@db/x': not a store URL"),
        ("/var/lib/grants.db", "'/var/lib/grants.db': not a store URL"),
        ("", "'': not a store URL"),
        ("redis://:pw@127.0.0.1:notaport/0", "'***': Port could not be cast"),
        ("redis://127.0.0.1:99999/0", "Port out of range"),
    ],
)
def test_any_other_url_is_refused_naming_the_forms(url, shown, token_keys):
    with pytest.raises(ValueError, match=r"^--user-token-store") as raised:
        open_store(url, token_keys, flag="--user-token-store")
    message = str(raised.value)
    assert message.startswith("--user-token-store "), message
    assert shown in message
    assert "sqlite:///ABSOLUTE/PATH" in message
    assert "pw" not in message


@pytest.mark.parametrize(
    ("url", "read"),
    [
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("rediss://cache.internal:6380/1", "rediss://cache.internal:6380/1"),
        ("unix:/run/redis.sock", "unix:///run/redis.sock"),
        ("unix:///run/redis.sock?db=2", "unix:///run/redis.sock?db=2"),
        ("redis+sentinel://:pw@s1:26379,s2:26379/mymaster/0", None),
        ("redis+cluster://:pw@c1:7000,c2:7001/", None),
    ],
)
def test_redis_urls_name_a_redis_store(url, read, token_keys):
    store = open_store(url, token_keys)
    assert isinstance(store, RedisStore)
    if read is not None:
        assert store.connection.target.url == read
    assert "pw" not in store.where


def test_the_sqlite_file_is_its_owners_only(tmp_path, token_keys):
    async def use() -> None:
        store = open_store(f"sqlite://{tmp_path}/grants.db", token_keys)
        assert isinstance(store, SqliteStore)
        await store.put(ALICE, grant(ALICE))
        made = sorted(p.name for p in tmp_path.iterdir())
        assert made == ["grants.db", "grants.db-shm", "grants.db-wal"], "WAL"
        for path in tmp_path.iterdir():
            assert stat.S_IMODE(path.stat().st_mode) == 0o600, path
        await store.close()

    old = os.umask(0o022)
    try:
        asyncio.run(use())
    finally:
        os.umask(old)


def test_a_sqlite_file_others_may_touch_is_refused(tmp_path, token_keys):
    path = tmp_path / "grants.db"
    path.touch(0o644)
    path.chmod(0o644)
    with pytest.raises(ValueError, match=r"^--user-token-store") as raised:
        open_store(f"sqlite://{path}", token_keys)
    assert str(raised.value) == (
        f"--user-token-store sqlite://{path}: every user of this machine can read it "
        f"(mode 0644); chmod 600 {path}"
    )


def test_a_sqlite_file_in_a_missing_directory_is_refused(tmp_path, token_keys):
    with pytest.raises(ValueError, match=r"no directory .*/absent; create it first"):
        open_store(f"sqlite://{tmp_path}/absent/grants.db", token_keys)


async def test_a_sqlite_file_of_another_version_is_refused(tmp_path, token_keys):
    path = tmp_path / "grants.db"
    with sqlite3.connect(path) as db:
        db.execute("PRAGMA user_version = 7")
    path.chmod(0o600)
    store = open_store(f"sqlite://{path}", token_keys)
    try:
        with pytest.raises(StoreError, match="tables of version 7, this gateway knows 1"):
            await store.ping()
    finally:
        await store.close()


async def test_a_file_that_is_no_database_is_refused(tmp_path, token_keys):
    path = tmp_path / "grants.db"
    path.write_bytes(b"not a database" * 100)
    path.chmod(0o600)
    store = open_store(f"sqlite://{path}", token_keys)
    try:
        with pytest.raises(StoreError, match=f"user token store sqlite://{path}: file is not"):
            await store.get(ALICE)
    finally:
        await store.close()


async def test_a_redis_layout_of_another_version_is_refused(redis_url, token_keys):
    url = redis_url.rsplit("/", 1)[0] + "/6"
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.set(PREFIX + "schema", b"2")
    client.close()
    store = open_store(url, token_keys)
    try:
        with pytest.raises(StoreError, match="the layout of version b'2', this gateway knows 1"):
            await store.get(ALICE)
    finally:
        await store.close()
