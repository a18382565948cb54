"""Real MCP clients of both SDKs and both wires in front of a `userOAuth` gateway
(`user_oauth_gateway_support`), for the end-to-end tests of what each wire carries when a
caller has no upstream grant yet: the Python `mcp` 1.x client as a process of .venv-mcp1, the
TypeScript clients (tests/node/ts_user_oauth_client.mjs) driven one command at a time, what
the upstream FastMCP server received, the gateway's audit trail, the operator's CLI."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx

from support import NODE_DIR, PEERS, ROOT, free_port, node
from user_oauth_gateway_support import (
    UserOAuthGateway,
    callback_url,
    route_idp,
    user_oauth_gateway,
)

MCP1_PYTHON = ROOT / ".venv-mcp1" / "bin" / "python"
# How long one step of a driven client may take (a connect flow through three sites included).
STEP = 60.0

Line = dict[str, Any]


@contextmanager
def fastmcp_gateway(
    logs: Path, directory: Path, idp_key: Any, upstreams: Callable[..., Any]
) -> Iterator[UserOAuthGateway]:
    """The gateway (with its route IdP) in front of the FastMCP server that trusts only its
    own oidc-provider (`upstreams`, the conftest factory)."""
    port = free_port()
    upstream = upstreams(server="fastmcp", auth="oidc-provider", redirect_uris=[callback_url(port)])
    with (
        route_idp(logs, idp_key[1], port) as idp,
        user_oauth_gateway(logs, directory, idp_key, upstream, port, idp=idp) as running,
    ):
        yield running


class DrivenClient:
    """A client process that takes one JSON command a line on stdin and prints one JSON line
    per outcome or event; its stderr goes to `log`."""

    def __init__(self, command: list[str], log: Path, cwd: Path):
        self._log = log.open("wb")
        self.popen = subprocess.Popen(
            command,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self._log,
            cwd=cwd,
            text=True,
        )
        self._lines: queue.Queue[Line | None] = queue.Queue()
        self._kept: list[Line] = []
        self.log_path = log
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        assert self.popen.stdout is not None
        for line in self.popen.stdout:
            if line.strip():
                self._lines.put(json.loads(line))
        self._lines.put(None)

    def send(self, **command: object) -> None:
        """One command."""
        assert self.popen.stdin is not None
        self.popen.stdin.write(json.dumps(command) + "\n")
        self.popen.stdin.flush()

    def wait_for(self, wanted: Callable[[Line], bool], what: str, bound: float = STEP) -> Line:
        """The first line (kept from before, or coming within `bound` s) that is `wanted`."""
        for line in self._kept:
            if wanted(line):
                self._kept.remove(line)
                return line
        deadline = time.monotonic() + bound
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self._lines.get(timeout=left)
            except queue.Empty:
                break
            if line is None:
                raise AssertionError(f"the client ended before {what}:\n{self.stderr()}")
            if wanted(line):
                return line
            self._kept.append(line)
        raise AssertionError(f"no {what} within {bound}s; lines: {self._kept}\n{self.stderr()}")

    def run(self, op: str, **fields: object) -> Line:
        """A command and its outcome."""
        self.send(op=op, **fields)
        return self.wait_for(lambda line: line.get("op") == op, f"outcome of {op}")

    def event(self, name: str) -> Line:
        """The next event called `name`."""
        return self.wait_for(lambda line: line.get("event") == name, f"event {name}")

    def events(self, name: str) -> list[Line]:
        """The events called `name` received so far and not yet waited for."""
        return [line for line in self._kept if line.get("event") == name]

    def stderr(self) -> str:
        self._log.flush()
        return self.log_path.read_text(errors="replace")[-3000:]

    def stop(self) -> None:
        """Ask it to close; kill it when it does not end."""
        if self.popen.poll() is None:
            try:
                self.send(op="close")
                self.popen.wait(10)
            except (BrokenPipeError, subprocess.TimeoutExpired):
                self.popen.kill()
                self.popen.wait(5)
        self._log.close()


@contextmanager
def ts_client(logs: Path, url: str, token: str, sdk: str, name: str) -> Iterator[DrivenClient]:
    """tests/node/ts_user_oauth_client.mjs (`sdk`: v1 or v2) with `token`, stopped on exit."""
    command = [node(), str(NODE_DIR / "ts_user_oauth_client.mjs"), url, token, sdk]
    client = DrivenClient(command, logs / f"{name}.log", NODE_DIR)
    try:
        yield client
    finally:
        client.stop()


def mcp1_call(url: str, token: str, tool: str) -> Line:
    """tests/peers/py_mcp1_bearer_client.py under mcp 1.x: initialize and call `tool`."""
    assert MCP1_PYTHON.exists(), f"{MCP1_PYTHON} is missing: `make test` creates .venv-mcp1"
    done = subprocess.run(
        [str(MCP1_PYTHON), str(PEERS / "py_mcp1_bearer_client.py"), url, token, tool],
        capture_output=True,
        text=True,
        timeout=120,
    )
    lines = done.stdout.strip().splitlines()
    assert done.returncode == 0, done.stderr[-3000:]
    assert lines, done.stderr[-3000:]
    found: Line = json.loads(lines[-1])
    return found


def upstream_messages(setup: UserOAuthGateway) -> list[Any]:
    """The JSON-RPC messages the upstream FastMCP server was POSTed, oldest first."""
    found: list[Any] = httpx.get(
        f"{setup.upstream.server.origin}/debug/requests", timeout=10
    ).json()
    return found


def audit_records(setup: UserOAuthGateway) -> list[Line]:
    """The gateway's audit trail so far."""
    path = setup.config.parent / "audit.jsonl"
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def remove_grants(setup: UserOAuthGateway, subject: str) -> str:
    """The operator removes every grant of the route's `subject` (`grants remove`): its output."""
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "mcp_oauth_gateway",
            "grants",
            "remove",
            "--user-token-store",
            setup.store,
            "--user-token-key",
            str(setup.key_file),
            "--issuer",
            setup.issuer,
            "--subject",
            subject,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


# The 2026-07-28 wire, raw: what no SDK shows.

MODERN = "2026-07-28"


def modern_request(
    url: str, token: str, method: str, params: dict[str, Any], message_id: int = 1
) -> httpx.Response:
    """One stateless 2026-07-28 request, with the headers and `_meta` that wire asks for."""
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": MODERN,
        "Mcp-Method": method,
    }
    if isinstance(params.get("name"), str):
        headers["Mcp-Name"] = params["name"]
    meta = {
        "io.modelcontextprotocol/protocolVersion": MODERN,
        "io.modelcontextprotocol/clientCapabilities": {"elicitation": {"url": {}}},
        "io.modelcontextprotocol/clientInfo": {"name": "raw-e2e", "version": "1"},
    }
    body = {
        "jsonrpc": "2.0",
        "id": message_id,
        "method": method,
        "params": {**params, "_meta": meta},
    }
    return httpx.post(url, headers=headers, json=body, timeout=30)


def rpc_answer(response: httpx.Response) -> Line:
    """The JSON-RPC response in an answer, JSON or the last message of an SSE stream."""
    if not response.headers.get("content-type", "").startswith("text/event-stream"):
        found: Line = response.json()
        return found
    messages = [
        json.loads(line.removeprefix("data:").strip())
        for line in response.text.splitlines()
        if line.startswith("data:")
    ]
    responses = [m for m in messages if "id" in m and ("result" in m or "error" in m)]
    assert responses, response.text
    return responses[-1]


class EventStream:
    """An SSE GET stream read on a thread of its own: its status, the JSON messages it carried,
    and whether it ended."""

    def __init__(self, url: str, headers: dict[str, str]):
        self.status: int | None = None
        self.messages: list[Line] = []
        self.failure: BaseException | None = None
        self.ended = threading.Event()
        threading.Thread(target=self._read, args=(url, headers), daemon=True).start()

    def _read(self, url: str, headers: dict[str, str]) -> None:
        try:
            timeout = httpx.Timeout(10, read=STEP)
            with httpx.stream("GET", url, headers=headers, timeout=timeout) as response:
                self.status = response.status_code
                for line in response.iter_lines():
                    if line.startswith("data:"):
                        self.messages.append(json.loads(line.removeprefix("data:")))
        except BaseException as exc:  # reported to the test, whatever it is
            self.failure = exc
        finally:
            self.ended.set()
