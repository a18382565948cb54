"""The MCP Inspector web UI, for real, against the gateway in Broker mode: headless Chromium
(Debian's, driven by Playwright) opens the Inspector, connects to the gateway's MCP URL with the
Streamable HTTP transport, signs in through the Inspector's own OAuth flow (the gateway's
consent page, then the identity provider's login and consent, back to the Inspector's
`/oauth/callback`), lists the tools, calls `add` with a=2, b=3 and sees 5.

Two Inspector versions, installed by tests/inspector/package.json (npm aliases, exact versions):
0.15.0 on the system Node 20 (with the MCP SDK npm resolves for it today, as `npx` installs it)
and 1.0.3 on the Node 22 of tests/conformance. Each runs as the two processes its
launcher `client/bin/start.js` starts, the proxy (`server/build/index.js`) and the UI's static
server (`client/bin/client.js`), here started directly so that both listen on 127.0.0.1, open
no browser and use a proxy session token of the test's. The npm `oidc-provider`
(tests/node/idp.mjs) stands in for the identity provider and the MCP SDK server
(tests/peers/mcp_backend.py) for the MCP server, both behind the `inspector_broker` gateway.
"""

from __future__ import annotations

import pytest

from browser_support import ARTIFACTS
from inspector_support import (
    broker_sign_in,
    call_add,
    chromium_page,
    gateway_requests,
    running_inspector,
    watch_gateway,
)
from support import wait_until

# What the gateway must have answered, in this order, for a Broker-mode sign-in and tool call.
BROKER_FLOW = [
    "POST /.well-known/oauth-authorization-server/mcp/client-registration 201 -",
    "GET /mcp/oauth/authorize 200 -",
    "POST /mcp/oauth/authorize 302 -",
    "GET /mcp/oauth/callback 302 -",
    "POST /mcp/oauth/token 200 -",
    "POST /mcp 200 alice",
]


def in_order(seen: list[str], expected: list[str]) -> bool:
    """Whether `expected` occurs in `seen` in this order (other lines may come between)."""
    rest = iter(seen)
    return all(line in rest for line in expected)


@pytest.mark.parametrize("version", ["0.15.0", "1.0.3"])
async def test_inspector_signs_in_and_calls_a_tool(version, inspector_broker, logs):
    ARTIFACTS.mkdir(exist_ok=True)
    gateway = inspector_broker.gateway
    before = len(gateway_requests(inspector_broker.process.log()))

    def logged() -> list[str]:
        return gateway_requests(inspector_broker.process.log())[before:]

    with running_inspector(version, logs) as inspector:
        async with chromium_page() as page:
            from_browser = watch_gateway(page, gateway)
            navigations: list[str] = []
            page.on("framenavigated", lambda frame: navigations.append(frame.url))
            try:
                await page.goto(inspector.page_url(inspector_broker.mcp))
                await broker_sign_in(page, inspector, gateway, navigations)
                await call_add(page)
            finally:  # printed by pytest when the test fails
                print("page:", page.url)
                print("from the browser:", *from_browser, sep="\n  ")
                print("gateway access log:", *logged(), sep="\n  ")
                await page.screenshot(path=str(ARTIFACTS / f"inspector-{version}.png"))
    wait_until(lambda: in_order(logged(), BROKER_FLOW), 10, f"{BROKER_FLOW} in the access log")
