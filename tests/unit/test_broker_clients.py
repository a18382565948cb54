from __future__ import annotations

import re

import aiohttp
import pytest
from aiohttp import web

from mcp_oauth_gateway.broker.clients import (
    CIMD_CACHE,
    CIMD_CACHE_MAX,
    ClientError,
    MetadataDocuments,
    cache_lifetime,
    issue_client_id,
    read_client_id,
)
from mcp_oauth_gateway.broker.store import MemoryStore
from mcp_oauth_gateway.registration import application_type_problem
from mcp_oauth_gateway.serving.process_state import ProcessState
from mcp_oauth_gateway.urls import parse_redirect_uri, redirect_matches

from .fake_dns import FakeLookup

SECRET = b"s" * 32


def test_signed_client_ids_round_trip_and_resist_tampering():
    client_id = issue_client_id(SECRET, "Cursor", ["http://127.0.0.1/cb"], "route-a")
    client = read_client_id(SECRET, client_id)
    assert client is not None
    assert client.redirect_uris == ("http://127.0.0.1/cb",)
    assert client.name == "Cursor"
    assert client.route == "route-a"  # signed with the rest: no one can move it elsewhere
    assert read_client_id(b"x" * 32, client_id) is None
    # Two characters changed, whatever they were (one id in 4,096 ends in "zz" already).
    forged = client_id[:-2] + ("AA" if client_id.endswith("zz") else "zz")
    assert read_client_id(SECRET, forged) is None
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
    """An aiohttp server on 127.0.0.1 serving client metadata documents over http (a document's
    `_headers` are sent as response headers); `hits` counts the fetches of each path."""
    served: dict[str, dict] = {}
    hits: dict[str, int] = {}

    async def handle(request: web.Request) -> web.Response:
        hits[request.path] = hits.get(request.path, 0) + 1
        if request.path not in served:
            return web.json_response({}, status=404)
        document = dict(served[request.path])
        headers = document.pop("_headers", {})
        return web.json_response(document, headers=headers)

    app = web.Application()
    app.router.add_get("/{tail:.*}", handle)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    yield port, served, hits
    await runner.cleanup()


async def test_allow_private_fetches_from_loopback_and_connects_to_the_checked_address(
    local_documents,
):
    port, served, _ = local_documents
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


async def test_process_state_close_closes_the_documents_session(local_documents):
    port, served, _ = local_documents
    url = f"http://127.0.0.1:{port}/c.json"
    served["/c.json"] = {"client_id": url, "redirect_uris": ["http://127.0.0.1/cb"]}
    process_state = ProcessState(allow_local_client_metadata=True)
    await process_state.documents.resolve(url)
    session = process_state.documents._session
    assert session is not None
    assert not session.closed
    await process_state.close()
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


# --- caching client metadata documents (RFC 9111, bounded) ---------------------------------

NOW = 1_700_000_000.0


@pytest.mark.parametrize(
    ("headers", "seconds"),
    [
        ({}, CIMD_CACHE),
        ({"Cache-Control": "max-age=60"}, 60),
        ({"Cache-Control": "public, max-age=600, s-maxage=120"}, 120),  # a shared cache
        ({"Cache-Control": "max-age=31536000"}, CIMD_CACHE_MAX),
        ({"Cache-Control": "max-age=-5"}, 0),
        ({"Cache-Control": "no-store"}, 0),
        ({"Cache-Control": "no-cache, max-age=600"}, 0),
        ({"Cache-Control": "private, max-age=600"}, 0),
        (
            {"Expires": "Tue, 14 Nov 2023 22:23:20 GMT", "Date": "Tue, 14 Nov 2023 22:13:20 GMT"},
            600,
        ),
        ({"Expires": "0"}, 0),  # unreadable: already expired
        ({"Cache-Control": "max-age=30", "Expires": "Thu, 01 Jan 2099 00:00:00 GMT"}, 30),
    ],
)
def test_a_documents_cache_headers_decide_how_long_it_is_reused(headers, seconds):
    assert cache_lifetime(headers, NOW) == seconds


async def test_documents_are_fetched_again_as_their_headers_say(local_documents):
    port, served, hits = local_documents
    url = f"http://127.0.0.1:{port}/kept.json"
    fresh = f"http://127.0.0.1:{port}/fresh.json"
    served["/kept.json"] = {"client_id": url, "redirect_uris": ["http://127.0.0.1/cb"]}
    served["/fresh.json"] = {
        "client_id": fresh,
        "redirect_uris": ["http://127.0.0.1/cb"],
        "_headers": {"Cache-Control": "no-store"},
    }
    documents = MetadataDocuments(allow_private=True)
    try:
        for _ in range(3):
            await documents.resolve(url)
            await documents.resolve(fresh)
    finally:
        await documents.close()
    assert hits == {"/kept.json": 1, "/fresh.json": 3}


# --- application_type and redirect URIs ------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "uris", "refused"),
    [
        (None, ["https://app.example/cb", "http://127.0.0.1/cb"], None),  # before 2026-07-28
        ("native", ["http://127.0.0.1:5000/cb", "http://[::1]/cb", "com.example.app:/cb"], None),
        ("native", ["https://app.example/cb"], "does not suit a native client"),
        ("web", ["https://app.example/cb"], None),
        ("web", ["http://localhost:6274/oauth/callback"], "does not suit a web client"),
        ("web", ["com.example.app:/cb"], "does not suit a web client"),
        ("browser", ["https://app.example/cb"], "is not one of native, web"),
        (7, ["https://app.example/cb"], "is not one of native, web"),
    ],
)
def test_application_type_decides_which_redirect_uris_a_client_may_register(kind, uris, refused):
    problem = application_type_problem(kind, uris)
    if refused is None:
        assert problem is None
    else:
        assert problem is not None
        assert refused in problem


async def test_a_metadata_document_is_held_to_its_application_type(local_documents):
    port, served, _ = local_documents
    url = f"http://127.0.0.1:{port}/web.json"
    served["/web.json"] = {
        "client_id": url,
        "application_type": "web",
        "redirect_uris": ["http://127.0.0.1/cb"],
    }
    documents = MetadataDocuments(allow_private=True)
    try:
        with pytest.raises(ClientError, match="does not suit a web client"):
            await documents.resolve(url)
    finally:
        await documents.close()
