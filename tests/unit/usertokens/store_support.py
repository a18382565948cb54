"""What the store tests share: keys, grants, a look at what a store really holds (its file's
bytes, its Redis values), and a lock holder in a process of its own (run as a script)."""

from __future__ import annotations

import asyncio
import sqlite3
import subprocess
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path

import redis

from mcp_oauth_gateway.usertokens import Grant, GrantKey, TokenKeys, parse_keys
from mcp_oauth_gateway.usertokens.redis_store import PREFIX
from mcp_oauth_gateway.usertokens.store import sqlite_path

ISSUER = "https://idp.example/realms/acme"
ALICE = GrantKey(ISSUER, "alice", "github")
ALICE_LINEAR = GrantKey(ISSUER, "alice", "linear")
BOB = GrantKey(ISSUER, "bob", "github")
# Another provider's alice is another person.
OTHER_ALICE = GrantKey("https://other.example", "alice", "github")


def keys(*lines: str) -> TokenKeys:
    """TokenKeys of key-file lines."""
    return parse_keys("\n".join(lines), "test keys")


def grant(owner: GrantKey, n: int = 1, **changes: object) -> Grant:
    """A grant whose tokens name their owner and number, so a leak is recognisable."""
    fields: dict[str, object] = {
        "access_token": f"AT-{owner.subject}-{owner.backend}-{n}-secret",
        "refresh_token": f"RT-{owner.subject}-{owner.backend}-{n}-secret",
        "token_type": "Bearer",
        "expires_at": 1_700_003_600.0 + n,
        "scope": "repo read:user",
        "upstream_issuer": "https://github.com/login/oauth",
        "obtained_at": 1_700_000_000.0,
        "refreshed_at": None if n == 1 else 1_700_000_000.0 + n,
    }
    fields.update(changes)
    return Grant(**fields)  # type: ignore[arg-type]


def held_bytes(url: str) -> bytes:
    """Everything the store holds, as raw bytes: the SQLite file and its WAL, or every Redis
    value under the prefix."""
    if url.startswith("sqlite:"):
        path = Path(sqlite_path(url))
        files = [path, path.with_name(path.name + "-wal")]
        return b"".join(f.read_bytes() for f in files if f.exists())
    client = redis.Redis.from_url(url)
    try:
        found = []
        for name in client.scan_iter(match=PREFIX + "*"):
            kind = client.type(name)
            found.append(name)
            if kind == b"string":
                found.append(client.get(name) or b"")
            elif kind == b"hash":
                found.extend(b"%s=%s" % pair for pair in client.hgetall(name).items())
            elif kind == b"set":
                found.extend(client.smembers(name))
        return b"\n".join(found)
    finally:
        client.close()


def copy_sealed(url: str, source: GrantKey, target: GrantKey) -> None:
    """Put `source`'s sealed grant into `target`'s row, as someone writing the store would."""
    if url.startswith("sqlite:"):
        with sqlite3.connect(sqlite_path(url)) as db:
            db.execute(
                "UPDATE grants SET sealed = (SELECT sealed FROM grants WHERE grant_key = ?) "
                "WHERE grant_key = ?",
                (source.text(), target.text()),
            )
        return
    client = redis.Redis.from_url(url)
    try:
        sealed = client.hget(PREFIX + "grant:" + source.text(), "sealed")
        assert sealed
        client.hset(PREFIX + "grant:" + target.text(), "sealed", sealed)
    finally:
        client.close()


async def eventually(check: Callable[[], Awaitable[bool]], what: str, bound: float = 30) -> None:
    """Until `check()` is true (a condition waited for, not a time)."""
    try:
        async with asyncio.timeout(bound):
            while not await check():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out after {bound}s waiting for {what}") from None


def lock_holder(
    url: str, key_file: Path, name: str, ttl: float, crash: bool
) -> subprocess.Popen[str]:
    """Another process holding lock `name`: it prints `held` (and `excluded` once a second
    store of its own could not take the lock), then either dies without giving it back
    (`crash`) or gives it back when told on stdin and prints `released`."""
    return subprocess.Popen(
        [
            sys.executable,
            __file__,
            url,
            str(key_file),
            name,
            str(ttl),
            "crash" if crash else "hold",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


async def _hold(url: str, key_file: str, name: str, ttl: float, crash: bool) -> None:
    import os

    from mcp_oauth_gateway.usertokens import LockTimeout, load_keys, open_store

    loaded = load_keys(Path(key_file))
    store, second = open_store(url, loaded), open_store(url, loaded)
    async with store.lock(name, ttl, wait=30):
        print("held", flush=True)
        try:
            async with second.lock(name, ttl, wait=0):
                print("not excluded", flush=True)
        except LockTimeout:
            print("excluded", flush=True)
        if crash:
            os._exit(0)
        sys.stdin.readline()
    print("released", flush=True)
    await store.close()
    await second.close()


if __name__ == "__main__":
    url, key_file, name, ttl, mode = sys.argv[1:]
    asyncio.run(_hold(url, key_file, name, float(ttl), mode == "crash"))
