"""Scope strings as OAuth writes them: scope tokens separated by the space character alone
(RFC 6749 §3.3, RFC 9068 §2.2.3). Every place that reads one (granted scopes, the Broker's
consent page, the dev identity provider) splits it here, so none of them reads two scopes where
another reads one."""

from __future__ import annotations

import re
import unicodedata

# RFC 6749 §3.3: scope-token = 1*( %x21 / %x23-5B / %x5D-7E ), printable ASCII but the space,
# `"` and `\`. Matches the characters outside it.
_NOT_TOKEN = re.compile(r"[^\x21\x23-\x5b\x5d-\x7e]")


def scope_tokens(text: str) -> list[str]:
    """The scope tokens of `text`, split on U+0020 only, empty tokens dropped."""
    # Not str.split(): it also splits on NBSP, U+3000, U+0085 and the other Unicode spaces,
    # which would turn "openid\u00a0mcp:tools" into a grant of mcp:tools.
    return [token for token in text.split(" ") if token]


def whitespace_tokens(text: str) -> list[str]:
    """How authentik reads a scope string: split on any whitespace (its authorize and token
    views call `str.split()`). Only for the dev IdP's imitation of authentik, never to decide
    what a token grants."""
    return text.split()


def scope_problem(text: str) -> str | None:
    """Why `text` is not scope tokens separated by spaces (RFC 6749 §3.3), or None."""
    # Runs of U+0020 are not a problem: every reader (Keycloak, authentik, oidc-provider,
    # scope_tokens) cuts at each of them, so they cannot make two readers see different tokens.
    # Any other character outside the grammar can: authentik splits on every Unicode space.
    for token in scope_tokens(text):
        bad = _NOT_TOKEN.search(token)
        if bad is not None:
            char = bad.group()
            name = unicodedata.name(char, "a control or unassigned character")
            return (
                f"the scope token {token[:60]!r} holds U+{ord(char):04X} ({name}): a scope is "
                'printable ASCII but the space, " and \\, and scopes are separated by the '
                "space character U+0020 alone (RFC 6749 §3.3)"
            )
    return None
