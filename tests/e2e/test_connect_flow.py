"""The headless browser that drives the gateway's connect pages (connect_flow) fills in the pages
of the providers the tests sign in at: through a Broker route, the gateway's consent page and
oidc-provider's login and consent pages; then on to an upstream AS, each site with its own
login, chosen by the page's address."""

from __future__ import annotations

from urllib.parse import urlencode

import httpx

from broker_flow import REDIRECT, BrokerClient
from connect_flow import Login, browse
from support import unverified_claims
from upstream_servers_support import TEST_REDIRECT, s256


def test_the_browser_signs_in_through_a_broker_route(broker_b) -> None:
    client = BrokerClient(broker_b.mcp).register()
    elsewhere = Login("mallory", "x", "http://127.0.0.1:1")  # another site's login, unused
    page = browse(
        client.authorize_url(), [elsewhere, Login("alice", "x", broker_b.idp)], stop_at=REDIRECT
    )
    assert page.status == 0, page
    assert page.query["iss"] == broker_b.mcp
    assert "code" in page.query
    assert any("/mcp/oauth/" in step for step in page.met), page.met  # the gateway's consent
    assert any(step.split()[1].startswith(broker_b.idp) for step in page.met), page.met
    tokens = client.redeem(page.query["code"])
    assert tokens.status_code == 200, tokens.text


def test_a_page_asking_for_a_login_nobody_gave_stops_the_browser(broker_b) -> None:
    client = BrokerClient(broker_b.mcp).register()
    page = browse(client.authorize_url(), [Login("alice", "x", "http://127.0.0.1:1")])
    assert page.status == 200
    assert page.url.startswith(broker_b.idp), page.url


def test_the_browser_signs_in_at_two_sites_each_with_its_own_login(broker_b, upstreams) -> None:
    # A chain like a connect URL's: the route's provider (through the gateway's Broker), then
    # an upstream AS, whose authorization request is where the Broker sends its client back.
    started = upstreams("fastmcp", "oidc-provider")
    auth = started.auth
    verifier = "v" * 64
    upstream_request = {
        "response_type": "code",
        "client_id": auth.public.client_id,
        "redirect_uri": TEST_REDIRECT,
        "code_challenge": s256(verifier),
        "code_challenge_method": "S256",
        "resource": started.server.url,
    }
    chained = f"{auth.endpoint('authorization')}?{urlencode(upstream_request)}"
    client = BrokerClient(broker_b.mcp, redirect=chained).register()
    logins = [Login("alice", "x", broker_b.idp), auth.login("bob")]
    page = browse(client.authorize_url(), logins, stop_at=TEST_REDIRECT)
    assert page.status == 0, page
    assert page.query["iss"] == auth.issuer
    typed_at = [step.split()[1] for step in page.met]
    assert any(url.startswith(broker_b.idp) for url in typed_at), page.met
    assert any(url.startswith(auth.origin) for url in typed_at), page.met
    form = {
        "grant_type": "authorization_code",
        "code": page.query["code"],
        "redirect_uri": TEST_REDIRECT,
        "code_verifier": verifier,
        "client_id": auth.public.client_id,
        "resource": started.server.url,
    }
    tokens = httpx.post(auth.endpoint("token"), data=form, timeout=30).json()
    assert unverified_claims(tokens["access_token"])["sub"] == "bob", "the upstream's own login"
