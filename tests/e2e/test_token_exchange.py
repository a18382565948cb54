"""Token exchange for the MCP server behind the gateway, with real processes: the dev IdP in its
Keycloak flavour (standard token exchange, as Keycloak ≥ 26.2 answers it), the gateway, and an
MCP server that validates bearer tokens itself and only accepts its own audience
(tests/peers/mcp_backend_auth.py, which keeps a ledger of the tokens it was sent).

A signed-in user's tool call reaches the backend with a token whose `aud` is the backend and
whose `sub` is the user; the caller's token never arrives; one exchange serves many calls; a
refused exchange gives the client the provider's reason and nothing reaches the backend."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from exchange_support import ExchangeConfig, call_whoami, resources
from idp_support import ADMIN_PASSWORD, USER_PASSWORD, start_dev_idp
from support import (
    INITIALIZE,
    PEERS,
    Process,
    free_port,
    gateway_cmd,
    mcp_headers,
    unverified_claims,
    wait_for_keyset,
    wait_for_port,
)

EXCHANGE_SECRET = "exchange-client-secret-for-tests"
REALM = "/realms/master"


@dataclass
class Setup:
    idp: str
    backend: str
    gateway: str
    refusing_gateway: str
    status: str

    @property
    def issuer(self) -> str:
        return self.idp + REALM


def password_token(idp: str, username: str, password: str, **extra: str) -> str:
    """An access token from the realm's password grant (admin-cli), checked."""
    answer = httpx.post(
        f"{idp}{REALM}/protocol/openid-connect/token",
        data={
            "grant_type": "password",
            "client_id": "admin-cli",
            "username": username,
            "password": password,
            **extra,
        },
    )
    assert answer.status_code == 200, answer.text
    return str(answer.json()["access_token"])


def _admin(idp: str) -> httpx.Client:
    token = password_token(idp, "admin", ADMIN_PASSWORD)
    return httpx.Client(
        base_url=f"{idp}/admin{REALM}", headers={"Authorization": f"Bearer {token}"}
    )


def _audience_scope(admin: httpx.Client, name: str, audience: str) -> str:
    created = admin.post("/client-scopes", json={"name": name, "protocol": "openid-connect"})
    assert created.status_code == 201, created.text
    scope_id = created.headers["location"].rsplit("/", 1)[1]
    mapper = {
        "name": f"{name}-audience",
        "protocol": "openid-connect",
        "protocolMapper": "oidc-audience-mapper",
        "config": {"included.client.audience": audience, "access.token.claim": "true"},
    }
    assert (
        admin.post(f"/client-scopes/{scope_id}/protocol-mappers/models", json=mapper).status_code
        == 201
    )
    return scope_id


def provision(idp: str) -> None:
    """The realm as `idp keycloak --token-exchange-client` would leave it (done by hand here)."""
    with _admin(idp) as admin:
        for body in (
            {"clientId": "mcp-backend", "publicClient": False, "standardFlowEnabled": False},
            {
                "clientId": "gateway-exchange",
                "publicClient": False,
                "secret": EXCHANGE_SECRET,
                "standardFlowEnabled": False,
                "attributes": {"standard.token.exchange.enabled": "true"},
            },
            # Two that Keycloak turns away: exchange not enabled; not in the users' tokens' aud.
            {"clientId": "not-enabled", "publicClient": False, "secret": "s1"},
            {
                "clientId": "outsider",
                "publicClient": False,
                "secret": "s2",
                "attributes": {"standard.token.exchange.enabled": "true"},
            },
        ):
            assert admin.post("/clients", json=body).status_code == 201
        # Users' tokens name the exchange client (Keycloak requires it in the subject's aud) …
        default = _audience_scope(admin, "gateway-audience", "gateway-exchange")
        assert admin.put(f"/default-default-client-scopes/{default}").status_code == 204
        # … and the exchange client can ask for the backend's audience (an optional scope of
        # its own: Keycloak ignores a requested scope the client does not have).
        backend_scope = _audience_scope(admin, "backend-audience", "mcp-backend")
        exchanger = admin.get("/clients", params={"clientId": "gateway-exchange"}).json()[0]
        assigned = admin.put(f"/clients/{exchanger['id']}/optional-client-scopes/{backend_scope}")
        assert assigned.status_code == 204, assigned.text
        # The same audience through a scope the client was not given: ignored when requested.
        _audience_scope(admin, "stray-audience", "mcp-backend")
        user = {
            "username": "alice",
            "enabled": True,
            "credentials": [{"type": "password", "value": USER_PASSWORD}],
        }
        assert admin.post("/users", json=user).status_code == 201


def _gateway(
    logs: Path,
    tmp: Path,
    name: str,
    backend_port: int,
    issuer: str,
    audience: str,
    status: int | None = None,
) -> tuple[Process, str]:
    port = free_port()
    config = tmp / name
    config.mkdir()
    keycloak = ExchangeConfig(
        issuer,
        "Keycloak",
        "gateway-exchange",
        f"{issuer}/protocol/openid-connect/certs",
        "gateway-exchange",
        audience,
        "backend-audience",
    )
    (config / "resources.yaml").write_text(resources(port, backend_port, keycloak))
    args = ["--status-port", str(status)] if status else []
    process = Process(
        name, [*gateway_cmd(config), *args], logs, env={"EXCHANGE_SECRET": EXCHANGE_SECRET}
    )
    wait_for_port(port, process)
    return process, f"http://127.0.0.1:{port}"


@pytest.fixture(scope="module")
def setup(logs: Path, tmp_path_factory) -> Iterator[Setup]:
    tmp = tmp_path_factory.mktemp("token-exchange")
    idp, url = start_dev_idp("keycloak", logs, tmp / "state.json")
    started = [idp]
    try:
        provision(url)
        issuer = url + REALM
        backend_port = free_port()
        backend = Process(
            "mcp-backend-auth",
            [
                sys.executable,
                str(PEERS / "mcp_backend_auth.py"),
                str(backend_port),
                issuer,
                f"{issuer}/protocol/openid-connect/certs",
                "mcp-backend",
            ],
            logs,
        )
        started.append(backend)
        wait_for_port(backend_port, backend)
        status = free_port()
        gateway, base = _gateway(
            logs, tmp, "gateway-exchange", backend_port, issuer, "mcp-backend", status
        )
        started.append(gateway)
        refusing, refusing_base = _gateway(
            logs, tmp, "gateway-exchange-refused", backend_port, issuer, "no-such-client"
        )
        started.append(refusing)
        yield Setup(
            url,
            f"http://127.0.0.1:{backend_port}",
            base,
            refusing_base,
            f"http://127.0.0.1:{status}",
        )
    finally:
        for process in reversed(started):
            process.stop()


def user_token(setup: Setup) -> str:
    return password_token(setup.idp, "alice", USER_PASSWORD, scope="openid")


def ledger(setup: Setup) -> list[str]:
    return httpx.get(f"{setup.backend}/debug/tokens").json()


async def test_the_backend_gets_a_token_of_its_own_audience_naming_the_user(setup):
    token = user_token(setup)
    wait_for_keyset(setup.gateway, token)
    before = len(ledger(setup))
    seen = await call_whoami(setup.gateway, token)
    assert seen["aud"] == "mcp-backend"
    assert seen["sub"] == unverified_claims(token)["sub"]
    received = ledger(setup)[before:]
    assert received, "the backend was sent no token"
    assert token not in received  # the caller's token never arrives
    assert len(set(received)) == 1  # one exchanged token served every request of the session
    metrics = httpx.get(f"{setup.status}/metrics").text
    assert (
        'mcp_gateway_token_exchanges_total{outcome="exchanged",route="default/mcp"} 1.0' in metrics
    )
    assert 'outcome="cache_hit"' in metrics


def test_a_refused_exchange_is_a_clear_error_and_nothing_reaches_the_backend(setup):
    token = user_token(setup)
    wait_for_keyset(setup.refusing_gateway, token)
    before = len(ledger(setup))
    answer = httpx.post(
        f"{setup.refusing_gateway}/mcp", json=INITIALIZE, headers=mcp_headers(token)
    )
    assert answer.status_code == 502
    body = answer.json()
    assert body["error"] == "backend_credentials_unavailable"
    assert "route default/mcp" in body["error_description"]
    assert "invalid_client: Audience not found" in body["error_description"]
    assert token not in body["error_description"]
    assert len(ledger(setup)) == before


@pytest.mark.parametrize(
    ("client", "secret", "form", "status", "error", "description"),
    [
        (
            "not-enabled",
            "s1",
            {},
            400,
            "invalid_request",
            "Standard token exchange is not enabled for the requested client",
        ),
        ("outsider", "s2", {}, 403, "access_denied", "Client is not within the token audience"),
        (
            "gateway-exchange",
            EXCHANGE_SECRET,
            {"subject_token": "not-a-token"},
            400,
            "invalid_request",
            "Invalid token",
        ),
        (
            "gateway-exchange",
            EXCHANGE_SECRET,
            {"subject_token_type": "urn:ietf:params:oauth:token-type:id_token"},
            400,
            "invalid_request",
            "Parameter 'subject_token' supports access tokens only",
        ),
        (
            "gateway-exchange",
            EXCHANGE_SECRET,
            {"audience": "mcp-backend", "scope": ""},
            400,
            "invalid_request",
            "Requested audience not available: mcp-backend",
        ),
        (
            "gateway-exchange",
            EXCHANGE_SECRET,
            {"audience": "mcp-backend", "scope": "stray-audience"},
            400,
            "invalid_request",
            "Requested audience not available: mcp-backend",
        ),
        # Keycloak 26.7.3 for a known client with a wrong secret (test_provider_a_exchange).
        ("gateway-exchange", "wrong", {}, 401, "unauthorized_client", None),
    ],
    ids=[
        "not-enabled",
        "not-in-aud",
        "invalid-token",
        "id-token",
        "audience-unavailable",
        "scope-not-the-clients",
        "bad-secret",
    ],
)
def test_the_dev_idp_refuses_exchanges_as_keycloak_does(
    setup, client, secret, form, status, error, description
):
    data = {
        "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
        "subject_token": user_token(setup),
        "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
        **form,
    }
    answer = httpx.post(
        f"{setup.issuer}/protocol/openid-connect/token", data=data, auth=(client, secret)
    )
    assert answer.status_code == status, answer.text
    assert answer.json()["error"] == error
    if description is not None:
        assert answer.json()["error_description"] == description


def test_idp_keycloak_sets_token_exchange_up(logs: Path, tmp_path_factory):
    """`idp keycloak --token-exchange-client … --token-exchange-audience …` against the dev IdP:
    the policy it writes exchanges users' tokens for the backend, the secret sits in a file only
    its owner reads, a second run changes nothing, and the exchange it set up works."""
    from idp_support import cli

    tmp = tmp_path_factory.mktemp("idp-exchange")
    idp, url = start_dev_idp("keycloak", logs, tmp / "state.json")
    out = tmp / "out"
    args = [
        *("idp", "keycloak", "--url", url, "--resource", "http://127.0.0.1:8080/mcp"),
        *("--mode", "Facade"),
        *("--user", "alice:alice@example.com", "--output-dir", str(out)),
        *(
            "--token-exchange-client",
            "gateway-exchange",
            "--token-exchange-audience",
            "mcp-backend",
        ),
    ]
    env = {"KEYCLOAK_ADMIN_PASSWORD": ADMIN_PASSWORD, "KEYCLOAK_USER_PASSWORD": USER_PASSWORD}
    try:
        first = cli(*args, env=env)
        assert first.returncode == 0, first.stderr
        secret_file = out / "token-exchange-client-secret"
        assert secret_file.stat().st_mode & 0o777 == 0o600
        secret = secret_file.read_text().strip()
        assert secret not in first.stdout + first.stderr
        policy = (out / "gateway.yaml").read_text()
        assert "tokenExchange:" in policy
        assert f"file: {secret_file.resolve()}" in policy
        check = cli("check", "-f", str(out))
        assert check.returncode == 0, check.stdout + check.stderr
        again = cli(*args, env=env)
        assert again.returncode == 0, again.stderr
        assert "exists; its secret file is kept" in again.stderr
        assert secret_file.read_text().strip() == secret
        user = password_token(url, "alice", USER_PASSWORD)
        exchanged = httpx.post(
            f"{url}{REALM}/protocol/openid-connect/token",
            data={
                "grant_type": "urn:ietf:params:oauth:grant-type:token-exchange",
                "subject_token": user,
                "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "audience": "mcp-backend",
                "scope": "mcp-backend-audience",
            },
            auth=("gateway-exchange", secret),
        )
        assert exchanged.status_code == 200, exchanged.text
        assert unverified_claims(exchanged.json()["access_token"])["aud"] == "mcp-backend"
    finally:
        idp.stop()
