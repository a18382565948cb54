from __future__ import annotations

import pytest

from mcp_oauth_gateway.broker.clients import (
    ClientError,
    MetadataDocuments,
    issue_client_id,
    read_client_id,
    redirect_matches,
)
from mcp_oauth_gateway.broker.store import MemoryStore

SECRET = b"s" * 32


def test_signed_client_ids_round_trip_and_resist_tampering():
    client_id = issue_client_id(SECRET, "Cursor", ["http://127.0.0.1/cb"])
    client = read_client_id(SECRET, client_id)
    assert client is not None
    assert client.redirect_uris == ("http://127.0.0.1/cb",)
    assert client.name == "Cursor"
    assert read_client_id(b"x" * 32, client_id) is None
    assert read_client_id(SECRET, client_id[:-2] + "zz") is None
    assert read_client_id(SECRET, "mcp-public") is None


@pytest.mark.parametrize(("registered", "requested", "ok"), [
    (("http://127.0.0.1:3000/cb",), "http://127.0.0.1:4000/cb", True),  # RFC 8252 port
    (("http://localhost/cb",), "http://localhost:9/cb", True),
    (("http://127.0.0.1/cb",), "http://127.0.0.1:9/other", False),
    (("https://app.example/cb",), "https://app.example/cb", True),
    (("https://app.example/cb",), "https://app.example:444/cb", False),
    (("https://app.example/cb",), "https://app.example/cb?x=1", False),
    (("cursor://auth/cb",), "cursor://auth/cb", True),
])
def test_redirect_matching(registered, requested, ok):
    assert redirect_matches(registered, requested) is ok


@pytest.mark.parametrize(("url", "reason"), [
    ("http://example.com/client.json", "https, with a path"),
    ("https://example.com/", "https, with a path"),
    ("https://user@example.com/c.json", "https, with a path"),
    ("https://127.0.0.1/client.json", "non-public address 127.0.0.1"),
    ("https://10.1.2.3/client.json", "non-public address 10.1.2.3"),
    ("https://[::1]/client.json", "non-public address ::1"),
])
async def test_metadata_documents_refuse_unsafe_urls(url, reason):
    with pytest.raises(ClientError, match=reason):
        await MetadataDocuments(allow_private=False).resolve(url, session=None)


async def test_memory_store_take_is_single_use():
    store = MemoryStore()
    await store.put("code", "c1", {"v": 1}, ttl=60)
    assert await store.take("code", "c1") == {"v": 1}
    assert await store.take("code", "c1") is None
    await store.put("code", "c2", {"v": 2}, ttl=-1)
    assert await store.take("code", "c2") is None
