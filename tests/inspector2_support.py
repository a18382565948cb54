"""MCP Inspector 2.x's web UI (the `@modelcontextprotocol/inspector` 2.12.0 that
tests/conformance installs with its Node 22), run on loopback and driven in headless Chromium:
one browser context, so that a link the Inspector opens (or the test opens) is a new page of the
same browser, with the same cookies. The browser may reach 127.0.0.1 only: any other request is
aborted before it leaves (the Inspector's page asks for a web font)."""

from __future__ import annotations

import re
import secrets
import shutil
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlencode, urlsplit

from playwright.async_api import BrowserContext, Page, Route, async_playwright, expect

from browser_support import CHROMIUM_FLAGS
from connect_flow import Login
from inspector_support import NODE22, STEP_TIMEOUT_MS
from support import ROOT, Process, free_port, wait_for_port

PACKAGE = ROOT / "tests" / "conformance" / "node_modules" / "@modelcontextprotocol" / "inspector"
VERSION = "2.12.0"
LINK = re.compile(r"Link: (\S+)")


@dataclass
class Inspector2:
    """A running Inspector web UI and the session token its page needs."""

    ui: str
    token: str
    process: Process

    @property
    def page_url(self) -> str:
        """The UI, authorized for its API (as the Inspector prints it)."""
        return f"{self.ui}/?{urlencode({'MCP_INSPECTOR_API_TOKEN': self.token})}"


@contextmanager
def running_inspector2(logs: Path, home: Path, server_url: str) -> Iterator[Inspector2]:
    """`mcp-inspector --web` for one Streamable HTTP server, on a free loopback port, with its
    state under `home`; always stopped."""
    launcher = PACKAGE / "clients" / "launcher" / "build" / "index.js"
    assert launcher.exists(), (
        "tests/conformance/node_modules (Inspector 2.12, Node 22) is missing: `make test` runs "
        "npm ci there"
    )
    home.mkdir(parents=True, exist_ok=True)
    port, token = free_port(), secrets.token_hex(32)
    env = {
        "HOME": str(home),
        "MCP_STORAGE_DIR": str(home / "storage"),
        "HOST": "127.0.0.1",
        "CLIENT_PORT": str(port),
        "MCP_SANDBOX_PORT": "0",  # the MCP Apps sandbox and app origin: any free port
        "MCP_APP_ORIGIN_PORT": "0",
        "MCP_AUTO_OPEN_ENABLED": "false",
        "MCP_INSPECTOR_API_TOKEN": token,
        "MCP_INSPECTOR_SECRET_STORE": "memory",
    }
    command = [
        str(NODE22 / "node"),
        str(launcher),
        "--web",
        "--transport",
        "http",
        "--server-url",
        server_url,
    ]
    process = Process(f"inspector-{VERSION}", command, logs, env=env, cwd=home)
    try:
        wait_for_port(port, process)
        yield Inspector2(f"http://127.0.0.1:{port}", token, process)
    finally:
        process.stop()


async def _loopback_only(route: Route) -> None:
    host = urlsplit(route.request.url).hostname
    if host == "127.0.0.1":
        await route.continue_()
    else:
        await route.abort("blockedbyclient")


@asynccontextmanager
async def chromium_context() -> AsyncIterator[BrowserContext]:
    """A fresh headless Chromium context (several pages, shared cookies), closed at the end."""
    assert shutil.which("chromium"), "chromium is required: `make test` installs it"
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS
        )
        try:
            context = await browser.new_context(viewport={"width": 1280, "height": 1000})
            context.set_default_timeout(STEP_TIMEOUT_MS)
            await context.route(re.compile(r"^https?://"), _loopback_only)
            yield context
        finally:
            await browser.close()


async def switch_connection(page: Page) -> None:
    """Flip the server card's connect switch (its track: the input sits under it)."""
    await page.locator(".mantine-Switch-track").click()


async def broker_sign_in(page: Page, gateway_mcp: str, login: Login) -> None:
    """The Inspector's own OAuth flow through a Broker route: the gateway's consent page, then
    the provider's login form (the dev IdP's), back to the Inspector."""
    await page.wait_for_url(f"{gateway_mcp}/oauth/authorize?*")
    consent = await page.inner_text("body")
    assert "MCP Inspector" in consent, consent
    await page.click("button[name=decision][value=allow]")
    await page.wait_for_url(f"{login.at}/**")
    await page.fill("input[name=login]", login.username)
    await page.fill("input[name=password]", login.password)
    await page.click("button[type=submit]")


async def follow_connect_link(page: Page, route: Login, upstream: Login) -> str:
    """A connect link opened in `page`: sign in at the route's provider, then at the upstream's
    authorization server (allowing access when it asks); the gateway's last page's text."""
    for login in (route, upstream):
        await page.wait_for_url(f"{login.at}/**")
        await page.fill("input[name=login]", login.username)
        await page.fill("input[name=password]", login.password)
        await page.click("button[type=submit]")
    # The upstream asks for consent the first time only (it remembers the user's answer).
    allow = page.locator("button[name=decision][value=allow]")
    connected = page.locator("h1", has_text="is connected")
    await expect(allow.or_(connected)).to_be_visible(timeout=STEP_TIMEOUT_MS)
    if await allow.is_visible():
        await allow.click()
    await expect(connected).to_be_visible(timeout=STEP_TIMEOUT_MS)
    return await page.inner_text("body")


async def execute_tool(page: Page, name: str) -> None:
    """Open the Tools screen, pick `name` (back from a result if one is shown) and run it."""
    await page.get_by_text("Tools", exact=True).first.click()
    close = page.get_by_role("button", name="Close results")
    if await close.is_visible():
        await close.click()
    await page.get_by_role("button", name=name, exact=True).click()
    await page.get_by_role("button", name="Execute Tool").click()
