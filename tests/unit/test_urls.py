"""Redirect URIs as browsers read them (`mcp_oauth_gateway.urls`): what is refused and why, and
how a request is matched against what a client registered."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.urls import (
    InvalidUri,
    navigable,
    origin_of,
    parse_redirect_uri,
    redirect_matches,
    with_query,
)

ACCEPTED = [
    ("http://127.0.0.1/cb", "http://127.0.0.1/cb"),
    ("http://127.0.0.1:33418", "http://127.0.0.1:33418/"),  # VS Code registers no path
    ("http://localhost:6276/oauth/callback", "http://localhost:6276/oauth/callback"),
    ("http://[::1]:5000/cb", "http://[::1]:5000/cb"),
    ("https://vscode.dev/redirect", "https://vscode.dev/redirect"),
    (
        "cursor://anysphere.cursor-mcp/oauth/callback",
        "cursor://anysphere.cursor-mcp/oauth/callback",
    ),  # private-use scheme (RFC 8252 §7.1)
    ("com.example.app:/callback", "com.example.app:/callback"),
    ("https://client.example/cb?tenant=a", "https://client.example/cb?tenant=a"),
    ("https://client.example/a%2Fb", "https://client.example/a%2Fb"),
]

REFUSED = [
    ("http://evil.example\\@127.0.0.1/cb", "backslash"),
    ("http://127.0.0.1/cb\r\n", "control or space"),
    ("http://127.0.0.1/c\tb", "control or space"),
    ("http://127.0.0.1/cb ", "control or space"),
    ("http://127.0.0.1/cb\x00", "control or space"),
    ("http://127.0.0.1/cb#frag", "fragment"),
    ("http://user@127.0.0.1/cb", "user information"),
    ("http://user:pw@127.0.0.1/cb", "user information"),
    ("http://@127.0.0.1/cb", "not written the way browsers read it"),
    ("http://127.1/cb", "'http://127.0.0.1/cb'"),
    ("http://0x7f000001/cb", "'http://127.0.0.1/cb'"),
    ("http://[0::1]/cb", "'http://[::1]/cb'"),
    ("HTTP://127.0.0.1/cb", "'http://127.0.0.1/cb'"),
    ("http://LOCALHOST/cb", "'http://localhost/cb'"),
    ("http://127.0.0.1:80/cb", "'http://127.0.0.1/cb'"),
    ("https://client.example/a/../cb", "'https://client.example/cb'"),
    ("https://client.example/%2e%2e/cb", "'https://client.example/cb'"),
    ("https://bücher.example/cb", "non-ASCII"),
    ("https://client。example/cb", "non-ASCII"),
    ("http://client.example/cb", "not loopback"),
    ("http://127.0.0.2/cb", "not loopback"),
    ("javascript:alert(1)", "forbidden scheme"),
    ("data:text/html,x", "forbidden scheme"),
    ("file:///etc/passwd", "forbidden scheme"),
    ("/cb", "not a valid absolute URL"),
    ("http://127.0.0.1:99999/cb", "not a valid absolute URL"),
    ("https:///cb", "not written the way browsers read it"),
    ("", "non-empty strings"),
    (None, "non-empty strings"),
    ("https://client.example/" + "a" * 2100, "longer than"),
]


@pytest.mark.parametrize(("text", "href"), ACCEPTED)
def test_accepted_redirect_uris(text, href):
    assert parse_redirect_uri(text).href == href


@pytest.mark.parametrize(("text", "why"), REFUSED)
def test_refused_redirect_uris_say_why(text, why):
    with pytest.raises(InvalidUri, match=None) as raised:
        parse_redirect_uri(text)
    assert why in str(raised.value), str(raised.value)


def test_matching_is_exact_but_for_the_loopback_port():
    registered = ("http://127.0.0.1/cb", "https://client.example/cb", "http://localhost:8000/a?x=1")

    def match(uri: str) -> bool:
        return redirect_matches(registered, parse_redirect_uri(uri))

    assert match("http://127.0.0.1/cb")
    assert match("http://127.0.0.1:61234/cb")
    assert match("http://localhost:9/a?x=1")
    assert match("https://client.example/cb")
    assert not match("https://client.example:8443/cb")  # the port is free only on loopback
    assert not match("http://[::1]:61234/cb")  # another loopback host is another URI
    assert not match("http://127.0.0.1:61234/cb/")
    assert not match("http://127.0.0.1:61234/cb?x=1")
    assert not match("https://127.0.0.1/cb")
    assert not match("http://localhost:9/a?x=2")


def test_a_registration_made_before_these_rules_never_matches():
    assert not redirect_matches(
        ("http://evil.example\\@127.0.0.1/cb",), parse_redirect_uri("http://127.0.0.1/cb")
    )


def test_path_only_registration_matches_its_slash_form():
    assert redirect_matches(
        ("http://127.0.0.1:33418",), parse_redirect_uri("http://127.0.0.1:5555/")
    )


def test_navigable_urls_from_provider_metadata():
    assert navigable("https://idp.example/authorize?x=1") == "https://idp.example/authorize?x=1"
    assert (
        navigable("https://idp.example/auth\r\nSet-Cookie: x")
        == "https://idp.example/authSet-Cookie:%20x"
    )  # what a browser would make of it, no CR/LF
    assert navigable("javascript:alert(1)") is None
    assert navigable("https://u:p@idp.example/") is None
    assert navigable("https://idp.example/#x") is None
    assert navigable(42) is None


def test_with_query_and_origin():
    assert with_query("http://127.0.0.1/cb", "a=1") == "http://127.0.0.1/cb?a=1"
    assert with_query("http://127.0.0.1/cb?x=1", "a=1") == "http://127.0.0.1/cb?x=1&a=1"
    assert origin_of("https://Client.Example:443/cb") == "https://client.example"
    assert origin_of("cursor://anysphere.cursor-mcp/cb") is None
