"""`serve --token-cache-entries`: the size of each route's token cache and authorization memo,
a whole number of at least 1; anything else is one line naming the flag, exit 2."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.asgi import DEFAULT_TOKEN_CACHE_ENTRIES
from mcp_oauth_gateway.cli import main
from mcp_oauth_gateway.cli.flags import parser
from mcp_oauth_gateway.cli.serve import serve_options


def options(*flags: str):
    return serve_options(parser().parse_args(["serve", "-f", "gw.yaml", *flags]))


def test_the_default_holds_tens_of_thousands_of_users():
    assert options().limits.token_cache_entries == DEFAULT_TOKEN_CACHE_ENTRIES == 100_000


def test_the_flag_sets_the_size():
    assert options("--token-cache-entries", "250000").limits.token_cache_entries == 250_000


@pytest.mark.parametrize("value", ["0", "-1", "1.5", "many", ""])
def test_a_bad_value_is_one_line_naming_the_flag(value, capsys):
    assert main(["serve", "-f", "does-not-matter.yaml", "--token-cache-entries", value]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith("error: --token-cache-entries must be a whole number of at least 1")
