"""Scope checks (step-up, MCP 2026-07-28): the route's required scopes, each MCP item's, the
403 `insufficient_scope` challenge that names every scope an operation needs, and the rules
that read granted scopes (`scope`/`scp`, declared implications, nothing inferred)."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.asgi import DPOP_KEY
from mcp_oauth_gateway.controlplane.scopes import compile_scopes, implied_closure, rule_kinds
from mcp_oauth_gateway.dataplane.bounded import CacheCounts
from mcp_oauth_gateway.dataplane.mcp_authz import McpAuthorization
from mcp_oauth_gateway.dataplane.scopes import RequiredScopes, granted_scopes, lacking
from mcp_oauth_gateway.resources.models import McpScopeRule
from unit.rpc_bodies import body as rpc

from .harness import Inner, drive, values
from .scopes_support import PRM, caller, scopes

JSON = [(b"content-type", b"application/json")]


# --- reading granted scopes ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("claims", "granted"),
    [
        ({"scope": "openid mcp:tools"}, {"openid", "mcp:tools"}),
        ({"scope": "  mcp:tools  mcp:read  "}, {"mcp:tools", "mcp:read"}),
        ({"scope": "mcp:tools\tmcp:read"}, {"mcp:tools\tmcp:read"}),  # U+0020 alone separates
        ({"scp": ["mcp:tools", "mcp:read"]}, {"mcp:tools", "mcp:read"}),
        ({"scp": "mcp:tools mcp:read"}, {"mcp:tools", "mcp:read"}),
        ({"scope": "a", "scp": ["b"]}, {"a"}),  # `scope` (RFC 9068) wins
        ({"scp": ["mcp:tools", 7, None]}, {"mcp:tools"}),
        ({"scope": 7}, set()),
        ({"scope": ["mcp:tools"]}, {"mcp:tools"}),
        ({}, set()),
    ],
)
def test_granted_scopes_come_from_scope_or_scp(claims, granted):
    assert granted_scopes(claims, scopes()) == granted


def test_a_granted_scope_grants_what_it_implies_transitively_and_nothing_else():
    rules = scopes(implies={"mcp:admin": ["mcp:write"], "mcp:write": ["mcp:read"]})
    assert granted_scopes({"scope": "mcp:admin"}, rules) == {"mcp:admin", "mcp:write", "mcp:read"}
    assert granted_scopes({"scope": "mcp:read"}, rules) == {"mcp:read"}
    # No prefix or wildcard inference: `mcp` is not `mcp:read`, `mcp:admin:x` is not `mcp:admin`.
    assert granted_scopes({"scope": "mcp mcp:admin:x"}, rules) == {"mcp", "mcp:admin:x"}


def test_implications_are_closed_once_at_load_even_through_cycles():
    closed = implied_closure({"a": ["b"], "b": ["c", "a"], "c": []})
    assert dict(closed) == {"a": {"b", "c"}, "b": {"a", "c"}, "c": set()}


def test_lacking_keeps_the_order_scopes_are_needed_in():
    assert lacking(["c", "a", "b"], frozenset({"a"})) == ["c", "b"]


@pytest.mark.parametrize(
    ("source", "kinds"),
    [
        ('mcp.tool.name.startsWith("delete_")', {"tool"}),
        ('has(mcp.prompt) && mcp.prompt.name == "x"', {"prompt"}),
        ('mcp.resource.uri.startsWith("file:") || mcp.tool.name == "x"', {"resource", "tool"}),
        ('"admin" in jwt.groups', {"tool", "prompt", "resource"}),
        ('mcp["tool"].name == "x"', {"tool", "prompt", "resource"}),
    ],
)
def test_an_item_rule_is_about_the_kinds_its_match_reads(source, kinds):
    assert rule_kinds(source) == kinds


def test_an_item_rule_that_does_not_compile_is_a_problem_naming_its_field():
    problems: list[str] = []
    compile_scopes(None, [McpScopeRule(match="mcp.tool.name ==", required=["x"])], problems)
    assert len(problems) == 1
    assert problems[0].startswith("spec.backend.mcp.scopes[0].match: invalid CEL")


# --- the route's scopes -------------------------------------------------------------------


async def test_a_token_without_the_routes_scope_is_403_with_a_step_up_challenge():
    inner = Inner()
    app = RequiredScopes(inner, scopes(required=["mcp:tools", "mcp:read"]), PRM)
    response = await drive(app, "POST", scope=caller("openid mcp:read"), inner=inner)
    assert not response.reached
    assert response.status == 403
    assert response.header(b"www-authenticate") == (
        b'Bearer error="insufficient_scope", error_description="this route needs scope '
        b'mcp:tools, which the token does not grant", resource_metadata="http://gw.test'
        + PRM.encode()
        + b'", scope="mcp:tools mcp:read"'
    )
    assert response.json() == {
        "error": "insufficient_scope",
        "error_description": "this route needs scope mcp:tools, which the token does not grant",
        "scope": "mcp:tools mcp:read",
    }


async def test_a_dpop_call_short_of_a_scope_gets_the_error_on_its_dpop_challenge():
    # RFC 9449 §7.2: the error on the challenge of the scheme the token came with.
    inner = Inner()
    app = RequiredScopes(inner, scopes(required=["mcp:tools"]), PRM)
    dpop_call = {**caller("openid"), DPOP_KEY: ("ES256", "EdDSA")}
    response = await drive(app, "POST", scope=dpop_call, inner=inner)
    assert response.status == 403
    metadata = f'resource_metadata="http://gw.test{PRM}"'
    assert values(response.headers, b"www-authenticate") == [
        f'Bearer {metadata}, scope="mcp:tools"'.encode(),
        (
            'DPoP error="insufficient_scope", error_description="this route needs scope '
            f'mcp:tools, which the token does not grant", algs="ES256 EdDSA", {metadata}, '
            'scope="mcp:tools"'
        ).encode(),
    ]
    assert response.json()["error"] == "insufficient_scope"


async def test_a_token_with_the_routes_scopes_or_a_scope_implying_them_passes():
    inner = Inner()
    rules = scopes(required=["mcp:tools"], implies={"mcp:admin": ["mcp:tools"]})
    for granted in ("mcp:tools", "openid mcp:admin"):
        response = await drive(
            RequiredScopes(inner, rules, PRM), "POST", scope=caller(granted), inner=inner
        )
        assert response.reached, granted


async def test_without_metadata_the_challenge_has_no_resource_metadata():
    response = await drive(RequiredScopes(Inner(), scopes(required=["x"]), None), scope=caller(""))
    assert response.status == 403
    assert b"resource_metadata" not in (response.header(b"www-authenticate") or b"")


# --- an MCP item's scopes -----------------------------------------------------------------

ITEM_RULES = [
    ('mcp.tool.name.startsWith("delete_")', ["mcp:admin"]),
    ('mcp.tool.name == "delete_all"', ["mcp:danger"]),
    ('mcp.resource.uri.startsWith("file:///private/")', ["files:read"]),
]


def item_stage(inner: Inner, required: list[str] | None = None) -> McpAuthorization:
    return McpAuthorization(inner, None, 1 << 20, scopes(required, items=ITEM_RULES), PRM)


async def call(app: McpAuthorization, inner: Inner, granted: str, method: str, **params: object):
    return await drive(
        app, "POST", headers=JSON, body=rpc(method, **params), scope=caller(granted), inner=inner
    )


async def test_a_call_short_of_an_items_scope_is_403_naming_every_scope_the_call_needs():
    inner = Inner()
    app = item_stage(inner, required=["mcp:tools"])
    response = await call(app, inner, "mcp:tools mcp:admin", "tools/call", name="delete_all")
    assert not response.reached
    assert response.status == 403
    challenge = response.header(b"www-authenticate") or b""
    assert challenge.startswith(b'Bearer error="insufficient_scope"')
    # One challenge with all of them, the held ones too: clients do not step up twice.
    assert b'scope="mcp:tools mcp:admin mcp:danger"' in challenge
    assert response.json()["error_description"] == (
        "tools/call of 'delete_all' needs scope mcp:danger, which the token does not grant"
    )


@pytest.mark.parametrize(
    ("granted", "method", "params", "reached"),
    [
        ("mcp:admin", "tools/call", {"name": "delete_note"}, True),
        ("", "tools/call", {"name": "delete_note"}, False),
        ("", "tools/call", {"name": "add"}, True),
        # Rules about tools do not apply to prompts or resources, and the other way round.
        ("", "prompts/get", {"name": "delete_note"}, True),
        ("", "resources/read", {"uri": "file:///private/a"}, False),
        ("files:read", "resources/read", {"uri": "file:///private/a"}, True),
        ("", "resources/read", {"uri": "file:///public/a"}, True),
        # Lists are not filtered by scope: a client must see a tool to call it and step up.
        ("", "tools/list", {}, True),
    ],
)
async def test_which_calls_need_which_scopes(granted, method, params, reached):
    inner = Inner()
    response = await call(item_stage(inner), inner, granted, method, **params)
    assert response.reached is reached
    assert response.status == (200 if reached else 403)


async def test_a_match_that_cannot_be_evaluated_counts_as_matching():
    inner = Inner()
    rules = scopes(items=[("mcp.tool.name.startsWith(jwt.prefix)", ["mcp:admin"])])
    app = McpAuthorization(inner, None, 1 << 20, rules, PRM)
    response = await call(app, inner, "", "tools/call", name="add")  # no `prefix` claim
    assert response.status == 403


async def test_a_name_with_a_nul_is_refused_before_any_scope_rule_reads_it():
    inner = Inner()
    response = await call(item_stage(inner), inner, "mcp:admin", "tools/call", name="add\x00x")
    assert not response.reached
    assert response.json()["error"]["code"] == -32602


async def test_an_anonymous_caller_short_of_a_scope_is_asked_for_a_token_not_a_step_up():
    inner = Inner()
    app = RequiredScopes(inner, scopes(required=["mcp:tools"]), PRM)
    response = await drive(app, "POST", inner=inner)  # Optional mode: no claims at all
    assert response.status == 401
    assert response.header(b"www-authenticate") == (
        b'Bearer resource_metadata="http://gw.test' + PRM.encode() + b'", scope="mcp:tools"'
    )
    item = await drive(
        item_stage(inner),
        "POST",
        headers=JSON,
        body=rpc("tools/call", name="delete_x"),
        inner=inner,
    )
    assert item.status == 401
    assert not inner.seen


async def test_what_tokens_lack_is_remembered_under_the_shared_budget_least_recent_first():
    """The route-wide scope memo is one of the process's authorization memos: bounded, least
    recently used forgotten first, its entries and evictions counted with theirs."""
    counts = CacheCounts()
    app = RequiredScopes(Inner(), scopes(required=["mcp:tools"]), PRM, 2, counts)
    for granted in ("a", "b", "a", "c"):  # `a` used again: `b` is the least recent
        await drive(app, "POST", scope=caller(granted))
    assert (len(app._missing), counts.evictions, counts.total) == (2, 1, 2)
    assert "t-a" in app._missing
    assert "t-b" not in app._missing
