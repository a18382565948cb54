"""The gateway's redirect-URI verdicts against a real browser's reading of the same text.

The oracle is headless Chromium's own URL parser (`new URL()` in a page: Chromium's, not the
`ada` library the gateway uses), so parser disagreements show up as failures. Hypothesis builds
URIs around a registered loopback redirect out of the pieces that make parsers disagree:
backslashes, tabs and newlines, `@`, percent-encoded dots and slashes, IPv4 shorthands, IPv6,
IDNA and full-width dots, ports, and stray characters anywhere.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from playwright.sync_api import Page, sync_playwright

from browser_support import CHROMIUM_FLAGS
from mcp_oauth_gateway.urls import InvalidUri, parse_redirect_uri, redirect_matches

REGISTERED = ("http://127.0.0.1/cb", "http://localhost:8123/cb?app=1", "https://client.example/cb")
READ = """u => { try { const x = new URL(u);
  return {href: x.href, protocol: x.protocol, hostname: x.hostname, port: x.port,
          pathname: x.pathname, search: x.search, username: x.username,
          password: x.password, hash: x.hash}; } catch (e) { return null; } }"""

# (what a well-formed redirect URI has, the variants that make parsers disagree) per part.
PARTS = [
    (["http", "https"], ["HTTP", "hTtP", "javascript", "data", "cursor", " http", "http\t"]),
    (["://"], [":/", ":\\\\", ":///", ":\\/", ":/\\", ":"]),
    (
        [""],
        [
            "evil.example@",
            "evil.example\\@",
            "a:b@",
            "@",
            "evil.example%40",
            "127.0.0.1@",
            ":@",
            "evil.example:80@",
        ],
    ),
    (
        ["127.0.0.1", "localhost", "[::1]", "client.example"],
        [
            "127.1",
            "0x7f.0.0.1",
            "0177.0.0.1",
            "2130706433",
            "[0:0::1]",
            "[::ffff:127.0.0.1]",
            "LOCALHOST",
            "localhost.",
            "127.0.0.1.",
            "evil.example",
            "CLIENT.example",
            "xn--bcher-kva.example",
            "bücher.example",
            "127.0.0.1%2f",
            "127%2e0.0.1",
            "127。0。0。1",
            "client。example",
            "127.0.0.1\\evil.example",
            "",
        ],
    ),
    (["", ":8123", ":5000"], [":80", ":443", ":0", ":08123", ":65535", ":65536", ":", ":8123\\"]),
    (
        ["/cb"],
        [
            "/CB",
            "/c%62",
            "/x/../cb",
            "/%2e%2e/cb",
            "/.%2e/cb",
            "/cb/",
            "\\cb",
            "/c\tb",
            "/cb%2f",
            "//cb",
            "/cb/.",
            "",
            "/",
        ],
    ),
    (["", "?app=1"], ["?", "?app=1&x=2", "?app=%31", "?#"]),
    ([""], ["#", "#x", "#@evil.example"]),
]
STRAY = [
    "\t",
    "\n",
    "\r",
    " ",
    "\x00",
    "\\",
    "@",
    "#",
    "%",
    "/",
    ":",
    "[",
    "]",
    "。",
    "\u3000",
    "\u200b",
    "\x7f",
    "?",
    "%0a",
]


@st.composite
def candidate_uris(draw: st.DrawFn) -> str:
    """Mostly well-formed URIs with one or two parts swapped for a troublesome variant, and
    sometimes a stray character anywhere: close enough to valid that many are accepted."""
    odd = draw(st.sets(st.integers(0, len(PARTS) - 1), max_size=2))
    text = "".join(
        draw(st.sampled_from(variants if i in odd else clean))
        for i, (clean, variants) in enumerate(PARTS)
    )
    for position, char in draw(
        st.lists(st.tuples(st.integers(0, 80), st.sampled_from(STRAY)), max_size=1)
    ):
        at = min(position, len(text))
        text = text[:at] + char + text[at:]
    return text


@pytest.fixture(scope="module")
def browser_page() -> Iterator[Page]:
    assert shutil.which("chromium"), "chromium is required: `make test` installs it"
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS
        )
        page = browser.new_page()
        page.set_content("<title>oracle</title>")
        yield page
        browser.close()


def browser_reading(page: Page, text: str) -> dict[str, str] | None:
    """What Chromium makes of `text` as an absolute URL (None: not one)."""
    return page.evaluate(READ, text)


def test_the_oracle_reads_the_reported_attack_like_a_browser(browser_page):
    reading = browser_reading(browser_page, "http://evil.example\\@127.0.0.1/cb")
    assert reading is not None
    assert reading["hostname"] == "evil.example"  # why the URI must be refused


@settings(
    max_examples=400,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(text=candidate_uris())
def test_an_accepted_redirect_uri_is_exactly_what_the_browser_reads(browser_page, text):
    try:
        ours = parse_redirect_uri(text)
    except InvalidUri:
        return  # refusing is always safe; what must hold is below
    reading = browser_reading(browser_page, text)
    assert reading is not None, f"accepted {text!r}, which the browser cannot parse"
    assert reading["href"] == ours.href, (text, reading)
    assert reading["hostname"] == ours.hostname, (text, reading)
    assert (reading["username"], reading["password"], reading["hash"]) == ("", "", "")
    assert ours.path_and_query == reading["pathname"] + reading["search"]
    if redirect_matches(REGISTERED, ours):
        # Where the browser would go: a registered URI's host and path, port aside only on
        # loopback http.
        allowed = []
        for uri in REGISTERED:
            have = browser_reading(browser_page, uri)
            assert have is not None
            allowed.append(
                (have["protocol"], have["hostname"], have["pathname"], have["search"], have["port"])
            )
        where = (
            reading["protocol"],
            reading["hostname"],
            reading["pathname"],
            reading["search"],
            reading["port"],
        )
        loopback = reading["protocol"] == "http:" and reading["hostname"] in (
            "127.0.0.1",
            "[::1]",
            "localhost",
        )
        assert where in allowed or (loopback and where[:4] in [a[:4] for a in allowed]), (
            text,
            reading,
        )
