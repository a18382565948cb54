"""The CLI contract: `serve` refuses invalid resources with exit 2 and a message naming file,
resource and field; `check` prints each policy's conditions; SIGTERM drains and exits 0."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path

import httpx
import pytest

from conftest import write_example
from support import (
    EXAMPLES,
    Process,
    free_port,
    gateway_cmd,
    wait_for_keyset,
    wait_for_port,
    wait_until,
)


def run_cli(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "mcp_oauth_gateway", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def example_with(tmp_path: Path, edit: tuple[str, str] | None = None) -> Path:
    """examples/provider-b with one text replacement in its policy file."""
    target = write_example("provider-b", tmp_path / "cfg", {})
    if edit:
        policy = target / "policy.yaml"
        text = policy.read_text()
        assert edit[0] in text, f"{edit[0]!r} not in the example policy"
        policy.write_text(text.replace(edit[0], edit[1]))
    return target


def test_invalid_yaml_names_file_and_line(tmp_path):
    bad = tmp_path / "broken.yaml"
    bad.write_text("apiVersion: v1\nkind: Service\nmetadata:\n  name: [unclosed\n")
    done = run_cli("serve", "-f", str(bad))
    assert done.returncode == 2
    assert re.search(rf"{re.escape(str(bad))}:\d+:\d+: invalid YAML: ", done.stderr), done.stderr


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (
            ("              jwksPath: /application/o/mcp/jwks/\n", ""),
            "spec.traffic.jwtAuthentication.providers[0].jwks.remote: jwksPath is required with "
            "backendRef",
        ),
        (
            (
                "        clientId: mcp-public          # the pre-registered public client "
                "(PKCE, no secret)\n",
                "",
            ),
            "spec.traffic.jwtAuthentication.mcp.clientId is required when provider is ProviderB",
        ),
        (
            ("'\"mcp-agent\" in jwt.groups'", "'\"mcp-agent\" in jwt.groups.contanis(1)'"),
            "spec.traffic.authorization.policy.matchExpressions[0]: invalid CEL",
        ),
        (
            ("mode: Strict", "mode: Strict\n      modee: Strict"),
            "spec.traffic.jwtAuthentication.modee: unknown field",
        ),
        (
            ("provider: ProviderB", "provider: Okta"),
            "unknown provider 'Okta'; allowed values: ProviderB, Authentik, Keycloak",
        ),
        (
            ("port: 9000\n  ", "port: nine\n  "),
            "spec.traffic.jwtAuthentication.providers[0].jwks.remote.backendRef.port: Input "
            "should be a valid integer",
        ),
        (
            ("name: mcp\n  traffic", "name: missing-route\n  traffic"),
            "HTTPRoute default/missing-route not found",
        ),
    ],
)
def test_invalid_resources_do_not_start(tmp_path, edit, expected):
    config = example_with(tmp_path, edit)
    done = run_cli("serve", "-f", str(config))
    assert done.returncode == 2, done.stderr
    assert expected in done.stderr, done.stderr
    assert str(config / "policy.yaml") in done.stderr
    assert "listening" not in done.stderr


def test_broker_with_several_workers_needs_shared_state(tmp_path):
    config = example_with(
        tmp_path,
        ("        provider: ", "        authorizationServerMode: Broker\n        provider: "),
    )
    done = run_cli("serve", "-f", str(config), "--workers", "2")
    assert done.returncode == 2, done.stderr
    assert (
        "spec.traffic.jwtAuthentication.mcp.broker.redisUrl is required when Broker mode "
        "is served by 2 processes"
    ) in done.stderr
    assert "set MCP_OAUTH_GATEWAY_REDIS_URL" in done.stderr
    assert "listening" not in done.stderr


def test_check_prints_all_conditions_true_for_example_b(stack_b):
    done = run_cli("check", "-f", str(stack_b.config_dir))
    assert done.returncode == 0, done.stdout + done.stderr
    for line in (
        "Accepted      True   Valid",
        "Attached      True   Attached",
        "ResolvedRefs  True",
    ):
        assert line in done.stdout, done.stdout


def test_check_prints_all_conditions_true_for_example_a(stack_a):
    done = run_cli("check", "-f", str(stack_a.config_dir), "--output", "json")
    assert done.returncode == 0, done.stdout + done.stderr
    report = json.loads(done.stdout)
    conditions = {c["type"]: c["status"] for c in report["policies"][0]["conditions"]}
    assert conditions == {"Accepted": "True", "Attached": "True", "ResolvedRefs": "True"}
    assert report["policies"][0]["discovery"][0]["error"] is None


def test_check_reports_unreachable_keyset(tmp_path):
    # the example as shipped points at 127.0.0.1:9000, where nothing runs during this test
    dead = free_port()
    config = write_example("provider-b", tmp_path / "cfg", {"9000": str(dead)})
    done = run_cli("check", "-f", str(config), "--timeout", "2")
    assert done.returncode == 1
    assert "ResolvedRefs  False  KeysetUnavailable" in done.stdout
    assert f"127.0.0.1:{dead}" in done.stdout


def test_examples_load_cleanly():
    for name in ("provider-a", "provider-b"):
        done = run_cli("check", "-f", str(EXAMPLES / name), "--timeout", "0.5")
        assert "Accepted      True" in done.stdout, done.stdout + done.stderr
        assert "Attached      True" in done.stdout


def count_to_20(token: str, probe: str) -> tuple[dict[str, str], dict[str, object]]:
    """Headers and body of a stateless (2026-07-28) call of the backend's `count` tool, which
    runs about a second; `probe` marks it in the backend's record of requests."""
    headers = {
        "Authorization": f"Bearer {token}",
        "Accept": "application/json, text/event-stream",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": "count",
        "Mcp-Param-Probe": probe,
    }
    meta = {
        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
        "io.modelcontextprotocol/clientCapabilities": {},
        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
    }
    params = {"name": "count", "arguments": {"n": 20}, "_meta": meta}
    return headers, {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params}


def test_sigterm_drains_in_flight_requests_and_exits_zero(stack_b, tmp_path, logs):
    port = free_port()
    ports = {
        "8080": str(port),
        "9000": stack_b.idp.rsplit(":", 1)[1],
        "8000": stack_b.backend.rsplit(":", 1)[1],
    }
    config = write_example("provider-b", tmp_path / "cfg", ports)
    gateway = Process("gateway-sigterm", gateway_cmd(config), logs)
    wait_for_port(port, gateway)
    base = f"http://127.0.0.1:{port}"
    token = stack_b.token()
    wait_for_keyset(base, token)
    headers, body = count_to_20(token, probe=uuid.uuid4().hex)
    result: dict[str, object] = {}

    def long_call() -> None:
        response = httpx.post(f"{base}/mcp", headers=headers, json=body, timeout=30)
        result["status"], result["text"] = response.status_code, response.text

    caller = threading.Thread(target=long_call)
    caller.start()
    # signal once the backend is working on the call (the tool runs about a second)
    wait_until(
        lambda: any(
            dict(r["headers"]).get("mcp-param-probe") == headers["Mcp-Param-Probe"]
            for r in httpx.get(f"http://{stack_b.backend}/debug/requests").json()
        ),
        30,
        "the call to reach the backend",
    )
    gateway.popen.send_signal(signal.SIGTERM)
    caller.join(30)
    code = gateway.popen.wait(30)
    gateway.stop()
    assert code == 0, gateway.log()
    assert result.get("status") == 200, result
    assert "counted to 20" in str(result["text"])
    with pytest.raises(httpx.ConnectError):
        httpx.post(f"{base}/mcp", json={}, timeout=2)


def test_workers_share_the_listener_and_stop_together(stack_b, tmp_path, logs):
    port = free_port()
    ports = {
        "8080": str(port),
        "9000": stack_b.idp.rsplit(":", 1)[1],
        "8000": stack_b.backend.rsplit(":", 1)[1],
    }
    config = write_example("provider-b", tmp_path / "cfg", ports)
    gateway = Process("gateway-workers", [*gateway_cmd(config), "--workers", "2"], logs)
    wait_for_port(port, gateway)
    base = f"http://127.0.0.1:{port}"
    wait_for_keyset(base, stack_b.token())
    # Each worker fetches the keyset for itself: the one that answered above may be ready
    # while the other is not, and answers 503 to the requests it accepts until it is.
    wait_until(
        lambda: gateway.log().count("/application/o/mcp/jwks/ fetched: ") >= 2,
        30,
        "both workers to fetch the keyset",
    )
    headers = {
        "Authorization": f"Bearer {stack_b.token()}",
        "Accept": "application/json, text/event-stream",
    }
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "t", "version": "1"},
        },
    }
    statuses = {
        httpx.post(f"{base}/mcp", headers=headers, json=body, timeout=10).status_code
        for _ in range(20)
    }
    assert statuses == {200}
    # The parent logs this after forking, from its logging thread: the workers may serve first.
    wait_until(
        lambda: "started 2 worker processes" in gateway.log(), 30, "the parent to log its workers"
    )
    gateway.popen.send_signal(signal.SIGTERM)
    assert gateway.popen.wait(30) == 0, gateway.log()
    gateway.stop()
