"""Provider A set up by the product's own `idp keycloak` and signed in through, against real
Keycloak 26 and against the dev IdP's Keycloak flavour: one suite, parametrised, so the
emulation is held to the real server by the very same assertions.

What each test checks is spec §4.2 (every admin call, rules 1 and 2), §5.6 (the admin token
refreshed when it runs out) and §5.2 (a user outside the group and a service account get 403),
with the TypeScript SDK 1.x signing in through Facade mode (anonymous DCR forwarded by the
gateway) on the provider's own login and consent pages.
"""

from __future__ import annotations

import io
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from idp_support import cli
from keycloak_support import (
    FLAVOURS,
    USER_PASSWORD,
    Provider,
    either_provider,
    idp_keycloak,
)
from mcp_oauth_gateway.idp import keycloak
from mcp_oauth_gateway.idp.steps import Progress
from node_clients import run_ts_client
from support import (
    Process,
    free_port,
    gateway_cmd,
    unverified_claims,
    wait_for_port,
    wait_until,
)

POLICY_TYPE = "org.keycloak.services.clientregistration.policy.ClientRegistrationPolicy"


provider = pytest.fixture(scope="module", params=FLAVOURS, name="provider")(either_provider)


@dataclass
class Setup:
    provider: Provider
    gateway: str
    out: Path
    args: list[str]
    first: Any


@pytest.fixture(scope="module")
def setup(provider: Provider, backend: str, tmp_path_factory: pytest.TempPathFactory) -> Setup:
    out = tmp_path_factory.mktemp("provider-a") / "out"
    gateway = f"http://127.0.0.1:{free_port()}"
    args = [
        *("--resource", f"{gateway}/mcp"),
        *("--user", "alice:alice@example.com", "--user", "bob:bob@example.com"),
        *("--allow-anonymous-dcr", "--mode", "Facade"),
        *("--backend", f"http://{backend}/mcp"),
        *("--output-dir", str(out)),
    ]
    return Setup(provider, gateway, out, args, idp_keycloak(provider, *args))


@pytest.fixture(scope="module")
def gateway(setup: Setup, logs: Path) -> Iterator[str]:
    process = Process(f"gateway-provider-a-{setup.provider.name}", gateway_cmd(setup.out), logs)
    try:
        wait_for_port(int(setup.gateway.rsplit(":", 1)[1]), process)
        yield setup.gateway
    finally:
        process.stop()


def admin_state(provider: Provider) -> dict[str, Any]:
    """What §4.2 writes, read back through the admin API (ids and all)."""
    scopes = provider.admin("GET", "/client-scopes").json()
    groups = provider.admin("GET", "/groups", params={"search": "users", "exact": "true"}).json()
    users = {}
    for name in ("alice", "bob"):
        found = provider.admin("GET", "/users", params={"username": name, "exact": "true"}).json()
        member_of = provider.admin("GET", f"/users/{found[0]['id']}/groups").json()
        users[name] = (found[0]["id"], found[0].get("email"), sorted(g["name"] for g in member_of))
    policies = provider.admin("GET", "/components", params={"type": POLICY_TYPE}).json()
    defaults = provider.admin("GET", "/default-default-client-scopes").json()
    return {
        "mcp": next((s for s in scopes if s["name"] == "mcp"), None),
        "defaults": sorted(s["name"] for s in defaults),
        "groups": [(g["id"], g["name"]) for g in groups],
        "users": users,
        "policies": sorted((p["providerId"], p.get("subType"), p["id"]) for p in policies),
    }


def test_setup_reads_issuer_and_jwks_path_from_discovery(setup):
    assert setup.first.returncode == 0, setup.first.stderr
    issuer = setup.provider.issuer()
    # Rule 2, read from discovery rather than assumed.
    discovery = httpx.get(f"{issuer}/.well-known/openid-configuration").json()
    assert discovery["issuer"] == issuer
    assert f"issuer: {issuer}\n" in setup.first.stdout
    assert "jwks_path: /realms/master/protocol/openid-connect/certs" in setup.first.stdout
    assert httpx.URL(discovery["jwks_uri"]).path == "/realms/master/protocol/openid-connect/certs"
    for secret in (setup.provider.admin_password, USER_PASSWORD):
        assert secret not in setup.first.stdout + setup.first.stderr


def test_every_admin_call_left_what_the_spec_says(setup):
    state = admin_state(setup.provider)
    mcp = state["mcp"]
    assert mcp is not None
    assert mcp["protocol"] == "openid-connect"
    mappers = {m["protocolMapper"]: m["config"] for m in mcp["protocolMappers"]}
    audience = mappers["oidc-audience-mapper"]
    assert audience["included.custom.audience"] == f"{setup.gateway}/mcp"
    assert audience["access.token.claim"] == "true"
    group = mappers["oidc-group-membership-mapper"]
    assert (group["claim.name"], group["full.path"], group["access.token.claim"]) == (
        "groups",
        "false",
        "true",
    )
    assert "mcp" in state["defaults"]
    assert [name for _, name in state["groups"]] == ["users"]
    assert state["users"]["alice"][1:] == ("alice@example.com", ["users"])
    assert state["users"]["bob"][1:] == ("bob@example.com", ["users"])
    # Rule 1: exactly the trusted-hosts policies and the anonymous allowed-client-templates
    # one are gone; the other registration policies (consent, max clients, …) stay.
    kinds = [(provider, sub) for provider, sub, _ in state["policies"]]
    assert ("trusted-hosts", "anonymous") not in kinds
    assert ("allowed-client-templates", "anonymous") not in kinds
    assert ("allowed-client-templates", "authenticated") in kinds
    assert ("consent-required", "anonymous") in kinds


def test_check_is_green_on_what_it_wrote(setup):
    check = cli("check", "-f", str(setup.out))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "Accepted      True" in check.stdout
    assert "Attached      True" in check.stdout


def test_a_second_run_changes_nothing(setup):
    before = admin_state(setup.provider)
    written = (setup.out / "gateway.yaml").read_text()
    second = idp_keycloak(setup.provider, *setup.args)
    assert second.returncode == 0, second.stderr
    for change in ("created", "deleted", "added", "now a default"):
        assert change not in second.stderr, second.stderr
    assert admin_state(setup.provider) == before
    assert (setup.out / "gateway.yaml").read_text() == written


def admin_client(provider: Provider, stream: io.StringIO) -> keycloak.KeycloakAdmin:
    """The product's own admin client (what `idp keycloak` calls through), logged in."""
    options = keycloak.KeycloakOptions(
        url=provider.url,
        admin_user="admin",
        admin_password=provider.admin_password,
        resource="http://127.0.0.1:1/mcp",
    )
    admin = keycloak.KeycloakAdmin(httpx.Client(timeout=30), options, Progress("kc", 1, stream))
    admin.login()
    return admin


def test_an_admin_call_answered_401_refreshes_the_admin_token(setup):
    """§5.6: every admin session of the master realm is logged out under the tool's feet
    (Keycloak's logout-all: the tokens it issued are no longer accepted); its next call meets
    the provider's 401, signs in again and is sent once more."""
    said = io.StringIO()
    admin = admin_client(setup.provider, said)
    assert admin.call("GET", "/groups").status_code == 200
    assert setup.provider.admin("POST", "/logout-all").status_code == 200
    answered = admin.call("GET", "/groups")
    assert answered.status_code == 200, answered.text
    assert "admin token was rejected (401); refreshing" in said.getvalue()


def test_a_short_lived_admin_token_is_refreshed_before_it_runs_out(setup):
    """§5.6 with a 2 s admin token: once Keycloak refuses the first token, the tool has already
    refreshed it (at 90 % of its lifetime) and its call succeeds."""
    provider = setup.provider
    assert provider.admin("PUT", "", json={"accessTokenLifespan": 2}).status_code == 204
    try:
        said = io.StringIO()
        admin = admin_client(provider, said)
        first = admin.auth_header()
        wait_until(
            lambda: (
                httpx.get(f"{provider.url}/admin/realms/master/groups", headers=first).status_code
                == 401
            ),
            timeout=15,
            what="Keycloak refusing the 2 s admin token",
        )
        answered = admin.call("GET", "/groups")
    finally:
        assert provider.admin("PUT", "", json={"accessTokenLifespan": 60}).status_code == 204
    assert answered.status_code == 200, answered.text
    assert "admin token is about to expire; refreshing" in said.getvalue()
    assert admin.auth_header() != first


def test_facade_sign_in_with_the_typescript_sdk(setup, gateway):
    report = run_ts_client(f"{gateway}/mcp", "alice", USER_PASSWORD)
    assert report["ok"], report
    assert report["add"]["structuredContent"] == {"result": 5}
    # The SDK registered through the gateway's forwarder, with "scope": "openid profile";
    # the token still carries what the default mcp scope maps.
    assert report["scope"] == "openid profile"
    claims = unverified_claims(report["accessToken"])
    assert claims["iss"] == setup.provider.issuer()
    assert f"{gateway}/mcp" in (
        claims["aud"] if isinstance(claims["aud"], list) else [claims["aud"]]
    )
    assert claims["groups"] == ["users"]
    assert claims["azp"] == report["clientId"]
    assert claims["typ"] == "Bearer"
    assert claims["preferred_username"] == "alice"
    # Keycloak's RFC 9207 iss on the callback.
    assert report["callback"]["iss"] == setup.provider.issuer()


def test_a_user_outside_the_group_gets_403(setup, gateway):
    setup.provider.add_user("carol")
    outsider = run_ts_client(f"{gateway}/mcp", "carol", USER_PASSWORD)
    assert outsider["status"] == 403, outsider


def test_a_service_account_token_gets_403(setup, gateway):
    """§5.2: a client-credentials token carries the audience (the default mcp scope) but no
    user and no group; the route's rule refuses it."""
    registered = httpx.post(
        f"{setup.provider.issuer()}/clients-registrations/openid-connect",
        json={
            "client_name": "robot",
            "grant_types": ["client_credentials"],
            "token_endpoint_auth_method": "client_secret_post",
            "redirect_uris": [],
        },
    )
    assert registered.status_code == 201, registered.text
    client = registered.json()
    issued = httpx.post(
        setup.provider.token_endpoint(),
        data={
            "grant_type": "client_credentials",
            "client_id": client["client_id"],
            "client_secret": client["client_secret"],
        },
    )
    assert issued.status_code == 200, issued.text
    token = issued.json()["access_token"]
    assert f"{gateway}/mcp" in unverified_claims(token)["aud"]
    response = httpx.post(f"{gateway}/mcp", json={}, headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 403, response.text
