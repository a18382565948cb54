"""`mcp-oauth-gateway demo`: one command brings up everything; a strict client signs in; a user
outside the group gets 403; Ctrl-C stops every process; a second run works. Its notes route, a
third-party MCP server with its own authorization server behind the same gateway: the first
call answers -32042 with a link, the link connects the user (signed in at both providers), and
the call then reaches the notes server with that user's own token there (both flavours)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from mcp import MCPError

from connect_flow import drive_connect
from demo_support import (
    RunningDemo,
    call_tool,
    elicited_url,
    grants,
    running_demo,
    signed_in,
    start_demo,
    stop,
)
from support import PEERS


def py_client(url: str, user: str, password: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(PEERS / "py_client.py"), url, user, password],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.fixture
def demo(tmp_path) -> Iterator[RunningDemo]:
    with running_demo(tmp_path / "demo") as running:
        yield running


def children_alive(directory: Path) -> list[str]:
    out = subprocess.run(["ps", "-eo", "args"], capture_output=True, text=True).stdout
    return [line for line in out.splitlines() if str(directory) in line]


def test_demo_signs_in_and_stops_cleanly(demo):
    text = "".join(demo.lines)
    assert "[authentik 6/7] users: added 'alice'" in text
    assert "For development only" in text
    report = py_client(demo.url, "alice", demo.password)
    assert report["ok"], report
    assert "countdown" in report["tools"]
    outsider = py_client(demo.url, "bob", demo.password)
    assert not outsider["ok"]
    assert stop(demo) == 0
    assert "[demo] stopped" in "".join(demo.lines)
    assert children_alive(demo.directory) == []
    # A second run reuses the state: provisioning changes nothing and sign-in still works.
    again = start_demo(demo.directory, ports=demo.ports)
    try:
        assert "exists (pk 1); unchanged" in "".join(again.lines)
        assert py_client(again.url, "alice", again.password)["ok"]
    finally:
        assert stop(again) == 0


@pytest.mark.parametrize("flavour", ["authentik", "keycloak"])
async def test_the_notes_server_asks_once_then_gets_the_users_own_token(tmp_path, flavour):
    with running_demo(tmp_path / "demo", flavour) as demo:
        assert demo.notes_url == demo.url.removesuffix("/mcp") + "/notes/mcp"
        assert "open it, sign in" in "".join(demo.lines)
        assert (demo.directory / "user-token.key").stat().st_mode & 0o777 == 0o600
        token = await signed_in(demo.notes_url, "alice", demo.password)
        with pytest.raises(MCPError) as asked:
            await call_tool(demo.notes_url, token, "whoami", {})
        link = elicited_url(asked.value)
        assert link.startswith(f"{demo.notes_url}/connect?id=")
        assert grants(demo) == []

        page = drive_connect(link, *demo.logins("alice"))
        assert "Demo Notes is connected" in page

        me = await call_tool(demo.notes_url, token, "whoami", {})
        # The notes server's own view: its own authorization server's alice, through the
        # gateway's client there; it accepts no other token.
        assert me["user"] == "alice", me
        assert me["issuer"] == f"{demo.notes_idp}/realms/master", me
        assert me["client"] == "mcp-oauth-gateway", me
        assert await call_tool(demo.notes_url, token, "add_note", {"text": "milk"}) is not None
        assert await call_tool(demo.notes_url, token, "list_notes", {}) == {"result": ["milk"]}
        (grant,) = grants(demo)
        assert grant["backend"].startswith("default/notes-authn|"), grant
