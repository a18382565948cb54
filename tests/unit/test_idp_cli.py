"""The provisioning tools' command line leads to Broker mode: it is the default of `idp keycloak`
and `idp authentik`, a flag only Facade mode uses is refused in Broker mode naming it, and
`check` says which clients a Facade policy serves. The runs go to the dev IdP in process."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest
import yaml
from starlette.testclient import TestClient

from mcp_oauth_gateway import cli
from mcp_oauth_gateway.authorization_server_modes import AuthorizationServerMode
from mcp_oauth_gateway.cli.flags import parser
from mcp_oauth_gateway.devidp import DevIdpSettings, create_app
from mcp_oauth_gateway.provider_kinds import ProviderKind
from mcp_oauth_gateway.resources import load_paths
from support import ROOT

RESOURCE = "http://127.0.0.1:8080/mcp"
KC_URL = "http://127.0.0.1:8180"
AK_URL = "http://127.0.0.1:9000"


def policy_mcp(out: Path) -> dict:
    """`spec.traffic.jwtAuthentication.mcp` of the GatewayPolicy the tool wrote."""
    documents = list(yaml.safe_load_all((out / "gateway.yaml").read_text()))
    (policy,) = [d for d in documents if d["kind"] == "GatewayPolicy"]
    return policy["spec"]["traffic"]["jwtAuthentication"]["mcp"]


@pytest.fixture
def dev_idp(monkeypatch: pytest.MonkeyPatch, tmp_path: Path):
    """Route the tool's HTTP client to a dev IdP of the asked kind, in process."""

    def use(kind: ProviderKind) -> None:
        settings = DevIdpSettings(
            kind=kind,
            admin_password="admin-pw",
            bootstrap_token="test-token",
            seed_users=["alice"],
            state=tmp_path / f"{kind.flavour}.json",
        )
        app = create_app(settings)
        monkeypatch.setattr(
            "mcp_oauth_gateway.idp.cli.httpx.Client",
            lambda **_: TestClient(app, base_url=KC_URL, follow_redirects=False),
        )

    monkeypatch.setenv("KEYCLOAK_ADMIN_PASSWORD", "admin-pw")
    monkeypatch.setenv("KEYCLOAK_USER_PASSWORD", "user-pw")
    monkeypatch.setenv("AUTHENTIK_TOKEN", "test-token")
    return use


def test_the_mode_defaults_to_broker_for_both_tools():
    for tool in ("keycloak", "authentik"):
        args = parser().parse_args(
            ["idp", tool, "--url", KC_URL, "--resource", RESOURCE, "--output-dir", "out"]
        )
        assert args.mode is AuthorizationServerMode.BROKER, tool


def test_idp_keycloak_without_mode_writes_a_broker_policy(dev_idp, tmp_path, capsys):
    dev_idp(ProviderKind.KEYCLOAK)
    out = tmp_path / "out"
    argv = ["idp", "keycloak", "--url", KC_URL, "--resource", RESOURCE]
    assert cli.main([*argv, "--user", "alice:alice@example.com", "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "mode: Broker" in printed
    assert "client_id: mcp-gateway" in printed
    assert "hint:" not in printed
    mcp = policy_mcp(out)
    assert (mcp["authorizationServerMode"], mcp["clientId"]) == ("Broker", "mcp-gateway")
    assert load_paths([out]).errors == []


def test_idp_authentik_without_mode_allows_the_gateway_callback(dev_idp, tmp_path, capsys):
    dev_idp(ProviderKind.AUTHENTIK)
    out = tmp_path / "out"
    argv = ["idp", "authentik", "--url", AK_URL, "--resource", RESOURCE, "--user", "alice"]
    assert cli.main([*argv, "--wait", "5", "--output-dir", str(out)]) == 0
    assert "mode: Broker" in capsys.readouterr().out
    assert policy_mcp(out)["authorizationServerMode"] == "Broker"


def test_facade_when_asked_for_says_which_clients_it_serves(dev_idp, tmp_path, capsys):
    dev_idp(ProviderKind.AUTHENTIK)
    out = tmp_path / "out"
    argv = ["idp", "authentik", "--url", AK_URL, "--user", "alice", "--mode", "Facade"]
    assert cli.main([*argv, "--wait", "5", "--output-dir", str(out)]) == 0
    printed = capsys.readouterr().out
    assert "mode: Facade" in printed
    assert "hint: Facade mode serves only clients without the RFC 8414 issuer check" in printed
    assert "authorizationServerMode" not in policy_mcp(out)


def test_allow_anonymous_dcr_in_broker_mode_is_a_usage_error(dev_idp, tmp_path, capsys):
    dev_idp(ProviderKind.KEYCLOAK)
    argv = ["idp", "keycloak", "--url", KC_URL, "--resource", RESOURCE, "--allow-anonymous-dcr"]
    assert cli.main([*argv, "--output-dir", str(tmp_path / "out")]) == 2
    error = capsys.readouterr().err
    assert "--allow-anonymous-dcr" in error
    assert "--mode Facade" in error
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("redirect", "status"),
    [
        ("strict:http://127.0.0.1:33418/callback", 2),
        ("regex:http://localhost/.*", 2),
        ("regex:(", 2),
        (r"regex:http://127\.0\.0\.1:8080/.*", 0),
        ("strict:http://127.0.0.1:8080/mcp/oauth/callback", 0),
    ],
)
def test_broker_redirect_uris_must_allow_the_gateway_callback(
    dev_idp, tmp_path, capsys, redirect, status
):
    dev_idp(ProviderKind.AUTHENTIK)
    argv = ["idp", "authentik", "--url", AK_URL, "--resource", RESOURCE, "--wait", "5"]
    done = cli.main([*argv, "--redirect-uri", redirect, "--output-dir", str(tmp_path / "out")])
    assert done == status
    if status:
        assert "--redirect-uri" in capsys.readouterr().err


def test_check_hints_at_broker_for_a_facade_policy(tmp_path, capsys):
    facade = tmp_path / "facade"
    shutil.copytree(ROOT / "examples" / "provider-b", facade)
    cli.main(["check", "-f", str(facade), "--timeout", "0.5"])
    printed = capsys.readouterr().out
    assert "  hint: Facade mode serves only clients without the RFC 8414 issuer check" in printed
    assert "set mcp.authorizationServerMode: Broker" in printed
    policy = facade / "policy.yaml"
    text = policy.read_text()
    assert "      mcp:\n" in text
    broker = "      mcp:\n        authorizationServerMode: Broker\n"
    policy.write_text(text.replace("      mcp:\n", broker))
    cli.main(["check", "-f", str(facade), "--timeout", "0.5"])
    assert "hint:" not in capsys.readouterr().out
