"""What the Broker remembers of a consent (`broker/consent.py`), as pure decisions: exactly one
request (route, provider, client, redirect URI, set of scopes), one cookie per route, and never a
redirect URI that another program on the user's device could receive."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.broker import consent

ROUTE = "a" * 32
PROVIDER = (0, "http://idp.test/")
CLIENT = "mcpgw.client"
REDIRECT = "https://client.example/cb"


def digest(**changes: object) -> str:
    request: dict[str, object] = {
        "route": ROUTE,
        "provider": PROVIDER,
        "client_id": CLIENT,
        "redirect_uri": REDIRECT,
        "scope": "openid profile",
        **changes,
    }
    return consent.consent_digest(**request)  # type: ignore[arg-type]


def test_a_consent_names_every_part_of_the_request():
    remembered = digest()
    others = [
        digest(route="b" * 32),  # another Broker route (another tenant's, say)
        digest(provider=(1, "http://idp.test/")),  # another provider
        digest(provider=(0, "http://other-idp.test/")),  # another one at the same place
        digest(client_id="mcpgw.other"),
        digest(redirect_uri=REDIRECT + "2"),
        digest(redirect_uri="https://client.example:8443/cb"),
        digest(scope="openid profile offline_access"),  # wider: a step-up, refresh tokens
        digest(scope="openid"),  # narrower: asked again too (documented)
        digest(scope=""),
    ]
    assert remembered not in others
    assert len(set(others)) == len(others)
    # One set of scopes however it is written.
    assert digest(scope="profile openid") == remembered
    assert digest(scope="openid  profile openid") == remembered


def test_no_two_requests_spell_the_same_digest():
    # Parts are kept apart, not concatenated: moving text from one part to the next is another
    # request.
    assert digest(client_id="a b", scope="c") != digest(client_id="a", scope="b c")
    assert digest(route="x:y", client_id="z") != digest(route="x", client_id="y:z")


def test_each_route_has_a_consent_cookie_of_its_own():
    a, b = (
        consent.cookie_names("https://gw", "a" * 32),
        consent.cookie_names("https://gw", "b" * 32),
    )
    assert a[0] != b[0]
    assert a[1] == b[1] == "__Host-mcp-authz"  # the browser is one browser
    assert a[0].startswith("__Host-mcp-consent-")  # https: the prefix that pins host and path


@pytest.mark.parametrize(
    ("redirect", "why"),
    [
        ("http://127.0.0.1:47001/cb", "loopback"),
        ("http://127.0.0.1/cb", "loopback"),
        ("http://localhost:5173/cb", "loopback"),
        ("http://[::1]:8080/cb", "loopback"),
        ("https://127.0.0.1:8443/cb", "loopback"),
        ("https://127.1.2.3/cb", "loopback"),
        ("https://localhost/cb", "loopback"),
        ("https://localhost./cb", "loopback"),
        ("https://app.localhost/cb", "loopback"),
        ("https://[::1]/cb", "loopback"),
        ("https://[::ffff:7f00:1]/cb", "loopback"),
        ("https://[::7f00:1]/cb", "loopback"),
        ("https://0.0.0.0/cb", "loopback"),
        ("https://[::]/cb", "loopback"),
        ("com.example.app:/oauth/cb", "private-use URI scheme com.example.app:"),
        ("cursor://anysphere.cursor-retrieval/oauth/cb", "private-use URI scheme cursor:"),
        ("https://client.example/cb", None),
        ("https://client.example:8443/cb", None),
        ("https://93.184.215.14/cb", None),
        ("https://localhost.example/cb", None),
        ("https://mylocalhost/cb", None),
    ],
)
def test_consent_is_never_remembered_for_a_redirect_another_program_could_receive(redirect, why):
    found = consent.unattended_by(redirect)
    if why is None:
        assert found is None
    else:
        assert found is not None
        assert why in found, found
