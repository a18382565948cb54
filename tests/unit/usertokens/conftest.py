"""Both stores, the same tests: SQLite in the test's directory, Redis on the session's real
redis-server (a database of its own, emptied for each test)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import redis

from mcp_oauth_gateway.usertokens import GrantStore, TokenKeys, new_key_line, open_store

from .store_support import keys

REDIS_DB = 5


@pytest.fixture(params=["sqlite", "redis"])
def store_url(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """The URL of an empty store of each kind."""
    if request.param == "sqlite":
        return f"sqlite://{tmp_path}/grants.db"
    url = request.getfixturevalue("redis_url").rsplit("/", 1)[0] + f"/{REDIS_DB}"
    client = redis.Redis.from_url(url)
    client.flushdb()
    client.close()
    return url


@pytest.fixture
def key_lines() -> list[str]:
    """The key file's lines."""
    return [new_key_line()]


@pytest.fixture
def token_keys(key_lines: list[str]) -> TokenKeys:
    return keys(*key_lines)


@pytest.fixture
def key_file(tmp_path: Path, key_lines: list[str]) -> Path:
    """The keys as a key file."""
    path = tmp_path / "user-token-keys"
    path.write_text("\n".join(key_lines) + "\n")
    path.chmod(0o600)
    return path


@pytest.fixture
async def store(store_url: str, token_keys: TokenKeys) -> AsyncIterator[GrantStore]:
    """An open store."""
    opened = open_store(store_url, token_keys)
    await opened.ping()
    yield opened
    await opened.close()
