"""A real browser: headless Chromium (Debian's, driven by Playwright) signs in through the
gateway's consent page and the identity provider's login against the demo, while the Python MCP
SDK client waits on its loopback callback like a desktop client does, then calls a tool."""

from __future__ import annotations

import asyncio
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest
from playwright.async_api import async_playwright

from browser_support import ARTIFACTS, CHROMIUM_FLAGS
from demo_support import running_demo
from support import free_port


class CallbackServer:
    """The client's loopback redirect target (RFC 8252), as a desktop MCP client runs it."""

    def __init__(self) -> None:
        self.port = free_port()
        self.query: dict[str, str] = {}
        self.arrived = threading.Event()
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self):
                if urlsplit(self.path).path != "/callback":  # e.g. the browser's favicon
                    self.send_error(404)
                    return
                owner.query = {k: v[0] for k, v in parse_qs(urlsplit(self.path).query).items()}
                owner.arrived.set()
                body = b"<h1>Signed in. You can close this window.</h1>"
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}/callback"


@pytest.fixture
def demo(tmp_path):
    assert shutil.which("chromium"), "chromium is required: `make test` installs it"
    with running_demo(tmp_path / "demo") as running:
        yield running


class Memory:
    """The client's token storage, in memory."""

    tokens = client_info = None

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens):
        self.tokens = tokens

    async def get_client_info(self):
        return self.client_info

    async def set_client_info(self, info):
        self.client_info = info


async def sign_in_with_chromium(
    authorization_url: str, password: str, callback: CallbackServer, seen: dict[str, str]
) -> None:
    """What a person does in the browser the client opened: allow on the consent page, sign
    in as alice, land on the client's callback; what they saw goes into `seen`."""
    async with async_playwright() as playwright:
        browser = await playwright.chromium.launch(
            executable_path="/usr/bin/chromium", args=CHROMIUM_FLAGS
        )
        page = await browser.new_page()
        await page.goto(authorization_url)
        seen["consent_title"] = await page.title()
        seen["consent_text"] = await page.inner_text("body")
        await page.screenshot(path=str(ARTIFACTS / "consent-page.png"), full_page=True)
        await page.click("button[value=allow]")
        await page.fill("input[name=login]", "alice")
        await page.fill("input[name=password]", password)
        await page.screenshot(path=str(ARTIFACTS / "login-page.png"))
        await page.click("button[type=submit]")
        await page.wait_for_url(f"{callback.url}*")
        seen["landing"] = await page.inner_text("h1")
        await browser.close()


async def test_browser_sign_in_through_the_demo(demo):
    import httpx2
    from mcp.client import Client
    from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider
    from mcp.client.streamable_http import streamable_http_client
    from mcp.shared.auth import OAuthClientMetadata

    ARTIFACTS.mkdir(exist_ok=True)
    callback = CallbackServer()
    seen: dict[str, str] = {}

    async def redirect_handler(authorization_url: str) -> None:
        await sign_in_with_chromium(authorization_url, demo.password, callback, seen)

    async def callback_handler() -> AuthorizationCodeResult:
        await asyncio.get_running_loop().run_in_executor(None, callback.arrived.wait, 30)
        return AuthorizationCodeResult(
            code=callback.query["code"],
            state=callback.query.get("state"),
            iss=callback.query.get("iss"),
        )

    oauth = OAuthClientProvider(
        server_url=demo.url,
        client_metadata=OAuthClientMetadata(
            client_name="Browser Test Client", redirect_uris=[callback.url]
        ),
        storage=Memory(),
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
    )
    http = httpx2.AsyncClient(auth=oauth, timeout=60)
    try:
        async with http, Client(streamable_http_client(demo.url, http_client=http)) as client:
            result = await client.call_tool("word_count", {"text": "signed in by a browser"})
    finally:
        callback.server.shutdown()
    assert result.structured_content == {"words": 5, "characters": 22, "lines": 1}
    assert "Browser Test Client" in seen["consent_title"]
    assert f"127.0.0.1:{callback.port}" in seen["consent_text"]  # the redirect host is named
    assert seen["landing"] == "Signed in. You can close this window."
    assert callback.query["iss"] == demo.url
    assert (ARTIFACTS / "consent-page.png").stat().st_size > 1000
