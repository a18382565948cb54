"""`serve` watches its resource files: a valid change swaps the snapshot without failing requests
in flight; an invalid one keeps the running configuration and says why."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import httpx
import pytest

from conftest import write_example
from support import Process, free_port, gateway_cmd, wait_for_keyset, wait_for_port, wait_until

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


@pytest.fixture
def watched(stack_b, tmp_path, logs):
    port = free_port()
    ports = {
        "8080": str(port),
        "9000": stack_b.idp.rsplit(":", 1)[1],
        "8000": stack_b.backend.rsplit(":", 1)[1],
    }
    config = write_example("provider-b", tmp_path / "cfg", ports)
    status_port = free_port()
    gateway = Process(
        f"gateway-reload-{tmp_path.name}",
        [*gateway_cmd(config), "--watch-interval", "0.2", "--status-port", str(status_port)],
        logs,
    )
    wait_for_port(port, gateway)
    base = f"http://127.0.0.1:{port}"
    wait_for_keyset(base, stack_b.token())
    gateway.status_url = f"http://127.0.0.1:{status_port}/"
    try:
        yield base, config, gateway
    finally:
        gateway.stop()


def replace_file(path: Path, text: str) -> None:
    """Write `text` as `path`'s new content in one step, as an editor saving or a ConfigMap
    update does. `write_text` truncates first: a poll of the watcher (every 0.2 s) landing
    between the truncation and the write would load an empty policy.yaml, a route without
    a policy, and the test would see that snapshot instead of the one it wrote."""
    staged = path.with_name(f".{path.name}.new")
    staged.write_text(text)
    os.replace(staged, path)


def status(base: str, token: str) -> int:
    return httpx.post(
        f"{base}/mcp",
        json=INIT,
        timeout=10,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
        },
    ).status_code


def test_valid_change_applies_without_failing_requests_in_flight(watched, stack_b):
    base, config, gateway = watched
    token = stack_b.token()
    probe = uuid.uuid4().hex
    result: dict[str, object] = {}

    def long_call() -> None:
        response = httpx.post(
            f"{base}/mcp",
            timeout=30,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2026-07-28",
                "Mcp-Method": "tools/call",
                "Mcp-Name": "count",
                "Mcp-Param-Probe": probe,
            },
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {
                    "name": "count",
                    "arguments": {"n": 15},
                    "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {},
                        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                    },
                },
            },
        )
        result["status"], result["text"] = response.status_code, response.text

    caller = threading.Thread(target=long_call)
    caller.start()
    wait_until(
        lambda: any(
            dict(r["headers"]).get("mcp-param-probe") == probe
            for r in httpx.get(f"http://{stack_b.backend}/debug/requests").json()
        ),
        30,
        "the long call to reach the backend",
    )
    policy = config / "policy.yaml"
    replace_file(
        policy,
        policy.read_text().replace('"mcp-agent" in jwt.groups', '"operators" in jwt.groups'),
    )
    wait_until(lambda: status(base, token) == 403, 30, "the new rule to apply")
    caller.join(30)
    assert result["status"] == 200, result
    assert "counted to 15" in str(result["text"])
    # Logged (from the logging thread) after the new snapshot is installed, so possibly after
    # the 403 above was already served.
    wait_until(lambda: "configuration reloaded" in gateway.log(), 30, "the reload to be logged")


def test_invalid_change_keeps_the_running_configuration(watched, stack_b):
    base, config, gateway = watched
    token = stack_b.token()
    policy = config / "policy.yaml"
    original = policy.read_text()
    replace_file(policy, original.replace("jwksPath: /application/o/mcp/jwks/", "jwksPth: x"))
    wait_until(
        lambda: (
            "configuration change rejected" in gateway.log()
            and "jwksPth: unknown field" in gateway.log()
        ),
        30,
        "the rejection, naming the field",
    )
    assert status(base, token) == 200, "still serving the previous configuration"
    live = httpx.get(gateway.status_url).json()
    assert "jwksPth: unknown field" in live["lastReloadError"]
    conditions = {c["type"]: c["status"] for c in live["policies"][0]["conditions"]}
    assert conditions == {"Accepted": "True", "Attached": "True", "ResolvedRefs": "True"}
    gateway_yaml = config / "gateway.yaml"
    replace_file(policy, original)
    replace_file(
        gateway_yaml,
        gateway_yaml.read_text().replace(f"port: {base.rsplit(':', 1)[1]}", f"port: {free_port()}"),
    )
    wait_until(
        lambda: "restart the gateway to apply that" in gateway.log(),
        30,
        "the listener change to be refused",
    )
    assert status(base, token) == 200


def test_a_change_that_would_serve_a_protected_route_without_a_token_is_refused(watched, stack_b):
    base, config, gateway = watched
    policy = config / "policy.yaml"
    original = policy.read_text()
    # What the watcher could read between an editor's truncation and its write, or between
    # two saves of a change made in two steps: the route stays, its policy is gone.
    replace_file(policy, "")
    wait_until(
        lambda: "would be served without a token by HTTPRoute" in gateway.log(),
        30,
        "the change to be refused",
    )
    anonymous = httpx.post(f"{base}/mcp", json=INIT, timeout=10)
    assert anonymous.status_code == 401, anonymous.text
    assert "restart the gateway" in httpx.get(gateway.status_url).json()["lastReloadError"]
    replace_file(policy, original)
    wait_until(lambda: "configuration reloaded" in gateway.log(), 30, "the full files to load")
    assert status(base, stack_b.token()) == 200
