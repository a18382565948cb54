"""The TypeScript MCP client (tests/node/ts_client.mjs) run as a process, with its report."""

from __future__ import annotations

import json
import subprocess

from support import NODE_DIR, node


def run_ts_client(
    mcp_url: str, user: str, password: str = "x", sdk: str = "sdk1", *extra: str
) -> dict:
    """Run tests/node/ts_client.mjs and return its JSON report."""
    done = subprocess.run(
        [node(), str(NODE_DIR / "ts_client.mjs"), mcp_url, user, password, sdk, *extra],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=NODE_DIR,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def run_ts_bearer_client(mcp_url: str, token: str, tool: str) -> dict:
    """Run tests/node/ts_bearer_client.mjs (a token already in hand) and return its report."""
    done = subprocess.run(
        [node(), str(NODE_DIR / "ts_bearer_client.mjs"), mcp_url, token, tool],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=NODE_DIR,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])
