"""`mcp-oauth-gateway demo` as a process: started, read for its URLs and password, stopped; and
what a user does with its notes route: sign in at the gateway (Broker), call a tool of the
third-party notes server, follow the link the gateway answers with."""

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
from typing import Any

import httpx2
from mcp import MCPError
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from broker_flow import BrokerClient
from connect_flow import Login
from support import free_port, read_until

# --port, --idp-port, --backend-port, --notes-port, --notes-idp-port
PORT_FLAGS = ("--port", "--idp-port", "--backend-port", "--notes-port", "--notes-idp-port")


@dataclass
class RunningDemo:
    process: subprocess.Popen[str]
    url: str
    notes_url: str
    password: str
    directory: Path
    lines: list[str]
    ports: list[str]

    @property
    def idp(self) -> str:
        """The route's identity provider (the dev IdP of the demo's flavour)."""
        return f"http://127.0.0.1:{self.ports[1]}"

    @property
    def notes_idp(self) -> str:
        """The notes server's own authorization server."""
        return f"http://127.0.0.1:{self.ports[4]}"

    def logins(self, user: str) -> tuple[Login, Login]:
        """What `user` types at the route's provider and at the notes server's."""
        return Login(user, self.password, self.idp), Login(user, self.password, self.notes_idp)


def start_demo(
    directory: Path, flavour: str = "authentik", ports: list[str] | None = None
) -> RunningDemo:
    ports = ports or [str(free_port()) for _ in PORT_FLAGS]
    flags = [item for pair in zip(PORT_FLAGS, ports, strict=True) for item in pair]
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
            *flags,
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    assert process.stdout is not None
    lines, _ = read_until(process.stdout, lambda line: "Ctrl-C stops everything" in line)
    text = "".join(lines)
    url = re.search(r"MCP server URL:\s+(\S+)", text)
    notes = re.search(r"Notes server URL:\s+(\S+)", text)
    password = re.search(r"alice / (\S+)", text)
    assert url, text
    assert notes, text
    assert password, text
    return RunningDemo(
        process, url.group(1), notes.group(1), password.group(1), directory, lines, ports
    )


@contextmanager
def running_demo(directory: Path, flavour: str = "authentik") -> Iterator[RunningDemo]:
    """A demo for the duration of the block, stopped afterwards if still running."""
    running = start_demo(directory, flavour)
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


async def signed_in(mcp: str, user: str, password: str) -> str:
    """`user`'s access token at the gateway route `mcp`, through its Broker sign-in."""
    client = BrokerClient(mcp=mcp).register()
    tokens = await client.tokens(user, password)
    return tokens["access_token"]


async def call_tool(mcp: str, token: str, tool: str, arguments: dict[str, Any]) -> Any:
    """A tool's structured result, through a new session of the Python `mcp` client (2025-11-25
    wire); an MCP error (the gateway's -32042 among them) is raised as `MCPError`."""
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    try:
        async with (
            http,
            Client(streamable_http_client(mcp, http_client=http), mode="legacy") as client,
        ):
            result = await client.call_tool(tool, arguments)
    except BaseExceptionGroup as group:
        # The client raises from its task group: the MCP error is inside.
        error: BaseException = group
        while isinstance(error, BaseExceptionGroup):
            error = error.exceptions[0]
        if not isinstance(error, MCPError):
            raise
        raise error from None
    assert not result.is_error, result
    return result.structured_content


def elicited_url(error: MCPError) -> str:
    """The URL of the one URL-mode elicitation a -32042 error carries."""
    assert error.error.code == -32042, error
    data = error.error.data
    assert isinstance(data, dict), error
    (elicitation,) = data["elicitations"]
    assert elicitation["mode"] == "url", elicitation
    return str(elicitation["url"])


def grants_command(demo: RunningDemo, *args: str) -> subprocess.CompletedProcess[str]:
    """`mcp-oauth-gateway grants ARGS` on the demo's user-token store, as an operator runs it."""
    store = ["--user-token-store", f"sqlite://{demo.directory / 'user-tokens.db'}"]
    key = ["--user-token-key", str(demo.directory / "user-token.key")]
    command = [sys.executable, "-m", "mcp_oauth_gateway", "grants", *args, *store, *key]
    done = subprocess.run(command, capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    return done


def grants(demo: RunningDemo) -> list[dict[str, Any]]:
    """The grants the demo's gateway keeps, as `grants list` shows them (never a token)."""
    found: list[dict[str, Any]] = json.loads(
        grants_command(demo, "list", "--output", "json").stdout
    )
    return found


def remove_grants(demo: RunningDemo) -> None:
    """The operator removes every user's grants (each user connects again)."""
    for grant in grants(demo):
        grants_command(demo, "remove", "--issuer", grant["issuer"], "--subject", grant["subject"])
