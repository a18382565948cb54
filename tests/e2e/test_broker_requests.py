"""What a 2026-07-28 client sends the Broker, with a real gateway and oidc-provider: the RFC 8707
`resource` on authorization and token requests (checked against the route's resource, passed on
to the provider), `application_type` at registration (it decides the redirect URIs a client may
register), and `iss` on error redirects too."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import httpx
from headless_login import sign_in

from broker_calls import CALLBACK, authorize_url, redeem, register


def registration(stack, **body: object) -> httpx.Response:
    return httpx.post(
        f"{stack.gateway}/.well-known/oauth-authorization-server/mcp/client-registration",
        json={"client_name": "Typed", **body},
    )


def test_a_foreign_resource_at_authorize_goes_back_as_invalid_target_with_iss(broker_b):
    client_id = register(broker_b)
    answer = httpx.get(authorize_url(broker_b, client_id, resource="https://other.example/mcp"))
    assert answer.status_code == 302
    query = parse_qs(urlsplit(answer.headers["location"]).query)
    assert answer.headers["location"].startswith(CALLBACK)
    assert query["error"] == ["invalid_target"]
    assert query["iss"] == [f"{broker_b.gateway}/mcp"]
    assert query["state"] == ["client-state-1"]
    assert "https://other.example/mcp" in query["error_description"][0]


def test_the_routes_resource_is_accepted_and_passed_to_the_provider(broker_b):
    client_id = register(broker_b)
    # The consent page is skipped only with a consent cookie: read the provider redirect from
    # the consent form's answer instead, by accepting the page as a browser would.
    with httpx.Client() as browser:
        page = browser.get(authorize_url(broker_b, client_id, resource=f"{broker_b.mcp}/"))
        assert page.status_code == 200
        request_id = page.text.split('name="request" value="')[1].split('"')[0]
        answer = browser.post(
            f"{broker_b.gateway}/mcp/oauth/authorize",
            data={"request": request_id, "decision": "allow"},
            headers={"Origin": broker_b.gateway},
        )
    assert answer.status_code == 302
    upstream = parse_qs(urlsplit(answer.headers["location"]).query)
    assert upstream["resource"] == [broker_b.mcp]  # the route's own spelling


async def test_a_foreign_resource_at_the_token_endpoint_is_invalid_target(broker_b):
    client_id = register(broker_b)
    query = await sign_in(authorize_url(broker_b, client_id), "alice", "x", CALLBACK)
    refused = httpx.post(
        f"{broker_b.gateway}/mcp/oauth/token",
        data={
            "grant_type": "authorization_code",
            "code": query["code"],
            "client_id": client_id,
            "redirect_uri": CALLBACK,
            "code_verifier": "v" * 64,
            "resource": "https://other.example/mcp",
        },
    )
    assert refused.status_code == 400
    assert refused.json()["error"] == "invalid_target"
    # Refused before the code was looked at: it still redeems.
    assert redeem(broker_b, client_id, query["code"]).status_code == 200


def test_application_type_decides_the_redirect_uris_at_registration(broker_b):
    native = registration(
        broker_b, application_type="native", redirect_uris=["http://127.0.0.1:5000/cb"]
    )
    assert native.status_code == 201, native.text
    assert native.json()["application_type"] == "native"
    web = registration(broker_b, application_type="web", redirect_uris=["http://127.0.0.1/cb"])
    assert web.status_code == 400
    assert web.json()["error"] == "invalid_redirect_uri"
    assert "does not suit a web client" in web.json()["error_description"]
    unknown = registration(broker_b, application_type="tv", redirect_uris=["https://a.example/cb"])
    assert unknown.status_code == 400
