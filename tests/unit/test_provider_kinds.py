"""Provider kinds as a type (issue 27): every kind has a profile, an access-token rule and an
adapter; configuration's spellings (`ProviderB` and `Authentik` for authentik) resolve to the
kind once, at load time, and nothing past the models sees a spelling."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.provider_kinds import (
    ALIASES,
    FLAVOURS,
    PROFILES,
    ProviderFacts,
    ProviderKind,
    parse_kind,
    profile,
)
from mcp_oauth_gateway.providers import ADAPTERS, adapter_for
from mcp_oauth_gateway.providers.access_tokens import RULES, access_token_rule
from mcp_oauth_gateway.resources.models import JwtProvider, McpAuthentication


@pytest.mark.parametrize("kind", list(ProviderKind))
def test_every_kind_has_a_profile_a_rule_and_an_adapter(kind):
    assert profile(kind).kind is kind
    assert kind in profile(kind).aliases, "a kind's own name is one of its spellings"
    assert access_token_rule(kind).kind is kind
    adapter = adapter_for(kind, "mcp-public")
    assert adapter is not None
    assert adapter.kind is kind
    assert set(PROFILES) == set(RULES) == set(ADAPTERS) == set(ProviderKind)


@pytest.mark.parametrize(
    ("spelling", "kind"),
    [
        ("ProviderB", ProviderKind.AUTHENTIK),
        ("Authentik", ProviderKind.AUTHENTIK),
        ("Keycloak", ProviderKind.KEYCLOAK),
    ],
)
def test_configuration_spellings_become_kinds(spelling, kind):
    assert parse_kind(spelling) is kind
    assert McpAuthentication.model_validate({"provider": spelling}).provider is kind
    provider = JwtProvider.model_validate(
        {"issuer": "http://idp/", "jwks": {"inline": "{}"}, "kind": spelling}
    )
    assert provider.kind is kind


@pytest.mark.parametrize("spelling", ["keycloak", "authentik", "Okta", "", "ProviderA"])
def test_an_unknown_spelling_is_refused_naming_every_allowed_one(spelling):
    with pytest.raises(ValueError, match="allowed values: ProviderB, Authentik, Keycloak"):
        parse_kind(spelling)
    with pytest.raises(ValueError, match=f"unknown provider {spelling!r}; allowed values"):
        McpAuthentication.model_validate({"provider": spelling})


def test_spellings_are_unique_to_one_kind():
    spellings = [alias for p in PROFILES.values() for alias in p.aliases]
    assert len(spellings) == len(set(spellings)) == len(ALIASES)


def _facts(**changes: object) -> ProviderFacts:
    values: dict[str, object] = {
        "path": "providers[0]",
        "mcp_path": "mcp",
        "issuer": "http://idp/application/o/mcp/",
        "shown_issuer": "http://idp/application/o/mcp/",
        "audiences": ("mcp-public",),
        "client_id": "mcp-public",
        "client_id_field": "mcp.clientId",
    }
    values.update(changes)
    return ProviderFacts(**values)  # type: ignore[arg-type]


def test_authentik_checks_its_client_audience_and_issuer():
    problems = profile(ProviderKind.AUTHENTIK).problems
    assert problems(_facts()) == []
    assert (
        "mcp.clientId is required when provider is ProviderB" in problems(_facts(client_id=None))[0]
    )
    assert (
        "audiences must contain mcp.clientId 'mcp-public'"
        in problems(_facts(audiences=("other",)))[0]
    )
    assert "must end with '/'" in problems(_facts(issuer="http://idp/x"))[0]


def test_keycloak_has_no_checks_of_its_own():
    assert profile(ProviderKind.KEYCLOAK).problems(_facts(client_id=None, issuer="http://x")) == []


@pytest.mark.parametrize(
    ("kind", "word"), [(ProviderKind.KEYCLOAK, "keycloak"), (ProviderKind.AUTHENTIK, "authentik")]
)
def test_each_kind_has_the_tools_lower_case_word(kind, word):
    assert kind.flavour == word
    assert ProviderKind.from_flavour(word) is kind
    assert FLAVOURS[word] is kind
    assert set(FLAVOURS.values()) == set(ProviderKind)


@pytest.mark.parametrize("word", ["Keycloak", "ProviderB", "Authentik", "okta", ""])
def test_configuration_spellings_are_not_flavours(word):
    with pytest.raises(ValueError, match="allowed values: authentik, keycloak"):
        ProviderKind.from_flavour(word)
