"""Scope strings as OAuth writes them: scope tokens separated by the space character alone
(RFC 6749 §3.3, RFC 9068 §2.2.3). Every place that reads one (granted scopes, the Broker's
consent page, the dev identity provider) splits it here, so none of them reads two scopes where
another reads one."""

from __future__ import annotations


def scope_tokens(text: str) -> list[str]:
    """The scope tokens of `text`, split on U+0020 only, empty tokens dropped."""
    # Not str.split(): it also splits on NBSP, U+3000, U+0085 and the other Unicode spaces,
    # which would turn "openid\u00a0mcp:tools" into a grant of mcp:tools.
    return [token for token in text.split(" ") if token]
