"""Step-up authorization (MCP 2026-07-28, "Scope Challenge Handling") with real clients: the
Python `mcp` 2.x client and the TypeScript client 2.x sign in with the scopes the 401 asks for,
call a tool that needs one more, get 403 `insufficient_scope`, and re-authorize by themselves
with the union of scopes; the call then succeeds. In Facade layout (the protected resource
metadata names the provider, which has DCR) and in Broker mode.

The provider is oidc-provider granting `mcp:tools` and `mcp:admin` (EXTRA_SCOPES)."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest

from node_clients import run_ts_client
from support import PEERS, unverified_claims

STACKS = ["step_up_facade", "step_up_broker"]


def run_py_client(mcp: str, step_up: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(PEERS / "py_client.py"), mcp, "alice", "x", step_up],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stdout.strip().splitlines()
    assert lines, done.stderr[-2000:]
    return json.loads(lines[-1])


@pytest.mark.parametrize("stack_name", STACKS)
def test_python_client_steps_up_on_403_and_the_call_succeeds(stack_name, request):
    stack = request.getfixturevalue(stack_name)
    report = run_py_client(stack.mcp, "count")
    assert report["ok"], json.dumps(report)
    assert report["result"] == "5"
    assert report["step_up"] == "counted to 1"
    first, second = report["sign_ins"]
    assert "mcp:tools" in first.split()
    assert "mcp:admin" not in first.split()
    # The second sign-in asked for what it had and what the challenge named.
    assert {"mcp:tools", "mcp:admin"} <= set(second.split())
    assert set(first.split()) <= set(second.split())


@pytest.mark.parametrize("stack_name", STACKS)
def test_typescript_client_2_steps_up_on_403_and_the_call_succeeds(stack_name, request):
    stack = request.getfixturevalue(stack_name)
    report = run_ts_client(stack.mcp, "alice", "x", "client2", "count")
    assert report["ok"], json.dumps(report)
    assert "mcp:admin" not in report["scope"].split()
    step_up = report["stepUp"]
    assert step_up["stepped"], report
    assert {"mcp:tools", "mcp:admin"} <= set(step_up["scope"].split())
    assert step_up["result"] == "counted to 1"


@pytest.mark.parametrize("stack_name", STACKS)
def test_the_challenges_a_client_meets(stack_name, request):
    stack = request.getfixturevalue(stack_name)
    prm = f"{stack.gateway}/.well-known/oauth-protected-resource/mcp"
    # 401: the scopes to sign in with, the minimal set, never offline_access.
    unauthenticated = httpx.post(stack.mcp, json={})
    assert unauthenticated.status_code == 401
    challenge = unauthenticated.headers["www-authenticate"]
    assert 'scope="openid profile mcp:tools"' in challenge
    metadata = httpx.get(prm).json()
    assert metadata["scopes_supported"] == ["openid", "profile", "mcp:tools"]
    # A valid token without the route's scope: 403 asking for it.
    plain = stack.token(scope="openid profile")
    forbidden = httpx.post(stack.mcp, json={}, headers={"Authorization": f"Bearer {plain}"})
    assert forbidden.status_code == 403
    assert forbidden.headers["www-authenticate"] == (
        'Bearer error="insufficient_scope", error_description="this route needs scope '
        f'mcp:tools, which the token does not grant", resource_metadata="{prm}", '
        'scope="mcp:tools"'
    )
    assert forbidden.json()["error"] == "insufficient_scope"
    # With it, a tool that needs more: 403 naming every scope the call needs.
    tools = stack.token(scope="openid mcp:tools")
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "count"}}
    headers = {
        "Authorization": f"Bearer {tools}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2025-06-18",
    }
    needs_more = httpx.post(stack.mcp, json=call, headers=headers)
    assert needs_more.status_code == 403
    assert 'scope="mcp:tools mcp:admin"' in needs_more.headers["www-authenticate"]
    assert unverified_claims(tools)["scope"] == "openid mcp:tools"
