"""Two identity providers on one route, with real processes: the npm oidc-provider and the dev
IdP (authentik flavour, provisioned by `idp authentik`), behind one gateway in Broker mode. The
user picks the provider on the consent page (or a login_hint picks it); the code flow, the
provider's `iss` check and refresh then work against the provider picked, and `/mcp` accepts
each provider's tokens, checked with that provider's keys only."""

from __future__ import annotations

import secrets
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlencode, urlsplit

import httpx
import pytest
import yaml
from headless_login import sign_in

from broker_calls import CALLBACK, VERIFIER, redeem, register, s256
from idp_support import BOOTSTRAP_TOKEN, USER_PASSWORD, cli, start_dev_idp
from support import (
    INITIALIZE,
    NODE_DIR,
    Process,
    free_port,
    gateway_cmd,
    mcp_headers,
    node,
    unverified_claims,
    wait_for_port,
)

OP_CLIENT = "mcp-public"


@dataclass
class TwoProviders:
    gateway: str
    op_issuer: str
    dev_issuer: str

    @property
    def mcp(self) -> str:
        return f"{self.gateway}/mcp"


def _add_oidc_provider(config: Path, op_issuer: str) -> None:
    """The generated policy, with the oidc-provider as a second provider and both named."""
    documents = list(yaml.safe_load_all(config.read_text()))
    policy = next(d for d in documents if d and d["kind"] == "GatewayPolicy")
    jwt = policy["spec"]["traffic"]["jwtAuthentication"]
    dev = jwt["providers"][0]
    dev["name"] = "Dev IdP"
    dev["clientId"] = jwt["mcp"]["clientId"]
    jwt["providers"].append(
        {
            "issuer": op_issuer,
            "name": "Test OP",
            "kind": "ProviderB",
            "clientId": OP_CLIENT,
            "audiences": [OP_CLIENT],
            "loginHintDomains": ["op.example"],
            "jwks": {"remote": {"url": f"{op_issuer}jwks/"}},
        }
    )
    config.write_text(yaml.safe_dump_all(documents, sort_keys=False))


@pytest.fixture(scope="module")
def two(logs: Path, tmp_path_factory, idp_key, backend: str) -> Iterator[TwoProviders]:
    tmp = tmp_path_factory.mktemp("two-providers")
    port, op_port = free_port(), free_port()
    dev, dev_url = start_dev_idp("authentik", logs, tmp / "state.json", "--user", "alice")
    op_env = {
        "IDP_PORT": str(op_port),
        "FLAVOUR": "authentik",
        "KEY_FILE": str(idp_key[1]),
        "CLIENT_ID": OP_CLIENT,
        "RESOURCE": f"http://127.0.0.1:{port}/mcp",
        "SLUG": "mcp",
    }
    op = Process("idp-two-providers", [node(), str(NODE_DIR / "idp.mjs")], logs, env=op_env)
    gateway = None
    try:
        wait_for_port(op_port, op)
        done = cli(
            *("idp", "authentik", "--url", dev_url, "--user", "alice", "--mode", "Broker"),
            *("--redirect-uri", r"regex:http://127\.0\.0\.1:[0-9]+/.*"),
            *("--resource", f"http://127.0.0.1:{port}/mcp", "--backend", f"http://{backend}/mcp"),
            *("--output-dir", str(tmp / "out")),
            env={"AUTHENTIK_TOKEN": BOOTSTRAP_TOKEN},
        )
        assert done.returncode == 0, done.stderr
        op_issuer = f"http://127.0.0.1:{op_port}/application/o/mcp/"
        _add_oidc_provider(tmp / "out" / "gateway.yaml", op_issuer)
        gateway = Process("gateway-two-providers", gateway_cmd(tmp / "out"), logs)
        wait_for_port(port, gateway)
        yield TwoProviders(f"http://127.0.0.1:{port}", op_issuer, f"{dev_url}/application/o/mcp/")
    finally:
        if gateway is not None:
            gateway.stop()
        op.stop()
        dev.stop()


def authorize(stack: TwoProviders, client_id: str, **extra: str) -> str:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": CALLBACK,
        "state": "s-1",
        "code_challenge": s256(VERIFIER),
        "code_challenge_method": "S256",
        "scope": "openid profile offline_access",
        **extra,
    }
    return f"{stack.gateway}/mcp/oauth/authorize?{urlencode(params)}"


def call_mcp(stack: TwoProviders, access_token: str) -> httpx.Response:
    return httpx.post(stack.mcp, headers=mcp_headers(access_token), json=INITIALIZE)


def test_metadata_and_the_consent_page_offer_both_providers(two):
    metadata = httpx.get(f"{two.gateway}/.well-known/oauth-protected-resource/mcp").json()
    assert metadata["authorization_servers"] == [f"{two.gateway}/mcp"]  # Broker: the gateway
    page = httpx.get(authorize(two, register(two)))
    assert page.status_code == 200
    assert 'value="allow-0">Allow, sign in with Dev IdP</button>' in page.text
    assert 'value="allow-1">Allow, sign in with Test OP</button>' in page.text
    policy = page.headers["content-security-policy"]
    assert urlsplit(two.dev_issuer).netloc in policy  # the form may lead to either
    assert urlsplit(two.op_issuer).netloc in policy


@pytest.mark.parametrize(("choice", "issuer"), [(0, "dev_issuer"), (1, "op_issuer")])
async def test_each_provider_signs_in_is_accepted_and_refreshes(two, choice, issuer):
    client_id = register(two)
    password = USER_PASSWORD if choice == 0 else "x"
    query = await sign_in(
        authorize(two, client_id), "alice", password, CALLBACK, decision=f"allow-{choice}"
    )
    assert query["iss"] == f"{two.gateway}/mcp"
    tokens = redeem(two, client_id, query["code"])
    assert tokens.status_code == 200, tokens.text
    claims = unverified_claims(tokens.json()["access_token"])
    assert claims["iss"] == getattr(two, issuer)
    assert call_mcp(two, tokens.json()["access_token"]).status_code == 200
    refreshed = httpx.post(
        f"{two.gateway}/mcp/oauth/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": tokens.json()["refresh_token"],
            "client_id": client_id,
        },
    )
    assert refreshed.status_code == 200, refreshed.text
    again = unverified_claims(refreshed.json()["access_token"])
    assert again["iss"] == getattr(two, issuer)  # refreshed at the provider that signed in


def test_a_login_hint_picks_the_provider_and_is_passed_on(two):
    with httpx.Client() as browser:
        page = browser.get(authorize(two, register(two), login_hint="alice@op.example"))
        assert "sign in with Test OP" in page.text
        assert "Dev IdP" not in page.text
        request_id = page.text.split('name="request" value="')[1].split('"')[0]
        answer = browser.post(
            f"{two.gateway}/mcp/oauth/authorize",
            data={"request": request_id, "decision": "allow-1"},
            headers={"Origin": two.gateway},
        )
    assert answer.status_code == 302
    location = answer.headers["location"]
    assert location.startswith(two.op_issuer)
    assert parse_qs(urlsplit(location).query)["login_hint"] == ["alice@op.example"]


def test_consent_given_at_one_provider_is_not_consent_at_the_other(two):
    """A click on "Allow, sign in with Dev IdP" lets the client act for the Dev IdP account
    only: the same browser asked for the same client at the Test OP sees the page again. (An
    https client: consent for a loopback one is never remembered at all.)"""
    web = "https://client.example/cb"
    client_id = register(two, web)
    # picks the Test OP
    hinted = authorize(two, client_id, login_hint="alice@op.example", redirect_uri=web)
    with httpx.Client() as browser:
        page = browser.get(authorize(two, client_id, redirect_uri=web))
        request_id = page.text.split('name="request" value="')[1].split('"')[0]
        allowed = browser.post(
            f"{two.gateway}/mcp/oauth/authorize",
            data={"request": request_id, "decision": "allow-0"},
            headers={"Origin": two.gateway},
        )
        assert allowed.status_code == 302
        assert urlsplit(allowed.headers["location"]).netloc == urlsplit(two.dev_issuer).netloc
        again = browser.get(hinted)
        assert again.status_code == 200, again.headers.get("location")
        assert "sign in with Test OP" in again.text
        request_id = again.text.split('name="request" value="')[1].split('"')[0]
        browser.post(
            f"{two.gateway}/mcp/oauth/authorize",
            data={"request": request_id, "decision": "allow-1"},
            headers={"Origin": two.gateway},
        )
        remembered = browser.get(hinted)  # allowed at the Test OP now: no page
    assert remembered.status_code == 302
    assert remembered.headers["location"].startswith(two.op_issuer)


def test_the_callback_checks_the_iss_of_the_provider_picked(two):
    with httpx.Client() as browser:
        page = browser.get(authorize(two, register(two)))
        request_id = page.text.split('name="request" value="')[1].split('"')[0]
        answer = browser.post(
            f"{two.gateway}/mcp/oauth/authorize",
            data={"request": request_id, "decision": "allow-0"},  # the dev IdP
            headers={"Origin": two.gateway},
        )
        state = parse_qs(urlsplit(answer.headers["location"]).query)["state"][0]
        # An answer carrying the other provider's issuer: a mix-up, refused.
        forged = browser.get(
            f"{two.gateway}/mcp/oauth/callback",
            params={"state": state, "code": secrets.token_urlsafe(8), "iss": two.op_issuer},
        )
    assert forged.status_code == 400
    assert "is not the provider issuer" in forged.json()["error_description"]


def test_a_token_naming_an_issuer_the_route_does_not_have_is_refused(two, idp_key):
    from support import claims_for, mint

    stranger = mint(idp_key[0], claims_for("http://127.0.0.1:1/elsewhere/", OP_CLIENT))
    answer = call_mcp(two, stranger)
    assert answer.status_code == 401
    assert "is not one of this route's issuers" in answer.json()["error_description"]
