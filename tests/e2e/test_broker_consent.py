"""What the Broker remembers of a consent, with real clients: exactly the request the user allowed
(route, provider, client, redirect URI, set of scopes), and never a request whose redirect URI
another program on the user's device could receive: a loopback address (RFC 8252 §8.6: any local
program may listen on any port) or a private-use URI scheme. The MCP clients that sign in through
a loopback callback (the Python and TypeScript SDKs, MCP Inspector in Chromium) see the consent
page at every sign-in, their registration unchanged; an https client is let through for the
same request and asked again for any other set of scopes."""

from __future__ import annotations

import json
import subprocess
import sys

import httpx
import pytest
from playwright.async_api import Page, expect

from broker_calls import authorize_url, register
from inspector_support import (
    STEP_TIMEOUT_MS,
    asked_to_connect_again,
    broker_sign_in,
    chromium_page,
    expect_connected,
    running_inspector,
    watch_gateway,
)
from node_clients import run_ts_client
from support import PEERS

WEB = "https://client.example/cb"


def consent_request(page: httpx.Response) -> str:
    """The pending request of a consent page."""
    assert page.status_code == 200, (page.status_code, page.headers.get("location"))
    return page.text.split('name="request" value="')[1].split('"')[0]


def allow(stack, browser: httpx.Client, url: str) -> None:
    """Open `url` in `browser` and allow on the consent page."""
    answer = browser.post(
        f"{stack.gateway}/mcp/oauth/authorize",
        data={"request": consent_request(browser.get(url)), "decision": "allow"},
        headers={"Origin": stack.gateway},
    )
    assert answer.status_code == 302, answer.text


def test_an_https_client_is_let_through_only_for_the_scopes_allowed(broker_b):
    client_id = register(broker_b, WEB)
    with httpx.Client() as browser:
        allow(broker_b, browser, authorize_url(broker_b, client_id, WEB))
        same = browser.get(authorize_url(broker_b, client_id, WEB, scope="profile openid"))
        assert same.status_code == 302  # the control: this request is remembered
        assert same.headers["location"].startswith(broker_b.idp)
        wider = browser.get(authorize_url(broker_b, client_id, WEB, scope="openid profile email"))
        offline = browser.get(
            authorize_url(broker_b, client_id, WEB, scope="openid profile offline_access")
        )
        narrower = browser.get(authorize_url(broker_b, client_id, WEB, scope="openid"))
    for asked in (wider, offline, narrower):
        assert asked.status_code == 200, asked.headers.get("location")
        assert 'name="decision" value="allow"' in asked.text
    assert "<li>offline_access</li>" in offline.text  # the page says what is new


@pytest.mark.parametrize(
    "redirect",
    ["http://127.0.0.1:47001/cb", "http://localhost:47001/cb", "com.example.app:/oauth/cb"],
)
def test_a_client_another_program_could_stand_in_for_is_asked_every_time(broker_b, redirect):
    client_id = register(broker_b, redirect)
    with httpx.Client() as browser:
        for _ in range(2):
            allow(broker_b, browser, authorize_url(broker_b, client_id, redirect))
        if redirect.startswith("http://"):  # a loopback client may change port: asked too
            other_port = redirect.replace(":47001/", ":47002/")
            page = browser.get(authorize_url(broker_b, client_id, other_port))
            assert page.status_code == 200, page.headers.get("location")
    assert not [c for c in browser.cookies.jar if c.name.startswith("mcp-consent")]


def test_the_python_sdk_sees_the_consent_page_at_every_sign_in(broker_b):
    done = subprocess.run(
        [sys.executable, str(PEERS / "py_client.py"), broker_b.mcp, "alice", "x", "--again"],
        capture_output=True,
        text=True,
        timeout=180,
    )
    report = json.loads(done.stdout.strip().splitlines()[-1])
    assert report["ok"], report
    first, second = report["client_ids"]
    assert first == second  # signed in again as the client it registered
    assert [met[0] for met in report["met"]] == ["consent", "consent"], report["met"]


def test_the_typescript_sdk_sees_the_consent_page_at_every_sign_in(broker_b):
    report = run_ts_client(broker_b.mcp, "alice", "x", "client2", "--again")
    assert report["ok"], report
    first, second = report["clientIds"]
    assert first == second
    assert [met[0] for met in report["met"]] == ["consent", "consent"], report["met"]
    assert report["againAdd"]["content"][0]["text"] == "5"


async def connect_again(page: Page, mcp: str) -> None:
    """Forget the tokens (not the registration: the Inspector's Disconnect would forget both)
    and reload, then Connect: the Inspector signs in again with the client it registered, as
    when its tokens are gone."""
    forgotten = await page.evaluate(
        """(url) => Object.keys(sessionStorage)
            .filter((key) => key === `[${url}] mcp_tokens`)
            .map((key) => { sessionStorage.removeItem(key); return key; })""",
        mcp,
    )
    assert forgotten, await page.evaluate("Object.keys(sessionStorage)")
    await page.reload()
    await page.get_by_role("button", name="Connect", exact=True).click()


@pytest.mark.parametrize("version", ["0.15.0", "1.0.3"])
async def test_the_inspector_sees_the_consent_page_at_every_sign_in(
    version, inspector_broker, logs
):
    gateway = inspector_broker.gateway
    with running_inspector(version, logs) as inspector:
        async with chromium_page() as page:
            seen = watch_gateway(page, gateway)
            navigations: list[str] = []
            page.on("framenavigated", lambda frame: navigations.append(frame.url))
            try:
                await page.goto(inspector.page_url(inspector_broker.mcp))
                await broker_sign_in(page, inspector, gateway, navigations)
                first = [url for url in navigations if url.startswith(f"{gateway}/mcp/oauth/")]
                await connect_again(page, inspector_broker.mcp)
                allowing = page.locator("button[name=decision][value=allow]")
                connected = page.get_by_text("Connected", exact=True)
                # The provider knows the user by now; it may ask to confirm its own consent.
                confirm = page.locator("input[name=prompt][value=consent]")
                shown = allowing.or_(connected).or_(confirm)
                await expect(shown.first).to_be_attached(timeout=STEP_TIMEOUT_MS)
                assert await allowing.count(), "signed in again without the consent page"
                assert "MCP Inspector" in await page.inner_text("body")
                again = page.url
                await allowing.click()
                asked = asked_to_connect_again(page)
                await expect(confirm.or_(connected).or_(asked).first).to_be_attached(
                    timeout=STEP_TIMEOUT_MS
                )
                if await confirm.count():
                    await page.click("button[type=submit]")
                await expect_connected(page)
            finally:  # printed by pytest when the test fails
                print("from the browser:", *seen, sep="\n  ")
    # The same client both times (its registration kept), each time on the consent page.
    client = httpx.URL(first[0]).params["client_id"]
    assert httpx.URL(again).params["client_id"] == client
    assert seen.count("GET /mcp/oauth/authorize 200") == 2, seen
