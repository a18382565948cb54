"""Two realms of real Keycloak 26 as two providers on one route, in Broker mode (a Facade policy
fronts one provider's metadata, so several providers need the gateway as the authorization
server). Each realm is set up by the product's own `idp keycloak --realm … --mode Broker`; the
policy it wrote for the first gets the second as `providers[1]`, each with its login hint domain,
and a rule that names the group per issuer.

Tokens of either realm are accepted, a third realm's (same server, same audience) is 401; a
group of the right name in the wrong realm does not let a user in; a login hint sends the
browser to its realm's login page, and a user of each realm signs in through the gateway. Both
realms are set up for the backend's token exchange (`--token-exchange-client`), and one
`tokenExchange` on the route exchanges each caller's token at the caller's own realm.

Real Keycloak only: the dev IdP's Keycloak flavour serves the master realm alone.
"""

from __future__ import annotations

import shutil
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from html.parser import HTMLParser
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
from headless_login import sign_in

from broker_calls import CALLBACK, VERIFIER, redeem, register, s256
from keycloak_realm_support import (
    audiences,
    edit_resources,
    of_kind,
    serving,
    user_token,
    verified_claims,
)
from keycloak_support import USER_PASSWORD, Provider, RealKeycloak, idp_keycloak
from support import (
    INITIALIZE,
    backend_requests,
    free_port,
    mcp_headers,
    unverified_claims,
    wait_for_keyset,
)

SECRET_FILE = "token-exchange-client-secret"
CLIENT, AUDIENCE = "gateway-exchange", "mcp-backend"  # the backend's token exchange, both realms


@dataclass(frozen=True)
class Realm:
    name: str
    group: str  # the group the route's rule asks of this realm's users
    domain: str  # its login hint domain
    title: str  # its button on the gateway's consent page
    user: str  # a member of `group`


STAFF = Realm("realms-staff", "staff", "staff.example", "Staff SSO", "alice")
PARTNER = Realm("realms-partner", "partners", "partner.example", "Partner login", "bob")
# Same server, same resource audience, set up the same way, but not one of the route's providers.
STRANGER = Realm("realms-stranger", "users", "stranger.example", "Stranger", "alice")
ON_THE_ROUTE = (STAFF, PARTNER)


@dataclass
class Route:
    provider: RealKeycloak
    gateway: str
    backend: str

    @property
    def mcp(self) -> str:
        return f"{self.gateway}/mcp"

    def issuer(self, realm: Realm) -> str:
        return self.provider.issuer(realm.name)


def _set_up(provider: Provider, realm: Realm, resource: str, backend: str, out: Path) -> None:
    exchange = ("--token-exchange-client", CLIENT, "--token-exchange-audience", AUDIENCE)
    done = idp_keycloak(
        provider,
        *("--realm", realm.name, "--group", realm.group, "--mode", "Broker"),
        *("--user", f"{realm.user}:{realm.user}@{realm.domain}"),
        *("--resource", resource, "--backend", f"http://{backend}/mcp", "--output-dir", str(out)),
        *(exchange if realm in ON_THE_ROUTE else ()),
    )
    assert done.returncode == 0, done.stderr


def _in_a_namesake_group(provider: Provider, realm: Realm, username: str, group: str) -> None:
    """`username` of `realm`, in a group of `realm` named as the other realm's rule asks."""
    user = provider.add_user(username, realm.name)
    created = provider.admin("POST", "/groups", realm.name, json={"name": group})
    assert created.status_code == 201, created.text
    group_id = created.headers["location"].rsplit("/", 1)[-1]
    joined = provider.admin("PUT", f"/users/{user}/groups/{group_id}", realm.name)
    assert joined.status_code == 204, joined.text


def _provider_entry(issuer: str, realm: Realm, resource: str) -> dict[str, Any]:
    return {
        "issuer": issuer,
        "name": realm.title,
        "kind": "Keycloak",
        "clientId": "mcp-gateway",
        "loginHintDomains": [realm.domain],
        "audiences": [resource],
        "jwks": {"remote": {"url": f"{issuer}/protocol/openid-connect/certs"}},
    }


def _two_providers(provider: Provider, resource: str) -> Callable[[list[dict[str, Any]]], None]:
    """Edits the policy written for STAFF: PARTNER beside it, and the group rule per issuer."""

    def edit(documents: list[dict[str, Any]]) -> None:
        traffic = of_kind(documents, "GatewayPolicy")["spec"]["traffic"]
        providers = traffic["jwtAuthentication"]["providers"]
        staff = _provider_entry(provider.issuer(STAFF.name), STAFF, resource)
        # What idp keycloak wrote (its issuer, audience and keyset), named and given its domain.
        providers[0].update({k: staff[k] for k in ("name", "kind", "clientId", "loginHintDomains")})
        providers.append(_provider_entry(provider.issuer(PARTNER.name), PARTNER, resource))
        rule = " || ".join(
            f'(jwt.iss == "{provider.issuer(r.name)}" && "{r.group}" in jwt.groups)'
            for r in ON_THE_ROUTE
        )
        traffic["authorization"]["policy"]["matchExpressions"] = [rule]

    return edit


@pytest.fixture(scope="module")
def route(
    real_keycloak: RealKeycloak, backend: str, logs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Route]:
    tmp = tmp_path_factory.mktemp("provider-a-realms")
    gateway = f"http://127.0.0.1:{free_port()}"
    for realm in (*ON_THE_ROUTE, STRANGER):
        if realm is PARTNER:
            # The policy names one secret file: the partner realm's exchange client is made
            # with the secret the staff realm's run wrote (idp keycloak keeps a secret it finds).
            (tmp / realm.name).mkdir()
            shutil.copy2(tmp / STAFF.name / SECRET_FILE, tmp / realm.name / SECRET_FILE)
        _set_up(real_keycloak, realm, f"{gateway}/mcp", backend, tmp / realm.name)
    _in_a_namesake_group(real_keycloak, PARTNER, "mallory", STAFF.group)
    _in_a_namesake_group(real_keycloak, STAFF, "eve", PARTNER.group)
    edit_resources(
        tmp / STAFF.name / "gateway.yaml", _two_providers(real_keycloak, f"{gateway}/mcp")
    )
    with serving(tmp / STAFF.name, logs, "gateway-a-realms") as base:
        for realm in ON_THE_ROUTE:
            wait_for_keyset(base, user_token(real_keycloak, realm.name, realm.user))
        yield Route(real_keycloak, base, backend)


@pytest.mark.parametrize(
    ("realm", "user", "groups", "status"),
    [
        (STAFF, "alice", ["staff"], 200),
        (PARTNER, "bob", ["partners"], 200),
        (PARTNER, "mallory", ["staff"], 403),  # the staff realm's group name, in the wrong realm
        (STAFF, "eve", ["partners"], 403),  # the partner realm's group name, in the wrong realm
        (STRANGER, "alice", ["users"], 401),  # a token of the resource from a realm not routed
    ],
    ids=["staff", "partner", "partner-in-staff-namesake", "staff-in-partner-namesake", "third"],
)
def test_each_realms_tokens_and_its_own_group_rule(route, realm, user, groups, status):
    token = user_token(route.provider, realm.name, user)
    claims = unverified_claims(token)
    assert claims["iss"] == route.issuer(realm)
    assert route.mcp in claims["aud"]  # every realm's tokens name the resource
    assert claims["groups"] == groups
    answer = httpx.post(route.mcp, json=INITIALIZE, headers=mcp_headers(token), timeout=30)
    assert answer.status_code == status, answer.text
    if status == 401:
        assert "is not one of this route's issuers" in answer.json()["error_description"]


@pytest.mark.parametrize("realm", ON_THE_ROUTE, ids=[r.name for r in ON_THE_ROUTE])
def test_the_backend_gets_a_token_exchanged_at_the_callers_realm(route, realm):
    """One `tokenExchange` on the route: each caller's token goes to its own realm's token
    endpoint, and the backend gets that realm's token for its audience, never the caller's."""
    token = user_token(route.provider, realm.name, realm.user)
    mark = uuid.uuid4().hex
    headers = mcp_headers(token, **{"Mcp-Param-Mark": mark})
    answer = httpx.post(route.mcp, json=INITIALIZE, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    received = [
        dict(r["headers"])
        for r in backend_requests(route.backend)
        if dict(r["headers"]).get("mcp-param-mark") == mark
    ]
    assert len(received) == 1, received
    sent = received[0]["authorization"].removeprefix("Bearer ")
    assert sent != token
    claims = verified_claims(route.provider, realm.name, sent)
    assert claims["iss"] == route.issuer(realm)
    assert audiences(claims) == [AUDIENCE]
    assert claims["azp"] == CLIENT
    assert claims["sub"] == unverified_claims(token)["sub"]


def _authorize(route: Route, client_id: str, **extra: str) -> str:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": CALLBACK,
        "state": "s-1",
        "code_challenge": s256(VERIFIER),
        "code_challenge_method": "S256",
        "scope": "openid profile",
        **extra,
    }
    return f"{route.gateway}/mcp/oauth/authorize?{urlencode(params)}"


class _FormAction(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "form" and self.action is None:
            self.action = dict(attrs).get("action") or ""


def test_the_consent_page_offers_both_realms(route):
    page = httpx.get(_authorize(route, register(route)))
    assert page.status_code == 200
    for index, realm in enumerate(ON_THE_ROUTE):
        assert f'value="allow-{index}">Allow, sign in with {realm.title}</button>' in page.text


@pytest.mark.parametrize("index", [0, 1], ids=[r.name for r in ON_THE_ROUTE])
def test_a_login_hint_lands_on_its_realms_login_page(route, index):
    realm = ON_THE_ROUTE[index]
    hint = f"{realm.user}@{realm.domain}"
    with httpx.Client() as browser:
        page = browser.get(_authorize(route, register(route), login_hint=hint))
        assert f"sign in with {realm.title}" in page.text
        assert ON_THE_ROUTE[1 - index].title not in page.text
        request_id = page.text.split('name="request" value="')[1].split('"')[0]
        answer = browser.post(
            f"{route.gateway}/mcp/oauth/authorize",
            data={"request": request_id, "decision": f"allow-{index}"},
            headers={"Origin": route.gateway},
        )
        assert answer.status_code == 302, answer.text
        location = answer.headers["location"]
        assert location.startswith(f"{route.issuer(realm)}/protocol/openid-connect/auth?")
        assert parse_qs(urlsplit(location).query)["login_hint"] == [hint]
        login = browser.get(location)
    assert login.status_code == 200, login.text
    form = _FormAction()
    form.feed(login.text)
    assert form.action is not None
    assert form.action.startswith(f"{route.issuer(realm)}/login-actions/authenticate?")
    assert f'value="{hint}"' in login.text  # Keycloak fills the user name in from the hint


@pytest.mark.parametrize("index", [0, 1], ids=[r.name for r in ON_THE_ROUTE])
async def test_a_user_of_each_realm_signs_in_and_refreshes_through_the_gateway(route, index):
    realm = ON_THE_ROUTE[index]
    client_id = register(route)
    url = _authorize(route, client_id, login_hint=f"{realm.user}@{realm.domain}")
    query = await sign_in(url, realm.user, USER_PASSWORD, CALLBACK, decision=f"allow-{index}")
    assert query["iss"] == route.mcp
    tokens = redeem(route, client_id, query["code"])
    assert tokens.status_code == 200, tokens.text
    access = tokens.json()["access_token"]
    claims = unverified_claims(access)
    assert claims["iss"] == route.issuer(realm)
    assert claims["preferred_username"] == realm.user
    assert claims["groups"] == [realm.group]
    answer = httpx.post(route.mcp, json=INITIALIZE, headers=mcp_headers(access), timeout=30)
    assert answer.status_code == 200, answer.text
    refreshed = httpx.post(
        f"{route.gateway}/mcp/oauth/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": tokens.json()["refresh_token"],
            "client_id": client_id,
        },
        timeout=30,
    )
    assert refreshed.status_code == 200, refreshed.text
    again = unverified_claims(refreshed.json()["access_token"])
    assert again["iss"] == route.issuer(realm)  # refreshed at the realm the user signed in at
    assert again["sid"] == claims["sid"]  # the same Keycloak session
