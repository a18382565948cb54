"""Gateway replicas for drain and rolling-restart tests: real gateway processes on a plain route
(no policy, no federation) in front of a real MCP server that keeps its events
(peers/mcp_resumable.py), each with its admin and health listeners, for the loopback load
balancer (loadbalancer_support.py) to put in front of them."""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import httpx

from resource_yaml import route
from support import (
    INITIALIZE,
    PEERS,
    Process,
    free_port,
    gateway_cmd,
    mcp_headers,
    wait_for_port,
)


@dataclass
class Resumable:
    """peers/mcp_resumable.py, running; its control side (never through a gateway)."""

    port: int
    process: Process

    def _control(self, action: str, **query: str) -> dict:
        url = f"http://127.0.0.1:{self.port}/control/{action}"
        method = "GET" if action == "state" else "POST"
        response = httpx.request(method, url, params=query, timeout=10)
        response.raise_for_status()
        return response.json()

    def state(self) -> dict:
        """`held`: the `hold` calls running; `gets`: each GET stream's Last-Event-ID (or None)."""
        return self._control("state")

    def release(self, name: str) -> None:
        """The `hold` call `name` returns."""
        self._control("release", name=name)

    def notify(self, text: str) -> None:
        """A log message `text` to every session the server knows, outside any call."""
        self._control("notify", text=text)

    def gate(self, closed: bool) -> None:
        """Hold GET streams resumed with Last-Event-ID (closed) or let them through."""
        self._control("gate", closed="1" if closed else "0")


def resumable_server(logs: Path) -> Resumable:
    """A running peers/mcp_resumable.py."""
    port = free_port()
    process = Process(
        f"mcp-resumable-{port}", [sys.executable, str(PEERS / "mcp_resumable.py"), str(port)], logs
    )
    wait_for_port(port, process)
    return Resumable(port, process)


@dataclass
class Replica:
    """One gateway process: its listener, admin and health ports (and how it was started, to
    start it again on the same ports after it stopped, as a rolled pod comes back)."""

    port: int
    admin: int
    health: int
    process: Process
    command: list[str]
    logs: Path

    def start_again(self) -> None:
        """Start the same gateway on the same ports (the previous process has exited)."""
        assert self.process.popen.poll() is not None, "the replica still runs"
        self.process.stop()
        name = f"{self.process.name}-again"
        self.process = Process(name, self.command, self.logs)
        wait_for_port(self.port, self.process)

    def ready(self) -> bool:
        """Whether `/readyz` says ready."""
        return self.readiness().status_code == 200

    def url(self, path: str = "/mcp") -> str:
        """This replica's address, not the load balancer's."""
        return f"http://127.0.0.1:{self.port}{path}"

    def terminate(self) -> None:
        """SIGTERM, as Kubernetes sends when a pod is deleted."""
        self.process.popen.send_signal(signal.SIGTERM)

    def readiness(self, listener: str = "admin") -> httpx.Response:
        """`/readyz` of the admin (or health) listener."""
        port = self.admin if listener == "admin" else self.health
        return httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=5)

    def draining(self) -> bool:
        """Whether the admin listener's `/readyz` says the replica drains."""
        return "draining" in self.readiness().json().get("waitingFor", [])

    def refuses(self) -> bool:
        """Whether a new connection to the Gateway listener is refused."""
        try:
            with socket.create_connection(("127.0.0.1", self.port), timeout=2):
                return False
        except ConnectionRefusedError:
            return True

    def exit_code(self, within: float) -> int:
        """The process's exit code, once it exited (failing after `within` seconds)."""
        return self.process.popen.wait(within)


def replica_resources(port: int, backend_port: int) -> str:
    """A Gateway listening on `port` and a plain `/mcp` route to the backend, as YAML."""
    gateway = f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec: {{listeners: [{{name: http, port: {port}}}]}}
"""
    return gateway + route("mcp", "/mcp", f"127.0.0.1:{backend_port}")


def start_replica(
    directory: Path, logs: Path, backend_port: int, grace: float = 30, *args: str
) -> Replica:
    """A gateway replica on fresh ports in front of `backend_port`, serving once it accepts
    (`args` added to its command line)."""
    port, admin, health = free_port(), free_port(), free_port()
    config = directory / f"replica-{port}.yaml"
    config.write_text(replica_resources(port, backend_port))
    command = [
        *gateway_cmd(config),
        "--admin-port",
        str(admin),
        "--health-port",
        str(health),
        "--grace-period",
        str(grace),
        *args,
    ]
    process = Process(f"gateway-replica-{port}", command, logs)
    replica = Replica(port, admin, health, process, command, logs)
    wait_for_port(port, process)
    return replica


def open_session(url: str) -> dict[str, str]:
    """A raw client session at `url` (initialize, initialized): the headers to send with it."""
    headers = mcp_headers()
    response = httpx.post(url, headers=headers, json=INITIALIZE, timeout=30)
    assert response.status_code == 200, response.text
    headers["Mcp-Session-Id"] = response.headers["mcp-session-id"]
    headers["MCP-Protocol-Version"] = INITIALIZE["params"]["protocolVersion"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert httpx.post(url, headers=headers, json=initialized, timeout=30).status_code == 202
    return headers


def call_tool(
    url: str, headers: dict[str, str], tool: str, /, **arguments: object
) -> httpx.Response:
    """A raw tools/call (its answer read whole, event stream or JSON)."""
    body = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    return httpx.post(url, headers=headers, json=body, timeout=60)


async def eventually(predicate: Callable[[], bool], bound: float = 30, what: str = "it") -> None:
    """Until `predicate` (which may block: it runs in a thread) holds; fails after `bound` s.
    For asyncio tests whose clients must keep running meanwhile."""
    try:
        async with asyncio.timeout(bound):
            while not await asyncio.to_thread(predicate):
                await asyncio.sleep(0.05)
    except TimeoutError:
        raise AssertionError(f"timed out after {bound}s waiting for {what}") from None
