from __future__ import annotations

import re

import aiohttp
import pytest
from aiohttp import web

from mcp_oauth_gateway.broker.clients import (
    ClientError,
    MetadataDocuments,
    issue_client_id,
    read_client_id,
)
from mcp_oauth_gateway.broker.store import MemoryStore
from mcp_oauth_gateway.serving.runtime import BrokerRuntime
from mcp_oauth_gateway.urls import parse_redirect_uri, redirect_matches

from .test_addresses import FakeLookup

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


@pytest.mark.parametrize(
    ("registered", "requested", "ok"),
    [
        (("http://127.0.0.1:3000/cb",), "http://127.0.0.1:4000/cb", True),  # RFC 8252 port
        (("http://localhost/cb",), "http://localhost:9/cb", True),
        (("http://127.0.0.1/cb",), "http://127.0.0.1:9/other", False),
        (("https://app.example/cb",), "https://app.example/cb", True),
        (("https://app.example/cb",), "https://app.example:444/cb", False),
        (("https://app.example/cb",), "https://app.example/cb?x=1", False),
        (("cursor://auth/cb",), "cursor://auth/cb", True),
    ],
)
def test_redirect_matching(registered, requested, ok):
    assert redirect_matches(registered, parse_redirect_uri(requested)) is ok


@pytest.fixture
def no_connections(monkeypatch):
    """Fails the test (instead of connecting) if aiohttp is asked for a connection at all."""
    attempts: list[str] = []

    async def refuse(self, req, *args, **kwargs):
        attempts.append(str(req.url))
        raise AssertionError(f"tried to connect for {req.url}")

    monkeypatch.setattr(aiohttp.BaseConnector, "connect", refuse)
    return attempts


@pytest.fixture
def no_sockets(monkeypatch):
    """Fails the test if aiohttp opens a socket (its resolver may still be asked)."""
    attempts: list[object] = []

    async def refuse(self, *args, **kwargs):
        attempts.append(kwargs.get("addr_infos"))
        raise AssertionError("tried to open a connection")

    monkeypatch.setattr(aiohttp.TCPConnector, "_wrap_create_connection", refuse)
    return attempts


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        ("http://example.com/client.json", "must be an https URL"),
        ("https://example.com/", "has no path"),
        ("https://user@example.com/c.json", "user information"),
        ("https://evil.example\\@example.com/c.json", "backslash"),
        ("https://example.com/c.json#x", "fragment"),
        ("https://EXAMPLE.com/c.json", "not written the way browsers read it"),
        ("https://127.0.0.1/client.json", "non-public address 127.0.0.1"),
        ("https://10.1.2.3/client.json", "non-public address 10.1.2.3"),
        ("https://[::1]/client.json", "non-public address ::1"),
        ("https://100.64.0.1/client.json", "non-public address 100.64.0.1 \\(Shared Address Space"),
        ("https://169.254.169.254/latest/meta-data", "non-public address 169.254.169.254"),
        # Browsers read both as 127.0.0.1: refused as written differently from what they mean.
        ("https://2130706433/client.json", "'https://127.0.0.1/client.json'"),
        ("https://\uff11\uff12\uff17.0.0.1/c.json", "non-ASCII"),
    ],
)
async def test_metadata_documents_refuse_unsafe_urls(url, reason, no_connections):
    documents = MetadataDocuments(allow_private=False)
    try:
        with pytest.raises(ClientError, match=reason):
            await documents.resolve(url)
    finally:
        await documents.close()
    assert no_connections == []


async def test_memory_store_take_is_single_use():
    store = MemoryStore()
    await store.put("code", "c1", {"v": 1}, ttl=60)
    assert await store.take("code", "c1") == {"v": 1}
    assert await store.take("code", "c1") is None
    await store.put("code", "c2", {"v": 2}, ttl=-1)
    assert await store.take("code", "c2") is None


@pytest.mark.parametrize(
    ("url", "reason"),
    [
        (
            "https://100.64.0.1/client.json",
            "client metadata host 100.64.0.1 resolves to the "
            "non-public address 100.64.0.1 (Shared Address Space, RFC 6598); refused",
        ),
        (
            "https://[::ffff:a00:1]/c.json",
            "client metadata host ::ffff:a00:1 resolves to the "
            "non-public address ::ffff:a00:1 (IPv4-mapped Address, RFC 4291 §2.5.5.2: 10.0.0.1 is "
            "Private-Use, RFC 1918); refused",
        ),
    ],
)
async def test_private_literal_hosts_are_refused_before_any_connection(url, reason, no_connections):
    documents = MetadataDocuments(allow_private=False)
    try:
        with pytest.raises(ClientError) as refused:
            await documents.resolve(url)
    finally:
        await documents.close()
    assert refused.value.error == "invalid_client"
    assert refused.value.description == reason
    assert no_connections == []


async def test_a_name_with_one_private_address_is_refused_before_connecting(no_sockets):
    lookup = FakeLookup({"cimd.example": ["8.8.8.8", "100.100.100.200"]})
    documents = MetadataDocuments(allow_private=False, lookup=lookup)
    try:
        with pytest.raises(
            ClientError,
            match=re.escape(
                "client metadata host cimd.example resolves to the non-public address "
                "100.100.100.200 (Shared Address Space, RFC 6598); refused"
            ),
        ):
            await documents.resolve("https://cimd.example/client.json")
    finally:
        await documents.close()
    assert lookup.calls == ["cimd.example"]
    assert no_sockets == []


@pytest.fixture
async def local_documents():
    """An aiohttp server on 127.0.0.1 serving client metadata documents over http."""
    served: dict[str, dict] = {}

    async def handle(request: web.Request) -> web.Response:
        if request.path not in served:
            return web.json_response({}, status=404)
        return web.json_response(served[request.path])

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield port, served
    await runner.cleanup()


async def test_allow_private_fetches_from_loopback_and_connects_to_the_checked_address(
    local_documents,
):
    port, served = local_documents
    literal = f"http://127.0.0.1:{port}/clients/a.json"
    # "cimd.test" exists only in the fake lookup: fetching it proves aiohttp connected to the
    # address the resolver checked instead of resolving the name again.
    named = f"http://cimd.test:{port}/clients/b.json"
    for url in (literal, named):
        served[url.split(str(port), 1)[1]] = {
            "client_id": url,
            "client_name": "Local",
            "redirect_uris": ["http://127.0.0.1/cb"],
        }
    lookup = FakeLookup({"cimd.test": ["127.0.0.1"]})
    documents = MetadataDocuments(allow_private=True, lookup=lookup)
    try:
        assert (await documents.resolve(literal)).redirect_uris == ("http://127.0.0.1/cb",)
        client = await documents.resolve(named)
        assert client.client_id == named
        assert client.kind == "cimd"
        assert lookup.calls == ["cimd.test"]
        with pytest.raises(ClientError, match="answered HTTP 404"):
            await documents.resolve(f"http://127.0.0.1:{port}/missing.json")
    finally:
        await documents.close()


@pytest.mark.parametrize(
    ("url", "address"),
    [
        ("http://0.0.0.0:8080/c.json", "0.0.0.0"),
        ("http://[::]:8080/c.json", "::"),
        ("http://224.0.0.1/c.json", "224.0.0.1"),
        ("http://zero.test:8080/c.json", "0.0.0.0"),  # a name takes the resolver's path
    ],
)
async def test_allow_private_still_refuses_unspecified_and_multicast(url, address, no_sockets):
    documents = MetadataDocuments(allow_private=True, lookup=FakeLookup({"zero.test": ["0.0.0.0"]}))
    try:
        with pytest.raises(ClientError, match=f"non-public address {address} "):
            await documents.resolve(url)
    finally:
        await documents.close()
    assert no_sockets == []


async def test_broker_runtime_close_closes_the_documents_session(local_documents):
    port, served = local_documents
    url = f"http://127.0.0.1:{port}/c.json"
    served["/c.json"] = {"client_id": url, "redirect_uris": ["http://127.0.0.1/cb"]}
    runtime = BrokerRuntime(allow_local_client_metadata=True)
    await runtime.documents.resolve(url)
    session = runtime.documents._session
    assert session is not None
    assert not session.closed
    await runtime.close()
    assert session.closed


def test_client_names_on_the_consent_page_cannot_pose_as_others():
    from mcp_oauth_gateway.broker.pages import shown

    assert shown("Claude\u202e edoC") == "Claude edoC"  # a bidi override would reverse it
    assert shown("Cur\u200bsor") == "Cursor"
    assert shown("<script>x</script>") == "&lt;script&gt;x&lt;/script&gt;"
    assert shown("a\n\tb") == "a b"
    assert shown("\u200b") == "(unnamed client)"
    assert shown("x" * 300).endswith("…")
    assert len(shown("x" * 300)) == 101
