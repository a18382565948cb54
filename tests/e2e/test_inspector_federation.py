"""The MCP Inspector web UI (0.15.0, as tests/e2e/test_inspector.py runs it: headless Chromium
driven by Playwright, the Inspector's proxy and UI on loopback) connected to a federated route:
two `mcp` SDK servers, `a` (answering with event streams) and `b` (plain JSON), behind one
gateway (federation_support). The Inspector connects with the Streamable HTTP transport and a
bearer token typed into its Authentication panel, lists the merged tools, sees both targets'
tools under their prefixed names, and calls one of each."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.async_api import Page, expect

from browser_support import ARTIFACTS
from federation_support import Federated, named_server, start_gateway
from inspector_support import STEP_TIMEOUT_MS, chromium_page, running_inspector
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


async def test_the_inspector_lists_both_targets_tools_and_calls_them(federated, logs):
    ARTIFACTS.mkdir(exist_ok=True)
    with running_inspector("0.15.0", logs) as inspector:
        async with chromium_page() as page:
            try:
                await page.goto(inspector.page_url(federated.url))
                await connect_with_token(page, federated.token("admin"))
                await page.get_by_role("tab", name="Tools").click()
                await page.get_by_role("button", name="List Tools").click()
                for name in TOOLS:
                    await expect(page.get_by_text(name, exact=True)).to_be_visible()
                await run_tool(page, "b_whoami", {})
                await expect(unstructured(page)).to_contain_text('"b"')
                await run_tool(page, "a_add", {"a": "2", "b": "3"})
                structured = page.get_by_text("Structured Content:", exact=True).locator("xpath=..")
                await expect(structured).to_contain_text(re.compile(r"\{\s*result:\s*5\s*\}"))
                await expect(unstructured(page)).to_contain_text('"5"')
            finally:
                print("page:", page.url)
                await page.screenshot(path=str(ARTIFACTS / "inspector-federation.png"))
