"""Scope strings are split on the space character U+0020 alone (RFC 6749 §3.3, RFC 9068): no
other whitespace separates two scopes, wherever the gateway, the Broker or the dev identity
provider reads a scope string."""

from __future__ import annotations

import ast

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.controlplane.snapshot import CompiledScopes
from mcp_oauth_gateway.dataplane.scopes import granted_scopes
from mcp_oauth_gateway.oauth_scopes import scope_tokens
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
