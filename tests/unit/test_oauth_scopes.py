"""Scope strings are split on the space character U+0020 alone (RFC 6749 §3.3, RFC 9068): no
other whitespace separates two scopes, wherever the gateway, the Broker or the dev identity
provider reads a scope string. A client's scope string that holds anything but scope tokens and
spaces is refused (the Broker's authorization and token requests, registration)."""

from __future__ import annotations

import ast
import json
import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.broker.errors import OAuthError
from mcp_oauth_gateway.broker.requests import scope_param
from mcp_oauth_gateway.controlplane.snapshot import CompiledScopes
from mcp_oauth_gateway.dataplane.scopes import granted_scopes
from mcp_oauth_gateway.oauth_scopes import scope_problem, scope_tokens
from mcp_oauth_gateway.providers.base import RegistrationError
from mcp_oauth_gateway.registration import parse_registration
from support import ROOT

# Every character str.split() splits on, U+0020 aside: NBSP, U+3000, U+000B, U+0085, ...
OTHER_WHITESPACE = [chr(c) for c in range(0x110000) if chr(c).isspace() and c != 0x20]
NO_RULES = CompiledScopes(required=(), implies={})


def test_the_list_of_other_whitespace_is_the_one_the_issue_names() -> None:
    assert {"\u00a0", "\u3000", "\u000b", "\u0085", "\t", "\n", "\u2028"} <= set(OTHER_WHITESPACE)


@pytest.mark.parametrize("space", OTHER_WHITESPACE, ids=lambda c: f"U+{ord(c):04X}")
def test_no_whitespace_but_u0020_separates_two_granted_scopes(space: str) -> None:
    claims = {"scope": f"openid{space}mcp:tools"}
    assert granted_scopes(claims, NO_RULES) == {f"openid{space}mcp:tools"}
    assert "mcp:tools" not in granted_scopes(claims, NO_RULES)
    assert scope_tokens(f"openid{space}mcp:tools") == [f"openid{space}mcp:tools"]


def test_a_space_separated_scope_string_grants_each_scope() -> None:
    assert granted_scopes({"scope": "openid mcp:tools"}, NO_RULES) == {"openid", "mcp:tools"}
    assert scope_tokens("  openid   mcp:tools ") == ["openid", "mcp:tools"]
    assert scope_tokens("") == []
    assert scope_tokens("   ") == []


SCOPE_TOKEN = st.text(st.characters(exclude_characters=" "), min_size=1)


@given(st.lists(SCOPE_TOKEN), st.integers(min_value=1, max_value=3))
def test_scope_tokens_undoes_joining_with_spaces(tokens: list[str], width: int) -> None:
    assert scope_tokens((" " * width).join(tokens)) == tokens


@given(st.text())
def test_scope_tokens_only_ever_cuts_at_u0020(text: str) -> None:
    tokens = scope_tokens(text)
    assert all(token and " " not in token for token in tokens)
    # Nothing but U+0020 is dropped: the tokens hold every other character, in order.
    assert "".join(tokens) == text.replace(" ", "")


def _splits_a_scope(node: ast.AST) -> bool:
    """A `<something about scope>.split()` with no separator: the any-whitespace split."""
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "split"
        and not node.args
        and not node.keywords
        and "scope" in (receiver := ast.unparse(node.func.value).lower())
        and "__doc__" not in receiver  # reflowing a docstring, not reading scopes
    )


def test_no_scope_string_in_src_is_split_on_any_whitespace() -> None:
    found = [
        f"{path.relative_to(ROOT)}:{node.lineno}"
        for path in sorted((ROOT / "src").rglob("*.py"))
        for node in ast.walk(ast.parse(path.read_text(), str(path)))
        if _splits_a_scope(node)
    ]
    assert found == [], "split scope strings with oauth_scopes.scope_tokens: " + ", ".join(found)


# --- the grammar: RFC 6749 §3.3 scope tokens, separated by U+0020 -----------------------------

# oidc-provider's check (lib/helpers/is_valid_scope.js), the strict reading of RFC 6749 §3.3.
STRICT = re.compile(r"[\x21\x23-\x5b\x5d-\x7e]+(?: [\x21\x23-\x5b\x5d-\x7e]+)*")
TOKEN_CHARS = [chr(c) for c in range(0x21, 0x7F) if chr(c) not in '"\\']
CONTROLS = [chr(c) for c in (*range(0x20), 0x7F, *range(0x80, 0xA0))]


def test_the_token_characters_are_printable_ascii_but_space_quote_and_backslash() -> None:
    assert len(TOKEN_CHARS) == 0x7E - 0x21 + 1 - 2
    assert scope_problem("".join(TOKEN_CHARS)) is None
    assert scope_problem("openid mcp:tools offline_access urn:x:y/z#1!~") is None


@pytest.mark.parametrize("space", OTHER_WHITESPACE, ids=lambda c: f"U+{ord(c):04X}")
def test_every_whitespace_but_u0020_is_refused_between_or_inside_scopes(space: str) -> None:
    for text in (f"openid{space}mcp:tools", f"openid {space}", f"{space}openid", space):
        problem = scope_problem(text)
        assert problem is not None, repr(text)
        assert f"U+{ord(space):04X}" in problem, problem


@pytest.mark.parametrize("char", ['"', "\\"], ids=["quote", "backslash"])
def test_quotes_and_backslashes_are_refused(char: str) -> None:
    problem = scope_problem(f"openid mcp{char}tools")
    assert problem is not None
    assert f"U+{ord(char):04X}" in problem
    assert "RFC 6749 §3.3" in problem


@pytest.mark.parametrize("char", CONTROLS, ids=lambda c: f"U+{ord(c):04X}")
def test_control_characters_are_refused_and_never_echoed_raw(char: str) -> None:
    problem = scope_problem(f"openid{char}admin")
    assert problem is not None
    assert char not in problem  # the token is quoted with its escapes, never as it came


# é, zero-width space, right-to-left override, BOM, an emoji, the replacement character (what
# bad UTF-8 in a query or a form decodes to), a lone surrogate.
NON_ASCII = ["\u00e9", "\u200b", "\u202e", "\ufeff", "\U0001f642", "\ufffd", chr(0xD800)]


@pytest.mark.parametrize("char", NON_ASCII, ids=lambda c: f"U+{ord(c):04X}")
def test_any_character_outside_ascii_is_refused(char: str) -> None:
    assert scope_problem(f"mcp:{char}") is not None


@pytest.mark.parametrize("text", ["", " ", "  ", " openid", "openid ", "openid  mcp:tools"])
def test_empty_tokens_are_no_problem_their_spaces_are_dropped(text: str) -> None:
    # Every reader cuts at each U+0020, so an empty token cannot be read two ways; the Broker
    # passes on the tokens joined by single spaces, never these strings.
    assert scope_problem(text) is None


def test_every_ascii_character_is_judged_by_the_grammar() -> None:
    for code in range(0x80):
        char = chr(code)
        assert (scope_problem(f"a{char}b") is None) == (char in TOKEN_CHARS or char == " "), code


@given(st.text())
def test_a_scope_is_accepted_exactly_when_its_tokens_joined_pass_the_strict_grammar(
    text: str,
) -> None:
    joined = " ".join(scope_tokens(text))
    assert (scope_problem(text) is None) == (joined == "" or STRICT.fullmatch(joined) is not None)


@given(st.lists(st.text(st.sampled_from(TOKEN_CHARS), min_size=1), min_size=1))
def test_scope_tokens_joined_by_spaces_are_always_accepted(tokens: list[str]) -> None:
    assert scope_problem(" ".join(tokens)) is None


# --- where a client's scope string is read: the Broker's requests, registration ---------------


def test_the_broker_passes_on_the_tokens_joined_by_single_spaces() -> None:
    assert scope_param("  openid   mcp:tools ") == "openid mcp:tools"
    assert scope_param(None, "openid profile") == "openid profile"
    assert scope_param("", "openid profile") == "openid profile"
    assert scope_param("   ", "openid profile") == "openid profile"
    assert scope_param(None) == ""


def test_the_broker_refuses_a_malformed_scope_as_invalid_scope_to_the_trusted_uri() -> None:
    with pytest.raises(OAuthError) as refused:
        scope_param("openid\u00a0mcp:tools", "openid", "http://127.0.0.1/cb", "s1")
    error = refused.value
    assert (error.status, error.error) == (400, "invalid_scope")
    assert (error.redirect_href, error.state) == ("http://127.0.0.1/cb", "s1")
    assert "U+00A0 (NO-BREAK SPACE)" in error.description
    with pytest.raises(OAuthError) as in_place:
        scope_param("openid\tmcp:tools")
    assert in_place.value.redirect_href is None


@pytest.mark.parametrize("scope", ["openid\u3000mcp:tools", 'a"b', "a\\b", "a\x00b"])
def test_registration_refuses_a_malformed_scope(scope: str) -> None:
    body = {"redirect_uris": ["http://127.0.0.1/cb"], "scope": scope}
    with pytest.raises(RegistrationError) as refused:
        parse_registration(json.dumps(body).encode())
    assert refused.value.error == "invalid_client_metadata"
    assert "RFC 6749 §3.3" in refused.value.description
    body["scope"] = "openid  mcp:tools "
    assert parse_registration(json.dumps(body).encode())["scope"] == "openid  mcp:tools "
