"""The headless browser that drives the gateway's connect pages (connect_flow) fills in the pages
of the route providers the tests sign in at: through a Broker route, the gateway's consent page
and oidc-provider's login and consent pages, with the login chosen by the page's address."""

from __future__ import annotations

from broker_flow import REDIRECT, BrokerClient
from connect_flow import Login, browse


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
