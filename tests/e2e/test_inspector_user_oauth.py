"""MCP Inspector's web UI, for real, against a `userOAuth` route: the demo's notes server (a
third-party MCP server that accepts only tokens of its own authorization server) behind the
gateway in Broker mode. Inspector 2.12.0 (tests/conformance's, on its Node 22) in headless
Chromium; Inspectors 0.15.0 and 1.0.3 know no -32042 (their bundled SDK names the code, their UI
shows it as any error), so they are not run here.

What a user meets, in order:
1. Connecting, the Inspector signs in through the gateway (consent, the route's provider); the
   gateway answers `initialize` with -32042, which Inspector 2.12 handles on tool calls only:
   it shows "Re-authentication required" with the gateway's message, whose text carries the
   link. The test follows that link in a new page of the same browser (the route provider's
   sign-in, then the notes server's own sign-in and consent): "Demo Notes is connected".
2. Connecting again works; `whoami` shows the notes server's own user, signed in at its own
   authorization server, through the gateway's client there.
3. The operator removes the user's grant (`grants remove`). The next `whoami` gets -32042:
   Inspector 2.12 shows its URL elicitation dialog with the link; "Open in Browser" opens it in
   a new page, where the user connects again; the gateway's
   `notifications/elicitation/complete` makes the Inspector retry the call by itself, and the
   result is the user's own again.
"""

from __future__ import annotations

import re

from playwright.async_api import BrowserContext, Locator, Page, expect

from browser_support import ARTIFACTS
from connect_flow import Login
from demo_support import RunningDemo, grants, remove_grants, running_demo
from inspector2_support import (
    LINK,
    VERSION,
    broker_sign_in,
    chromium_context,
    execute_tool,
    follow_connect_link,
    running_inspector2,
    switch_connection,
)
from inspector_support import STEP_TIMEOUT_MS


async def expect_own_whoami(page: Page, demo: RunningDemo) -> None:
    """The result panel shows the notes server's alice, of its own issuer, via the gateway."""
    result = page.get_by_text("Structured Output", exact=True).locator("xpath=../..")
    await expect(result).to_contain_text('"user": "alice"', timeout=STEP_TIMEOUT_MS)
    await expect(result).to_contain_text(
        f'"issuer": "{demo.notes_idp}/realms/master"', timeout=STEP_TIMEOUT_MS
    )
    await expect(result).to_contain_text('"client": "mcp-oauth-gateway"', timeout=STEP_TIMEOUT_MS)


async def connect_by_the_message(
    page: Page, browser: BrowserContext, demo: RunningDemo, route: Login, upstream: Login
) -> None:
    """Inspector shows "Re-authentication required" with the gateway's message; the link in
    it, followed in a new page, connects the notes server."""
    asked = page.get_by_text("Re-authentication required")
    await expect(asked).to_be_visible(timeout=STEP_TIMEOUT_MS)
    found = LINK.search(await page.inner_text("body"))
    assert found, await page.inner_text("body")
    link = found.group(1)
    assert link.startswith(f"{demo.notes_url}/connect?id="), link
    tab = await browser.new_page()
    await tab.goto(link)
    assert "Demo Notes is connected" in await follow_connect_link(tab, route, upstream)
    await tab.close()


async def connect_by_the_elicitation(
    dialog: Locator, browser: BrowserContext, demo: RunningDemo, route: Login, upstream: Login
) -> None:
    """Inspector's URL elicitation dialog carries the link; "Open in Browser" opens it in a
    new page, which connects the notes server."""
    await expect(dialog).to_contain_text("Elicitation Request", timeout=STEP_TIMEOUT_MS)
    await expect(dialog).to_contain_text(
        re.compile(re.escape(demo.notes_url) + r"/connect\?id="), timeout=STEP_TIMEOUT_MS
    )
    async with browser.expect_page() as opened:
        await dialog.get_by_role("button", name="Open in Browser").click()
    popup = await opened.value
    assert popup.url.startswith(route.at) or popup.url.startswith(demo.notes_url), popup.url
    assert "Demo Notes is connected" in await follow_connect_link(popup, route, upstream)


async def test_inspector_is_given_the_link_and_then_calls_with_the_users_own_token(tmp_path, logs):
    ARTIFACTS.mkdir(exist_ok=True)
    with (
        running_demo(tmp_path / "demo", "keycloak") as demo,
        running_inspector2(logs, tmp_path / "inspector-home", demo.notes_url) as inspector,
    ):
        route, upstream = demo.logins("alice")
        async with chromium_context() as browser:
            page = await browser.new_page()
            try:
                await page.goto(inspector.page_url)
                await switch_connection(page)
                await broker_sign_in(page, demo.notes_url, route)

                # 1. initialize answered -32042: the gateway's message, link included.
                await connect_by_the_message(page, browser, demo, route, upstream)
                await page.get_by_role("button", name="Dismiss").click()
                await switch_connection(page)
                await expect(page.get_by_text("Connected", exact=True)).to_be_visible(
                    timeout=STEP_TIMEOUT_MS
                )

                # 2. The user's own token at the notes server.
                await execute_tool(page, "whoami")
                await expect_own_whoami(page, demo)

                # 3. No grant any more: the tool call's -32042 is a URL elicitation.
                remove_grants(demo)
                assert grants(demo) == []
                await execute_tool(page, "whoami")
                dialog = page.get_by_role("dialog")
                await connect_by_the_elicitation(dialog, browser, demo, route, upstream)
                # No "I've completed it": the completion notification retries the call.
                await expect(dialog).to_have_count(0, timeout=STEP_TIMEOUT_MS)
                await expect_own_whoami(page, demo)
                completed = re.compile("notifications/elicitation/complete", re.IGNORECASE)
                await expect(page.locator("body")).to_contain_text(
                    completed, timeout=STEP_TIMEOUT_MS
                )
            finally:  # printed by pytest when the test fails
                print("page:", page.url)
                await page.screenshot(path=str(ARTIFACTS / f"inspector-{VERSION}-user-oauth.png"))
