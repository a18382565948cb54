"""A federated route in Broker mode for MCP Inspector: examples/provider-b (Broker mode, the root
well-known forms and any CORS header allowed, as the `inspector_broker` stack serves it) with
its GatewayBackend's single target replaced by named `mcp` SDK servers, the npm
`oidc-provider` (tests/node/idp.mjs) standing in for authentik; and the Inspector's sign-in
through it (the gateway's consent page, then the provider's login and consent)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from joserfc.jwk import RSAKey
from playwright.async_api import Page

from inspector_support import Inspector, expect_connected
from support import (
    EXAMPLES,
    NODE_DIR,
    Process,
    claims_for,
    free_port,
    gateway_cmd,
    mint,
    node,
    wait_for_keyset,
    wait_for_port,
    with_ports,
)

CLIENT_ID = "mcp-public"
TARGETS = """\
    targets:
      - name: mcp-server
        static:
          host: 127.0.0.1
          port: 8000
          path: /mcp
          protocol: StreamableHTTP
"""
EDITS = {
    "gateway.yaml": [
        (
            "        - path: {type: PathPrefix, value: /mcp}\n",
            "        - path: {type: PathPrefix, value: /mcp}\n"
            "        - path: {type: Exact, value: /.well-known/oauth-protected-resource}\n"
            "        - path: {type: Exact, value: /.well-known/oauth-authorization-server}\n",
        ),
        ("allowHeaders: [Origin, Authorization, Content-Type]", 'allowHeaders: ["*"]'),
    ],
    "policy.yaml": [
        ("        provider: ", "        authorizationServerMode: Broker\n        provider: ")
    ],
}


@dataclass
class BrokerRoute:
    """The gateway's base URL and its federated MCP URL, and its process (its access log)."""

    gateway: str
    mcp: str
    process: Process


def write_config(directory: Path, ports: dict[str, int], targets: dict[str, int]) -> Path:
    """examples/provider-b with the test's ports, Broker mode and the federated targets."""
    listed = "".join(
        f"      - {{name: {name}, static: {{host: 127.0.0.1, port: {port}}}}}\n"
        for name, port in targets.items()
    )
    edits = {
        **EDITS,
        "gateway.yaml": [*EDITS["gateway.yaml"], (TARGETS, "    targets:\n" + listed)],
    }
    directory.mkdir(parents=True, exist_ok=True)
    for source in sorted((EXAMPLES / "provider-b").glob("*.yaml")):
        text = with_ports(source.read_text(), {"8080": ports["gateway"], "9000": ports["idp"]})
        for before, after in edits.get(source.name, []):
            assert before in text, (source.name, before)
            text = text.replace(before, after)
        (directory / source.name).write_text(text)
    return directory


@contextmanager
def broker_route(
    directory: Path, logs: Path, key: tuple[RSAKey, Path], targets: dict[str, int]
) -> Iterator[BrokerRoute]:
    """The identity provider and the gateway, running; always stopped."""
    ports = {"gateway": free_port(), "idp": free_port()}
    gateway = f"http://127.0.0.1:{ports['gateway']}"
    env = {
        "IDP_PORT": str(ports["idp"]),
        "FLAVOUR": "authentik",
        "KEY_FILE": str(key[1]),
        "CLIENT_ID": CLIENT_ID,
        "RESOURCE": f"{gateway}/mcp",
        "SLUG": "mcp",
    }
    config = write_config(directory, ports, targets)
    started = [
        Process("idp-authentik-federation", [node(), str(NODE_DIR / "idp.mjs")], logs, env=env)
    ]
    try:
        wait_for_port(ports["idp"], started[0])
        started.append(Process("gateway-inspector-federation", gateway_cmd(config), logs))
        wait_for_port(ports["gateway"], started[1])
        issuer = f"http://127.0.0.1:{ports['idp']}/application/o/mcp/"
        wait_for_keyset(gateway, mint(key[0], claims_for(issuer, CLIENT_ID)))
        yield BrokerRoute(gateway, f"{gateway}/mcp", started[1])
    finally:
        for process in reversed(started):
            process.stop()


async def sign_in(page: Page, inspector: Inspector, gateway: str) -> None:
    """Connect, then pass the gateway's consent page and the identity provider's forms."""
    await page.get_by_role("button", name="Connect", exact=True).click()
    await page.wait_for_url(f"{gateway}/mcp/oauth/authorize?*")
    consent = await page.inner_text("body")
    assert "MCP Inspector" in consent, consent  # the name the Inspector registered
    await page.click("button[name=decision][value=allow]")
    await page.fill("input[name=login]", "alice")
    await page.fill("input[name=password]", "any password")
    await page.click("button[type=submit]")
    await page.wait_for_selector("input[name=prompt][value=consent]", state="attached")
    await page.click("button[type=submit]")
    await expect_connected(page)
    assert page.url.startswith(inspector.ui), page.url
