"""The URL a proof names (`dpop/htu.py`): the request's URL and the proof's `htu` claim, both
normalized per RFC 3986 §6.2.2 and §6.2.3 (case, default port, percent-encoding, dot segments,
empty path) and compared without query or fragment; a trailing dot on the host is another
host; a Host header that would move into the path, query or user information is refused."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.dpop import DpopError, htu_of, normalize_htu


@pytest.mark.parametrize(
    ("scheme", "host", "path", "expected"),
    [
        ("https", "gw.example", "/mcp", "https://gw.example/mcp"),
        ("HTTPS", "GW.Example", "/mcp", "https://gw.example/mcp"),
        ("https", "gw.example:443", "/mcp", "https://gw.example/mcp"),
        ("http", "gw.example:80", "/mcp", "http://gw.example/mcp"),
        ("http", "gw.example:443", "/mcp", "http://gw.example:443/mcp"),
        ("https", "gw.example:8443", "/mcp", "https://gw.example:8443/mcp"),
        ("http", "127.0.0.1:8080", "/", "http://127.0.0.1:8080/"),
        ("http", "[::1]:80", "/mcp", "http://[::1]/mcp"),
        ("https", "gw.example", "/a/%7e/%7E/%41", "https://gw.example/a/~/~/A"),
        ("https", "gw.example", "/a%2fb", "https://gw.example/a%2Fb"),
        ("https", "gw.example", "/a/./b/../c", "https://gw.example/a/c"),
        ("https", "gw.example", "/a/%2e%2E/c", "https://gw.example/c"),
        ("https", "gw.example", "/a b", "https://gw.example/a%20b"),
        ("https", "gw.example.", "/mcp", "https://gw.example./mcp"),
        ("https", "bücher.example", "/", "https://xn--bcher-kva.example/"),
    ],
)
def test_the_request_url_is_normalized(scheme: str, host: str, path: str, expected: str):
    assert htu_of(scheme, host, path) == expected


@pytest.mark.parametrize(
    "claim",
    [
        "https://gw.example/mcp",
        "HTTPS://GW.EXAMPLE:443/mcp",
        "https://gw.example/mcp?a=1&b=2",
        "https://gw.example/mcp#section",
        "https://gw.example/mcp?#",
        "https://gw.example/%6d%63%70",
        "https://gw.example/x/../mcp",
        "https://gw.example/./mcp",
    ],
)
def test_spellings_of_one_url_are_one_htu(claim: str):
    assert normalize_htu(claim) == htu_of("https", "gw.example", "/mcp")


@pytest.mark.parametrize(
    "claim",
    [
        "https://gw.example/mcp/",
        "https://gw.example/MCP",
        "https://gw.example/mc%2Fp",
        "https://gw.example./mcp",
        "https://gw.example:444/mcp",
        "http://gw.example/mcp",
        "https://gw.example.evil/mcp",
    ],
)
def test_other_urls_stay_other(claim: str):
    assert normalize_htu(claim) != htu_of("https", "gw.example", "/mcp")


def test_a_path_with_an_empty_segment_is_kept_as_written():
    assert normalize_htu("https://gw.example//mcp") == "https://gw.example//mcp"


@pytest.mark.parametrize(
    "host",
    ["gw.example/mcp", "user@gw.example", "gw.example?x", "gw.example#x", "gw\\example", ""],
)
def test_a_host_that_would_change_the_urls_other_parts_is_refused(host: str):
    with pytest.raises(DpopError) as caught:
        htu_of("https", host, "/")
    assert caught.value.error == "invalid_dpop_proof"
    assert caught.value.description.startswith("the request URL")


@pytest.mark.parametrize(
    ("scheme", "host", "path"),
    [("ftp", "gw.example", "/"), ("https", "gw.example", "mcp"), ("https", "gw.example", "/a?b")],
)
def test_what_is_not_an_http_request_path_is_refused(scheme: str, host: str, path: str):
    with pytest.raises(DpopError):
        htu_of(scheme, host, path)


@pytest.mark.parametrize(
    "claim", ["/mcp", "mcp", "gw.example/mcp", "ftp://gw.example/", "https://u:p@gw.example/"]
)
def test_an_htu_claim_that_is_not_an_http_url_without_credentials_is_refused(claim: str):
    with pytest.raises(DpopError) as caught:
        normalize_htu(claim)
    assert caught.value.description.startswith(f"the DPoP proof's htu {claim!r}")
