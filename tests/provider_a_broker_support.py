"""The gateway in Broker mode in front of provider A (real Keycloak or the dev IdP), as
tests/e2e/test_provider_a_broker.py runs it, and what its tests read of it: the provider's
tokens, the Python SDK client's report, the audit trail."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from broker_flow import BrokerClient
from inspector_support import gateway_requests
from keycloak_support import USER_PASSWORD, Provider
from support import PEERS, Process, unverified_claims

GATEWAY_CLIENT = "mcp-gateway"  # what idp keycloak --mode Broker creates at the provider


@dataclass
class Broker:
    """The gateway in Broker mode in front of `provider`'s `realm`."""

    provider: Provider
    realm: str
    gateway: str
    process: Process
    redis_url: str
    # The gateway's audit trail (`serve --audit-log`).
    audit: Path

    @property
    def mcp(self) -> str:
        return f"{self.gateway}/mcp"

    @property
    def issuer(self) -> str:
        """The provider's issuer (the realm's)."""
        return self.provider.issuer(self.realm)

    def discovery(self) -> dict[str, object]:
        found: dict[str, object] = httpx.get(
            f"{self.issuer}/.well-known/openid-configuration"
        ).json()
        return found

    def client(self) -> BrokerClient:
        return BrokerClient(self.mcp).register()

    def callbacks(self) -> int:
        """How many times the provider sent a signed-in user back to the gateway so far."""
        answered = gateway_requests(self.process.log())
        return sum(line.startswith("GET /mcp/oauth/callback 302 ") for line in answered)


def audiences(claims: dict[str, object]) -> list[object]:
    aud = claims["aud"]
    return aud if isinstance(aud, list) else [aud]


def assert_providers_token(broker: Broker, token: str) -> None:
    """A token the provider issued to the gateway's client for alice, for this resource."""
    claims = unverified_claims(token)
    assert claims["iss"] == broker.issuer
    assert claims["azp"] == GATEWAY_CLIENT
    assert broker.mcp in audiences(claims)
    assert claims["groups"] == ["users"]
    assert claims["preferred_username"] == "alice"


def python_sdk_signs_in(broker: Broker) -> dict[str, Any]:
    """The report of the Python SDK 2.x client signing in as alice and calling a tool."""
    done = subprocess.run(
        [sys.executable, str(PEERS / "py_client.py"), broker.mcp, "alice", USER_PASSWORD],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def audit_lines(broker: Broker) -> list[dict[str, Any]]:
    """The whole lines of the audit trail written so far."""
    text = broker.audit.read_text() if broker.audit.exists() else ""
    return [json.loads(line) for line in text[: text.rfind("\n") + 1].splitlines()]
