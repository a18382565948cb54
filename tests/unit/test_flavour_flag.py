"""`dev-idp --flavour` and `demo --flavour` (issue 40): the tools' lower-case words name the same
type as configuration's `provider`, `ProviderKind`, and parse straight into it; the help and the
refusal of another word are argparse's own, in the same words as before."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.cli.flags import parser
from mcp_oauth_gateway.devidp import DevIdpSettings, create_app
from mcp_oauth_gateway.devidp.authentik import AuthentikFlavour
from mcp_oauth_gateway.devidp.keycloak import KeycloakFlavour
from mcp_oauth_gateway.provider_kinds import ProviderKind


@pytest.mark.parametrize("command", [["dev-idp"], ["demo"]])
@pytest.mark.parametrize("flag", ["--flavour", "--flavor"])
@pytest.mark.parametrize(
    ("word", "kind"), [("keycloak", ProviderKind.KEYCLOAK), ("authentik", ProviderKind.AUTHENTIK)]
)
def test_the_word_parses_to_the_kind(command, flag, word, kind):
    assert parser().parse_args([*command, flag, word]).kind is kind


def test_the_demo_defaults_to_authentik():
    assert parser().parse_args(["demo"]).kind is ProviderKind.AUTHENTIK


@pytest.mark.parametrize(
    ("command", "words"),
    [("dev-idp", "'keycloak', 'authentik'"), ("demo", "'authentik', 'keycloak'")],
)
@pytest.mark.parametrize("word", ["Keycloak", "ProviderB", "Authentik", "okta", ""])
def test_another_word_is_refused_in_argparse_s_words(command, words, word, capsys):
    """Configuration's spellings are not the tools' words."""
    with pytest.raises(SystemExit) as exit_:
        parser().parse_args([command, "--flavour", word])
    assert exit_.value.code == 2
    expected = f"argument --flavor/--flavour: invalid choice: {word!r} (choose from {words})"
    assert expected in capsys.readouterr().err


@pytest.mark.parametrize(
    ("command", "shown"),
    [("dev-idp", "--flavor {keycloak,authentik}"), ("demo", "[--flavor {authentik,keycloak}]")],
)
def test_the_help_shows_the_words(command, shown, capsys):
    with pytest.raises(SystemExit):
        parser().parse_args([command, "--help"])
    assert shown in capsys.readouterr().out


@pytest.mark.parametrize(
    ("kind", "flavour"),
    [(ProviderKind.KEYCLOAK, KeycloakFlavour), (ProviderKind.AUTHENTIK, AuthentikFlavour)],
)
def test_the_dev_idp_serves_the_flavour_of_its_kind(kind, flavour):
    assert flavour.kind is kind
    app = create_app(DevIdpSettings(kind=kind))
    # The Keycloak flavour answers preflights in front of its routes; authentik's start-up gate
    # in front of its own.
    inner = app.app
    served = {route.path for route in inner.routes}  # type: ignore[attr-defined]
    assert ("/health/live" in served) is (kind is ProviderKind.KEYCLOAK)
    assert ("/-/health/live/" in served) is (kind is ProviderKind.AUTHENTIK)
