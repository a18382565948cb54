"""How a federated backend's items are named for clients and read back: tool and prompt names
`<target>_<name>`, resource URIs `mcp+gw://<target>/<uri>`, each reversible for any input and
never read as another target's."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.controlplane.federation import (
    offered_name,
    offered_uri,
    split_name,
    split_uri,
    target_of,
)
from mcp_oauth_gateway.resources.backend import TARGET_NAME
from unit.fuzz_settings import FUZZ

TARGETS = frozenset({"a", "b-2", "search"})
target_names = st.from_regex(re.compile(TARGET_NAME.pattern), fullmatch=True)


@FUZZ
@given(target=target_names, name=st.text(min_size=1))
def test_a_name_reads_back_as_it_was_offered(target, name):
    assert split_name(offered_name(target, name), {target}) == (target, name)


@FUZZ
@given(target=target_names, uri=st.text(min_size=1))
def test_a_uri_reads_back_exactly_whatever_it_holds(target, uri):
    assert split_uri(offered_uri(target, uri), {target}) == (target, uri)


def test_the_first_underscore_ends_the_target():
    assert split_name("b-2_my_tool", TARGETS) == ("b-2", "my_tool")
    assert offered_name("search", "find_all") == "search_find_all"


def test_templates_stay_expandable():
    offered = offered_uri("a", "file:///{path}")
    assert offered == "mcp+gw://a/file:///{path}"
    assert split_uri(offered.replace("{path}", "x%2Fy"), TARGETS) == ("a", "file:///x%2Fy")


@pytest.mark.parametrize(
    "offered",
    ["echo", "_echo", "a_", "c_echo", "A_echo", "a", "", "b-2", "a\x00_echo", "search-x_y"],
)
def test_names_no_target_owns_are_refused(offered):
    assert split_name(offered, TARGETS) is None


@pytest.mark.parametrize(
    "offered",
    [
        "file:///x",
        "mcp+gw://a",
        "mcp+gw://a/",
        "mcp+gw://c/file:///x",
        "MCP+GW://a/file:///x",
        "mcp+gw:/a/file:///x",
        "mcp+gw://a\x00/x",
        "mcp+gw://../a/x",
        "mcp+gw://a@b-2/x",
    ],
)
def test_uris_no_target_owns_are_refused(offered):
    assert split_uri(offered, TARGETS) is None


def test_target_of_reads_by_kind():
    assert target_of("tool", "a_echo", TARGETS) == "a"
    assert target_of("prompt", "b-2_greet", TARGETS) == "b-2"
    assert target_of("resource", "mcp+gw://search/doc://1", TARGETS) == "search"
    assert target_of("resource", "a_echo", TARGETS) is None
    assert target_of("tool", "mcp+gw://a/x", TARGETS) is None
