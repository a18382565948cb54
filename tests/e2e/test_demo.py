"""`mcp-oauth-gateway demo`: one command brings up everything; a strict client signs in; a user
outside the group gets 403; Ctrl-C stops every process; a second run works."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from support import PEERS, free_port, read_until


@dataclass
class RunningDemo:
    process: subprocess.Popen[str]
    url: str
    password: str
    directory: Path
    lines: list[str]
    ports: list[str]


def start_demo(
    directory: Path, flavour: str = "authentik", ports: list[str] | None = None
) -> RunningDemo:
    ports = ports or [str(free_port()) for _ in range(3)]
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "mcp_oauth_gateway",
            "demo",
            "--flavor",
            flavour,
            "--dir",
            str(directory),
            "--port",
            ports[0],
            "--idp-port",
            ports[1],
            "--backend-port",
            ports[2],
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines, _ = read_until(process.stdout, lambda line: "Ctrl-C stops everything" in line)
    text = "".join(lines)
    url = re.search(r"MCP server URL:\s+(\S+)", text)
    password = re.search(r"alice / (\S+)", text)
    assert url, text
    assert password, text
    return RunningDemo(process, url.group(1), password.group(1), directory, lines, ports)


@contextmanager
def running_demo(directory: Path) -> Iterator[RunningDemo]:
    """A demo for the duration of the block, stopped afterwards if still running."""
    running = start_demo(directory)
    try:
        yield running
    finally:
        if running.process.poll() is None:
            stop(running)


def stop(demo: RunningDemo) -> int:
    demo.process.send_signal(signal.SIGINT)
    code = demo.process.wait(30)
    assert demo.process.stdout is not None
    demo.lines.extend(demo.process.stdout.readlines())
    return code


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
