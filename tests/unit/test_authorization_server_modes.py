"""The authorization-server mode as a type (issue 40): configuration's `Facade`/`Broker` become
`AuthorizationServerMode` at load time and stay that type through the compiled policy and the
provisioning tools' `--mode`; the words every reader sees (the CRD's enum, load errors, the
help and refusals of `--mode`) are unchanged."""

from __future__ import annotations

import pytest
import yaml

from mcp_oauth_gateway.authorization_server_modes import AuthorizationServerMode
from mcp_oauth_gateway.cli.flags import parser
from mcp_oauth_gateway.controlplane import Deployment
from mcp_oauth_gateway.controlplane.mcp_settings import compile_mcp
from mcp_oauth_gateway.resources.models import JwtProvider, McpAuthentication
from support import ROOT

CRD = ROOT / "deploy" / "crds" / "gatewaypolicies.mcp-oauth-gateway.dev.yaml"
IDP_ARGS = [
    "--url",
    "http://127.0.0.1:8180",
    "--resource",
    "http://127.0.0.1:8080/mcp",
    "--output-dir",
    "out",
]


def _compiled_mode(mcp: dict[str, object]) -> AuthorizationServerMode:
    provider = JwtProvider.model_validate({"issuer": "http://idp/", "jwks": {"inline": "{}"}})
    problems: list[str] = []
    compiled = compile_mcp(
        McpAuthentication.model_validate(mcp), [provider], problems, Deployment()
    )
    return compiled.mode


@pytest.mark.parametrize(
    ("mcp", "mode"),
    [
        ({}, AuthorizationServerMode.FACADE),
        ({"authorizationServerMode": "Facade"}, AuthorizationServerMode.FACADE),
        (
            {"authorizationServerMode": "Broker", "provider": "Keycloak", "clientId": "gw"},
            AuthorizationServerMode.BROKER,
        ),
    ],
)
def test_the_mode_is_the_type_from_the_resource_to_the_compiled_policy(mcp, mode):
    spec = McpAuthentication.model_validate(mcp)
    assert spec.authorization_server_mode is mode
    assert _compiled_mode(mcp) is mode


@pytest.mark.parametrize("word", ["broker", "BROKER", "Proxy", ""])
def test_another_word_is_refused_naming_the_two(word):
    with pytest.raises(ValueError, match="Input should be 'Facade' or 'Broker'"):
        McpAuthentication.model_validate({"authorizationServerMode": word})


def test_the_values_are_configuration_s_words_in_the_crd():
    documents = list(yaml.safe_load_all(CRD.read_text()))
    (version,) = documents[0]["spec"]["versions"]
    jwt = version["schema"]["openAPIV3Schema"]["properties"]["spec"]["properties"]["traffic"]
    mcp = jwt["properties"]["jwtAuthentication"]["properties"]["mcp"]["properties"]
    node = mcp["authorizationServerMode"]
    assert node["enum"] == ["Facade", "Broker"] == [m.value for m in AuthorizationServerMode]
    assert node["default"] == "Facade"


@pytest.mark.parametrize("tool", ["keycloak", "authentik"])
@pytest.mark.parametrize(
    ("given", "mode"),
    [
        ([], AuthorizationServerMode.BROKER),
        (["--mode", "Broker"], AuthorizationServerMode.BROKER),
        (["--mode", "Facade"], AuthorizationServerMode.FACADE),
    ],
)
def test_the_tools_mode_flag_parses_to_the_type(tool, given, mode):
    args = parser().parse_args(["idp", tool, *IDP_ARGS, *given])
    assert args.mode is mode


def test_the_tools_mode_flag_refuses_another_word_in_argparse_s_words(capsys):
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args(["idp", "keycloak", *IDP_ARGS, "--mode", "broker"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err
    assert "argument --mode: invalid choice: 'broker' (choose from 'Broker', 'Facade')" in err
    with pytest.raises(SystemExit):
        parser().parse_args(["idp", "keycloak", "--help"])
    assert "--mode {Broker,Facade}" in capsys.readouterr().out
