"""The TypeScript MCP clients (tests/node/*.mjs) run as processes: with their report, or kept
running and driven line by line."""

from __future__ import annotations

import json
import subprocess
import threading
from collections.abc import Callable
from pathlib import Path

from support import NODE_DIR, node, wait_until


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


class DrainClient:
    """tests/node/ts_drain_client.mjs running: a TypeScript client session (`sdk`: the SDK 1.x,
    `sdk1`, or the 2.x client, `client2`) kept open while a test works on the gateway behind it;
    commands in, one JSON object a line out."""

    def __init__(self, mcp_url: str, log: Path, sdk: str = "sdk1"):
        self._log = log.open("w")
        self.process = subprocess.Popen(
            [node(), str(NODE_DIR / "ts_drain_client.mjs"), mcp_url, sdk],
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            text=True,
            cwd=NODE_DIR,
        )
        self.lines: list[dict] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()
        self.wait_for(lambda line: line.get("ready"), "the client to connect")

    def _read(self) -> None:
        assert self.process.stdout is not None
        for text in self.process.stdout:
            self.lines.append(json.loads(text))

    def wait_for(self, found: Callable[[dict], object], what: str, bound: float = 30) -> dict:
        """The first line `found` accepts, once it came."""
        wait_until(lambda: any(found(line) for line in self.lines), bound, what)
        return next(line for line in self.lines if found(line))

    def call(self, call_id: str, tool: str, **arguments: object) -> None:
        """Start a tools/call (its answer: the line {"called": call_id, ...})."""
        self._command(f"call {call_id} {tool} {json.dumps(arguments)}")

    def answer(self, call_id: str) -> dict:
        """The answer to the call `call_id`, once it came."""
        return self.wait_for(lambda line: line.get("called") == call_id, f"call {call_id}")

    def heard(self) -> list[object]:
        """The log messages the server sent, in order."""
        return [line["heard"] for line in list(self.lines) if "heard" in line]

    def quit(self) -> None:
        """End the session (DELETE) and the process."""
        self._command("quit")
        self.wait_for(lambda line: line.get("done"), "the client to end its session")
        self.process.wait(30)

    def _command(self, line: str) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write(line + "\n")
        self.process.stdin.flush()

    def stop(self) -> None:
        """Kill the process if it still runs."""
        if self.process.poll() is None:
            self.process.kill()
            self.process.wait(10)
        self._log.close()
