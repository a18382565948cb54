"""Refusals that quote what the caller sent (a tool name, a claim) in a response header: the
value is always one a server can write, so no input turns a refusal into a 500 (uvicorn refuses
control characters in header values; the harness checks every response the way it does)."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st
from uvicorn.protocols.http.httptools_impl import HEADER_VALUE_RE

from mcp_oauth_gateway.dataplane.challenge import challenge
from mcp_oauth_gateway.dataplane.mcp_authz import McpAuthorization
from unit.fuzz_settings import FUZZ

from .harness import Inner, drive
from .scopes_support import PRM, caller, scopes

EVERY_TOOL = [("has(mcp.tool)", ["mcp:admin"])]


async def step_up(name: str):
    inner = Inner()
    app = McpAuthorization(inner, None, 1 << 20, scopes(items=EVERY_TOOL), PRM)
    body = json.dumps(
        {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": name}}
    ).encode()
    return await drive(app, "POST", body=body, scope=caller("mcp:tools"), inner=inner), inner


async def test_a_tool_name_with_control_characters_gets_a_step_up_challenge_not_a_500():
    response, inner = await step_up("admin\x01\x0b\x7fx")
    assert not inner.seen
    assert response.status == 403
    assert b"admin\\\\x01\\\\x0b\\\\x7fx" in (response.header(b"www-authenticate") or b"")


@FUZZ
@given(st.text(st.characters(exclude_categories=["Cs"]), max_size=30))
async def test_any_tool_name_short_of_a_scope_gets_a_writable_challenge(name):
    response, inner = await step_up(name)
    assert not inner.seen
    # A name with a NUL is never allowed at all; every other one is asked to step up.
    assert response.status == (200 if "\x00" in name else 403)


@FUZZ
@given(st.text(max_size=40))
def test_a_challenge_quoting_any_reason_is_a_writable_header_value(reason):
    value = challenge("http://gw.test/prm", "mcp:tools", reason)
    assert not HEADER_VALUE_RE.search(value)
    assert value.startswith(b"Bearer ")
