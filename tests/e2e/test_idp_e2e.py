"""End to end per flavour: dev-idp → provisioning tool → generated resources → check → serve →
a real MCP client signs in as a provisioned user and calls a tool; a user outside the group and
a client-credentials token for the same client get 403; a second run changes nothing."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from idp_support import ADMIN_PASSWORD, BOOTSTRAP_TOKEN, USER_PASSWORD, cli, start_dev_idp
from node_clients import run_ts_client
from support import Process, free_port, gateway_cmd, wait_for_port


@dataclass
class Provisioned:
    idp: str
    gateway: str
    out: Path
    state: Path
    first: subprocess.CompletedProcess[str]
    tool_args: list[str]
    tool_env: dict[str, str]


def serve_and_check(p: Provisioned, logs: Path, name: str) -> Process:
    check = cli("check", "-f", str(p.out))
    assert check.returncode == 0, check.stdout + check.stderr
    assert "Accepted      True" in check.stdout
    assert "Attached      True" in check.stdout
    gateway = Process(name, gateway_cmd(p.out), logs)
    wait_for_port(int(p.gateway.rsplit(":", 1)[1]), gateway)
    return gateway


@pytest.fixture(scope="module")
def keycloak_run(
    logs: Path, tmp_path_factory: pytest.TempPathFactory, backend: str
) -> Iterator[Provisioned]:
    tmp = tmp_path_factory.mktemp("kc-e2e")
    state = tmp / "state.json"
    idp, url = start_dev_idp("keycloak", logs, state)
    gateway = f"http://127.0.0.1:{free_port()}"
    args = [
        "idp",
        "keycloak",
        "--url",
        url,
        "--resource",
        f"{gateway}/mcp",
        "--user",
        "alice:alice@example.com",
        "--user",
        "bob:bob@example.com",
        "--allow-anonymous-dcr",
        "--mode",
        "Facade",
        "--backend",
        f"http://{backend}/mcp",
        "--output-dir",
        str(tmp / "out"),
    ]
    env = {"KEYCLOAK_ADMIN_PASSWORD": ADMIN_PASSWORD, "KEYCLOAK_USER_PASSWORD": USER_PASSWORD}
    first = cli(*args, env=env)
    try:
        yield Provisioned(url, gateway, tmp / "out", state, first, args, env)
    finally:
        idp.stop()


@pytest.fixture(scope="module")
def authentik_run(
    logs: Path, tmp_path_factory: pytest.TempPathFactory, backend: str
) -> Iterator[Provisioned]:
    tmp = tmp_path_factory.mktemp("ak-e2e")
    state = tmp / "state.json"
    # A fresh install: migrations for 1 s (the tool then honours Retry-After: 5), then the
    # worker needs 8 s for its blueprints, creating part of them half-way.
    idp, url = start_dev_idp(
        "authentik",
        logs,
        state,
        "--user",
        "alice",
        "--user",
        "carol",
        "--migrations-delay",
        "1",
        "--worker-delay",
        "8",
    )
    gateway = f"http://127.0.0.1:{free_port()}"
    args = [
        "idp",
        "authentik",
        "--url",
        url,
        "--slug",
        "mcp",
        "--user",
        "alice",
        "--mode",
        "Facade",
        "--resource",
        f"{gateway}/mcp",
        "--backend",
        f"http://{backend}/mcp",
        "--output-dir",
        str(tmp / "out"),
        "--token-stdin",
        "--wait",
        "60",
    ]
    first = cli(*args, stdin=BOOTSTRAP_TOKEN + "\n")
    try:
        yield Provisioned(url, gateway, tmp / "out", state, first, args, {})
    finally:
        idp.stop()


def test_keycloak_end_to_end(keycloak_run, logs):
    p = keycloak_run
    assert p.first.returncode == 0, p.first.stderr
    assert f"issuer: {p.idp}/realms/master" in p.first.stdout
    assert "jwks_path: /realms/master/protocol/openid-connect/certs" in p.first.stdout
    assert ADMIN_PASSWORD not in p.first.stdout + p.first.stderr
    assert USER_PASSWORD not in p.first.stdout + p.first.stderr
    gateway = serve_and_check(p, logs, "gateway-kc-e2e")
    try:
        report = run_ts_client(f"{p.gateway}/mcp", "alice", USER_PASSWORD)
        assert report["ok"], report
        assert report["add"]["structuredContent"] == {"result": 5}
        # a user outside the group
        admin = httpx.post(
            f"{p.idp}/realms/master/protocol/openid-connect/token",
            data={
                "grant_type": "password",
                "client_id": "admin-cli",
                "username": "admin",
                "password": ADMIN_PASSWORD,
            },
        ).json()["access_token"]
        created = httpx.post(
            f"{p.idp}/admin/realms/master/users",
            headers={"Authorization": f"Bearer {admin}"},
            json={
                "username": "carol",
                "enabled": True,
                "credentials": [{"type": "password", "value": USER_PASSWORD}],
            },
        )
        assert created.status_code == 201
        outsider = run_ts_client(f"{p.gateway}/mcp", "carol", USER_PASSWORD)
        assert outsider["status"] == 403, outsider
        # a client_credentials token for a client of the same realm and audience
        client = httpx.post(
            f"{p.idp}/realms/master/clients-registrations/openid-connect",
            json={
                "client_name": "robot",
                "grant_types": ["client_credentials"],
                "token_endpoint_auth_method": "client_secret_post",
                "redirect_uris": [],
            },
        ).json()
        token = httpx.post(
            f"{p.idp}/realms/master/protocol/openid-connect/token",
            data={
                "grant_type": "client_credentials",
                "client_id": client["client_id"],
                "client_secret": client["client_secret"],
            },
        ).json()["access_token"]
        response = httpx.post(
            f"{p.gateway}/mcp", json={}, headers={"Authorization": f"Bearer {token}"}
        )
        assert response.status_code == 403, response.text
    finally:
        gateway.stop()


def test_keycloak_second_run_changes_nothing(keycloak_run):
    p = keycloak_run
    before = p.state.read_text()
    second = cli(*p.tool_args, env=p.tool_env)
    assert second.returncode == 0, second.stderr
    assert "created" not in second.stderr
    assert "unchanged" in second.stderr
    assert p.state.read_text() == before


def test_authentik_end_to_end(authentik_run, logs):
    p = authentik_run
    assert p.first.returncode == 0, p.first.stderr
    assert "authentik is starting (HTTP 503" in p.first.stderr
    assert "the worker has not created" in p.first.stderr
    assert "found ['openid']" in p.first.stderr, "partial blueprints are waited out"
    assert f"issuer: {p.idp}/application/o/mcp/" in p.first.stdout
    assert BOOTSTRAP_TOKEN not in p.first.stdout + p.first.stderr
    client_id = next(
        line.split(": ", 1)[1]
        for line in p.first.stdout.splitlines()
        if line.startswith("client_id: ")
    )
    gateway = serve_and_check(p, logs, "gateway-ak-e2e")
    try:
        report = run_ts_client(f"{p.gateway}/mcp", "alice", USER_PASSWORD)
        assert report["ok"], report
        assert report["clientId"] == client_id
        assert report["progress"] == [1, 2, 3]
        outsider = run_ts_client(f"{p.gateway}/mcp", "carol", USER_PASSWORD)
        assert outsider["status"] == 403, outsider
        provider = httpx.get(
            f"{p.idp}/api/v3/providers/oauth2/",
            params={"name": "mcp"},
            headers={"Authorization": f"Bearer {BOOTSTRAP_TOKEN}"},
        ).json()["results"][0]
        token = httpx.post(
            f"{p.idp}/application/o/token/",
            data={
                "grant_type": "client_credentials",
                "client_id": client_id,
                "client_secret": provider["client_secret"],
                "scope": "openid profile",
            },
        ).json()["access_token"]
        response = httpx.post(
            f"{p.gateway}/mcp", json={}, headers={"Authorization": f"Bearer {token}"}
        )
        assert response.status_code == 403, response.text
    finally:
        gateway.stop()


def test_authentik_second_run_changes_nothing(authentik_run):
    p = authentik_run
    before = p.state.read_text()
    second = cli(*p.tool_args, stdin=BOOTSTRAP_TOKEN + "\n")
    assert second.returncode == 0, second.stderr
    assert "created" not in second.stderr
    assert p.state.read_text() == before


def test_authentik_second_slug_after_an_application_list_read(authentik_run, tmp_path):
    """authentik caches each user's application list page and ignores later filters: after the
    list has been read (as its admin UI does), a second slug must still provision."""
    p = authentik_run
    listed = httpx.get(
        f"{p.idp}/api/v3/core/applications/", headers={"Authorization": f"Bearer {BOOTSTRAP_TOKEN}"}
    ).json()
    assert [a["slug"] for a in listed["results"]] == ["mcp"]
    args = list(p.tool_args)
    args[args.index("--slug") + 1] = "mcp-b"
    args[args.index("--output-dir") + 1] = str(tmp_path / "out-b")
    second = cli(*args, stdin=BOOTSTRAP_TOKEN + "\n")
    assert second.returncode == 0, second.stderr
    assert "OAuth2 provider: created 'mcp-b'" in second.stderr
    assert f"issuer: {p.idp}/application/o/mcp-b/" in second.stdout
    before = p.state.read_text()
    for tool_args in (p.tool_args, args):
        again = cli(*tool_args, stdin=BOOTSTRAP_TOKEN + "\n")
        assert again.returncode == 0, again.stderr
        assert "created" not in again.stderr
    assert p.state.read_text() == before


def test_missing_secret_is_a_usage_error(tmp_path):
    done = cli(
        "idp",
        "keycloak",
        "--url",
        "http://127.0.0.1:1",
        "--resource",
        "http://127.0.0.1:8080/mcp",
        "--output-dir",
        str(tmp_path),
        env={"KEYCLOAK_ADMIN_PASSWORD": ""},
    )
    assert done.returncode == 2
    assert "KEYCLOAK_ADMIN_PASSWORD" in done.stderr
