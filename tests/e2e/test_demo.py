"""`mcp-oauth-gateway demo`: one command brings up everything; a strict client signs in; a user
outside the group gets 403; Ctrl-C stops every process; a second run works."""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from demo_support import RunningDemo, running_demo, start_demo, stop
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
