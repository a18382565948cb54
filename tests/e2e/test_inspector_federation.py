"""The MCP Inspector web UI (as tests/e2e/test_inspector.py runs it: headless Chromium driven
by Playwright, the Inspector's proxy and UI on loopback) connected to a federated route: two
`mcp` SDK servers, `a` (answering with event streams) and `b` (plain JSON), behind one route.
The Inspector connects with the Streamable HTTP transport, lists the merged tools, sees both
targets' tools under their prefixed names, and calls one of each:
- 0.15.0 with a bearer token typed into its Authentication panel (federation_support's gateway,
  tokens verified against an inline key);
- 0.15.0 and 1.0.3 signed in through Broker mode, as test_inspector.py does
  (inspector_federation_support: examples/provider-b with the federated backend)."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from browser_support import ARTIFACTS
from federation_support import Federated, named_server, start_gateway
from inspector_federation_support import BrokerRoute, broker_route, sign_in
from inspector_support import (
    STEP_TIMEOUT_MS,
    chromium_page,
    gateway_requests,
    running_inspector,
    watch_gateway,
)
from support import free_port, new_key

TOOLS = ["a_add", "a_count", "a_whoami", "b_add", "b_count", "b_whoami"]


@pytest.fixture(scope="module")
def federated(logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federated]:
    ports = {"a": free_port(), "b": free_port()}
    processes = {
        "a": named_server("a", ports["a"], logs),
        "b": named_server("b", ports["b"], logs, json_answers=True),
    }
    key, port = new_key("inspector-federation"), free_port()
    directory = tmp_path_factory.mktemp("inspector-federation")
    gateway = start_gateway(directory, logs, port, ports, key)
    try:
        yield Federated(f"http://127.0.0.1:{port}/mcp", key, logs, ports, processes)
    finally:
        gateway.stop()
        for process in processes.values():
            process.stop()


@pytest.fixture(scope="module")
def broker(
    federated: Federated, logs: Path, tmp_path_factory: pytest.TempPathFactory, idp_key
) -> Iterator[BrokerRoute]:
    """The same two servers behind a gateway in Broker mode (provider-b layout)."""
    directory = tmp_path_factory.mktemp("inspector-federation-broker")
    with broker_route(directory, logs, idp_key, federated.ports) as route:
        yield route


async def connect_with_token(page: Page, token: str) -> None:
    """Type the bearer token into the Authentication panel, then connect."""
    await page.get_by_test_id("auth-button").click()
    await page.get_by_test_id("bearer-token-input").fill(token)
    await page.get_by_role("button", name="Connect", exact=True).click()
    await expect(page.get_by_text("Connected", exact=True)).to_be_visible(timeout=STEP_TIMEOUT_MS)


async def run_tool(page: Page, name: str, arguments: dict[str, str]) -> None:
    """Pick a tool from the list, fill its arguments, run it and wait for its success."""
    await page.get_by_text(name, exact=True).click()
    for argument, value in arguments.items():
        await page.fill(f"input[name={argument}]", value)
    await page.get_by_role("button", name="Run Tool").click()
    outcome = page.locator("h4", has_text="Tool Result:")
    await expect(outcome).to_have_text("Tool Result: Success", timeout=STEP_TIMEOUT_MS)


def unstructured(page: Page):
    return page.get_by_text("Unstructured Content:", exact=True).locator("xpath=..")


async def list_and_call(page: Page, tools: list[str]) -> None:
    """List the tools, find every one of `tools`, call `b_whoami` and `a_add` (2 + 3)."""
    await page.get_by_role("tab", name="Tools").click()
    await page.get_by_role("button", name="List Tools").click()
    for name in tools:
        await expect(page.get_by_text(name, exact=True)).to_be_visible()
    await run_tool(page, "b_whoami", {})
    await expect(unstructured(page)).to_contain_text('"b"')
    await run_tool(page, "a_add", {"a": "2", "b": "3"})
    structured = page.get_by_text("Structured Content:", exact=True).locator("xpath=..")
    await expect(structured).to_contain_text(re.compile(r"\{\s*result:\s*5\s*\}"))
    await expect(unstructured(page)).to_contain_text('"5"')


async def test_the_inspector_with_a_token_lists_both_targets_tools_and_calls_them(federated, logs):
    ARTIFACTS.mkdir(exist_ok=True)
    with running_inspector("0.15.0", logs) as inspector:
        async with chromium_page() as page:
            try:
                await page.goto(inspector.page_url(federated.url))
                await connect_with_token(page, federated.token("admin"))
                await list_and_call(page, TOOLS)
            finally:
                print("page:", page.url)
                await page.screenshot(path=str(ARTIFACTS / "inspector-federation.png"))


@pytest.mark.parametrize("version", ["0.15.0", "1.0.3"])
async def test_the_inspector_signed_in_by_the_broker_lists_and_calls_across_targets(
    version, broker, logs
):
    ARTIFACTS.mkdir(exist_ok=True)
    before = len(gateway_requests(broker.process.log()))
    with running_inspector(version, logs) as inspector:
        async with chromium_page() as page:
            from_browser = watch_gateway(page, broker.gateway)
            try:
                await page.goto(inspector.page_url(broker.mcp))
                await sign_in(page, inspector, broker.gateway)
                await list_and_call(page, TOOLS)
            finally:
                print("page:", page.url)
                print("from the browser:", *from_browser, sep="\n  ")
                print("gateway:", *gateway_requests(broker.process.log())[before:], sep="\n  ")
                shot = ARTIFACTS / f"inspector-federation-broker-{version}.png"
                await page.screenshot(path=str(shot))
    assert "POST /mcp 200 alice" in gateway_requests(broker.process.log())[before:]
