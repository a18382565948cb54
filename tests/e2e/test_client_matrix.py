"""The real-client matrix: four MCP clients, in Facade and Broker modes, against the npm
oidc-provider and the dev IdP.

Every client signs in and calls a tool through Broker mode. In Facade mode (the spec's layout)
clients that check the authorization server metadata issuer (RFC 8414 §3.3) refuse it; those
cells are asserted to fail with that reason, as reference/mcp-clients-and-conformance.md §2.4
records. The table is written to test-artifacts/client-matrix.md.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from idp_support import BOOTSTRAP_TOKEN, USER_PASSWORD, cli, start_dev_idp
from node_clients import run_ts_client
from support import PEERS, ROOT, Process, free_port, gateway_cmd, wait_for_port

MCP1_PYTHON = ROOT / ".venv-mcp1" / "bin" / "python"
CLIENTS = ["python mcp 1.x", "python mcp 2.x", "ts sdk 1.x", "ts client 2.x"]
# Facade cells that cannot work, and the reason the client gives.
FACADE_REFUSALS = {
    "python mcp 1.x": "issuer mismatch",
    "python mcp 2.x": "issuer mismatch",
    "ts client 2.x": "IssuerMismatchError",
}
RESULTS: dict[tuple[str, str, str], str] = {}


@dataclass
class Target:
    mcp: str
    password: str


def run_client(client: str, target: Target) -> dict:
    if client.startswith("python"):
        python = str(MCP1_PYTHON) if "1.x" in client else sys.executable
        assert Path(python).exists(), f"{python} is missing: `make test` creates .venv-mcp1"
        done = subprocess.run(
            [python, str(PEERS / "py_client.py"), target.mcp, "alice", target.password],
            capture_output=True,
            text=True,
            timeout=120,
        )
        lines = done.stdout.strip().splitlines()
        assert lines, done.stderr[-2000:]
        return json.loads(lines[-1])
    flavour = "client2" if "2.x" in client else "sdk1"
    return run_ts_client(target.mcp, "alice", target.password, flavour)


@pytest.fixture(scope="module")
def dev_idp_targets(
    logs: Path, tmp_path_factory: pytest.TempPathFactory, backend: str
) -> Iterator[dict[str, Target]]:
    tmp = tmp_path_factory.mktemp("matrix-devidp")
    idp, url = start_dev_idp("authentik", logs, tmp / "state.json", "--user", "alice")
    gateways = []
    targets = {}
    try:
        for mode in ("Facade", "Broker"):
            port = free_port()
            out = tmp / mode
            done = cli(
                "idp",
                "authentik",
                "--url",
                url,
                "--user",
                "alice",
                "--mode",
                mode,
                "--redirect-uri",
                r"regex:http://127\.0\.0\.1:[0-9]+/.*",
                "--resource",
                f"http://127.0.0.1:{port}/mcp",
                "--backend",
                f"http://{backend}/mcp",
                "--output-dir",
                str(out),
                env={"AUTHENTIK_TOKEN": BOOTSTRAP_TOKEN},
            )
            assert done.returncode == 0, done.stderr
            gateway = Process(f"gateway-matrix-{mode.lower()}", gateway_cmd(out), logs)
            gateways.append(gateway)
            wait_for_port(port, gateway)
            targets[mode] = Target(f"http://127.0.0.1:{port}/mcp", USER_PASSWORD)
        yield targets
    finally:
        for gateway in gateways:
            gateway.stop()
        idp.stop()


@pytest.fixture(scope="module")
def matrix_report() -> Iterator[None]:
    yield
    rows = ["| client | IdP | Facade | Broker |", "|---|---|---|---|"]
    for idp in ("oidc-provider", "dev IdP"):
        for client in CLIENTS:
            cells = [RESULTS.get((client, mode, idp), "not run") for mode in ("Facade", "Broker")]
            rows.append(f"| {client} | {idp} | {cells[0]} | {cells[1]} |")
    target = ROOT / "test-artifacts" / "client-matrix.md"
    target.parent.mkdir(exist_ok=True)
    target.write_text("\n".join(rows) + "\n")


@pytest.mark.parametrize("mode", ["Facade", "Broker"])
@pytest.mark.parametrize("idp", ["oidc-provider", "dev IdP"])
@pytest.mark.parametrize("client", CLIENTS)
def test_client_signs_in(client, idp, mode, request, matrix_report):
    if idp == "oidc-provider":
        stack = request.getfixturevalue("broker_b" if mode == "Broker" else "stack_b")
        target = Target(stack.mcp, "x")
    else:
        target = request.getfixturevalue("dev_idp_targets")[mode]
    report = run_client(client, target)
    refusal = FACADE_REFUSALS.get(client) if mode == "Facade" else None
    if refusal is None:
        RESULTS[(client, mode, idp)] = "✓" if report["ok"] else f"✗ {report.get('error')}"
        assert report["ok"], report
    else:
        RESULTS[(client, mode, idp)] = f"✗ refuses the metadata issuer ({refusal})"
        assert not report["ok"], "expected the client to refuse the facade's issuer"
        assert refusal in report["error"], report["error"]


def test_matrix_has_no_missing_environment():
    assert os.access(MCP1_PYTHON, os.X_OK), "`make test` creates .venv-mcp1 with mcp 1.x"


async def test_broker_proxies_refresh_grants(dev_idp_targets):
    import httpx
    from headless_login import sign_in

    from broker_calls import CALLBACK, VERIFIER, authorize_url, register

    class Gateway:
        gateway = dev_idp_targets["Broker"].mcp.removesuffix("/mcp")

    client_id = register(Gateway)
    query = await sign_in(authorize_url(Gateway, client_id), "alice", USER_PASSWORD, CALLBACK)
    tokens = httpx.post(
        f"{Gateway.gateway}/mcp/oauth/token",
        data={
            "grant_type": "authorization_code",
            "code": query["code"],
            "client_id": client_id,
            "redirect_uri": CALLBACK,
            "code_verifier": VERIFIER,
        },
    ).json()
    assert tokens["refresh_token"]
    refreshed = httpx.post(
        f"{Gateway.gateway}/mcp/oauth/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            "client_id": client_id,
        },
    )
    assert refreshed.status_code == 200, refreshed.text
    assert refreshed.json()["access_token"] != tokens["access_token"]
    reused = httpx.post(
        f"{Gateway.gateway}/mcp/oauth/token",
        data={
            "grant_type": "refresh_token",
            "refresh_token": tokens["refresh_token"],
            "client_id": client_id,
        },
    )
    assert reused.status_code == 400  # the provider rotates refresh tokens
    assert reused.json()["error"] == "invalid_grant"
