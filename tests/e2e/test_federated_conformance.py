"""The MCP conformance suite's server scenarios through a federated backend, as through a single
one (federated_conformance_support: the same server alone on `/single`, and as target `conf`
beside a second `mcp` SDK server on `/fed`).

The suite addresses the server's items by their own names (`tools/call` of `test_simple_text`,
`resources/read` of `test://static-text`); a federated route offers them only prefixed
(`conf_test_simple_text`, `mcp+gw://conf/test://static-text`), and a prefix is mandatory with
more than one target. So:
- the scenarios that name no item run through both routes and score the same;
- the scenarios that name items pass through `/single` (the baseline: the server and the proxy
  do what the suite asks), fail on `/fed` because the bare name is unknown there, and are
  mirrored with the `mcp` SDK client: the same request through `/single` by the server's name
  and through `/fed` by the prefixed name gets the same result (with the resource URIs it
  carries under `mcp+gw://conf/`, as documented), the same progress and log notifications, and
  the same sampling and elicitation requests answered by the client.

The 2026-07-28 scenarios (`server-stateless`, `http-header-validation`) run through both
routes too: every check that passes through `/single` passes through `/fed`, except two that
call a diagnostic tool by its bare name (which neither server has: the server answers an
unknown tool with an error result, the gateway with JSON-RPC -32602, as documented). The `mcp`
SDK 2.x client, left to choose, speaks that wire to `/fed` and calls across both targets."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp_types import (
    CreateMessageRequestParams,
    CreateMessageResult,
    ElicitRequestParams,
    ElicitResult,
    PromptReference,
    TextContent,
)

from federated_conformance_support import CONF, Routes, run_scenario, running_routes

# Scenarios that name no tool, prompt or resource of the server.
UNNAMED = [
    "server-initialize",
    "ping",
    "tools-list",
    "prompts-list",
    "resources-list",
    "logging-set-level",
    "server-session-lifecycle",
    # A request every target refuses (a foreign Origin) is refused with their 4xx.
    "dns-rebinding-protection",
]
# Scenarios that call the server's items by name (mirrored below through `/fed`).
NAMED = [
    "tools-call-simple-text",
    "tools-call-image",
    "tools-call-audio",
    "tools-call-embedded-resource",
    "tools-call-mixed-content",
    "tools-call-error",
    "tools-call-with-progress",
    "tools-call-with-logging",
    "tools-call-sampling",
    "tools-call-elicitation",
    "prompts-get-simple",
    "prompts-get-with-args",
    "prompts-get-embedded-resource",
    "prompts-get-with-image",
    "resources-read-text",
    "resources-read-binary",
    "resources-templates-read",
    "completion-complete",
]
TOOLS = [
    "test_simple_text",
    "test_image_content",
    "test_audio_content",
    "test_embedded_resource",
    "test_multiple_content_types",
    "test_error_handling",
]
PROMPTS = [
    ("test_simple_prompt", None),
    ("test_prompt_with_arguments", {"arg1": "one", "arg2": "two"}),
    ("test_prompt_with_embedded_resource", {"resourceUri": "test://example-resource"}),
    ("test_prompt_with_image", None),
]
URIS = ["test://static-text", "test://static-binary", "test://template/123/data"]


# The 2026-07-28 checks that call a tool by the server's own name, which neither server lists
# (`test_streaming_elicitation`, `test_logging_tool`): "not testable" through either route, but
# through `/single` the server's error *result* for an unknown tool counts as a pass, while
# `/fed` answers an unknown name with JSON-RPC -32602, as for every federated route.
BARE_NAME_CHECKS = {
    "sep-2575-http-server-no-independent-requests-on-stream",
    "sep-2575-server-no-log-without-loglevel",
}
CHECK_LINE = re.compile(r"\[(\S+)\s*\]\s*\S*(SUCCESS|FAILURE|WARNING|SKIPPED|INFO)")


def failing(output: str) -> set[str]:
    """The ids of the checks a scenario's output reports as failed."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", output)
    return {m.group(1) for m in CHECK_LINE.finditer(plain) if m.group(2) == "FAILURE"}


@pytest.fixture(scope="module")
def routes(logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Routes]:
    with running_routes(tmp_path_factory.mktemp("federated-conformance"), logs) as running:
        yield running


def prefixed(name: str) -> str:
    return f"{CONF}_{name}"


def wrapped(uri: str) -> str:
    return f"mcp+gw://{CONF}/{uri}"


@pytest.mark.parametrize("scenario", UNNAMED)
def test_a_scenario_naming_no_item_scores_the_same_through_both(routes, scenario):
    single = run_scenario(f"{routes.injector}/single", scenario)
    federated = run_scenario(f"{routes.injector}/fed", scenario)
    assert single[0] == single[1] > 0, single[2]
    assert federated[:2] == single[:2], federated[2]


@pytest.mark.parametrize("scenario", ["server-stateless", "http-header-validation"])
def test_the_stateless_wire_scores_the_same_through_both(routes, scenario):
    single = run_scenario(f"{routes.injector}/single", scenario)
    federated = run_scenario(f"{routes.injector}/fed", scenario)
    assert single[0] > 0, single[2]
    assert federated[0] > 0, federated[2]
    # What passes through the single route passes through the federated one.
    assert failing(federated[2]) <= failing(single[2]) | BARE_NAME_CHECKS, federated[2]
    if scenario == "http-header-validation":
        assert federated[0] == federated[1], federated[2]


async def test_the_sdk_client_left_to_choose_speaks_the_stateless_wire_across_targets(routes):
    headers = {"Authorization": f"Bearer {routes.token()}"}
    async with (
        httpx2.AsyncClient(headers=headers, timeout=30) as http,
        Client(streamable_http_client(f"{routes.gateway}/fed", http_client=http)) as client,
    ):
        assert client.protocol_version == "2026-07-28"
        names = {tool.name for tool in (await client.list_tools()).tools}
        assert {prefixed("test_simple_text"), "named_add", "named_whoami"} <= names
        added = await client.call_tool("named_add", {"a": 2, "b": 3})
        assert added.structured_content == {"result": 5}
        text = await client.call_tool(prefixed("test_simple_text"), {})
        single_text = await _single_text(routes)
        assert dumped(text)["content"] == single_text


async def _single_text(routes: Routes) -> list[dict]:
    """`test_simple_text`'s content through the single route, on the session wire."""
    async with routes.session("single") as session:
        return dumped(await session.call_tool("test_simple_text", {}))["content"]


@pytest.mark.parametrize("scenario", NAMED)
def test_a_scenario_naming_items_passes_through_the_single_route(routes, scenario):
    ok, total, output = run_scenario(f"{routes.injector}/single", scenario)
    assert ok == total > 0, output


def test_on_the_federated_route_the_suites_bare_names_are_unknown(routes):
    ok, total, output = run_scenario(f"{routes.injector}/fed", "tools-call-simple-text")
    assert ok < total, output
    assert "Unknown tool: test_simple_text" in output, output


def dumped(result) -> dict:
    return result.model_dump(mode="json", by_alias=True, exclude_none=True)


def offered_item(item: dict) -> dict:
    """A content item as the federated route offers it: a resource link's or an embedded
    resource's URI under `mcp+gw://conf/` (docs/configuration/federation.md), the rest as is."""
    if item.get("type") == "resource_link":
        return {**item, "uri": wrapped(item["uri"])}
    if item.get("type") == "resource":
        return {**item, "resource": {**item["resource"], "uri": wrapped(item["resource"]["uri"])}}
    return item


def offered(result: dict) -> dict:
    """A single route's result as the federated route returns it (URIs it carries wrapped)."""
    changed = dict(result)
    if "content" in result:
        changed["content"] = [offered_item(item) for item in result["content"]]
    if "messages" in result:
        changed["messages"] = [
            {**message, "content": offered_item(message["content"])}
            for message in result["messages"]
        ]
    if "contents" in result:
        changed["contents"] = [{**item, "uri": wrapped(item["uri"])} for item in result["contents"]]
    return changed


@pytest.mark.parametrize("tool", TOOLS)
async def test_a_tool_answers_the_same_through_both(routes, tool):
    async with routes.session("single") as single, routes.session("fed") as federated:
        expected = dumped(await single.call_tool(tool, {}))
        assert dumped(await federated.call_tool(prefixed(tool), {})) == offered(expected)
    assert expected["content"], expected


@pytest.mark.parametrize(("prompt", "arguments"), PROMPTS)
async def test_a_prompt_reads_the_same_through_both(routes, prompt, arguments):
    async with routes.session("single") as single, routes.session("fed") as federated:
        expected = dumped(await single.get_prompt(prompt, arguments))
        assert dumped(await federated.get_prompt(prefixed(prompt), arguments)) == offered(expected)
    assert expected["messages"], expected


@pytest.mark.parametrize("uri", URIS)
async def test_a_resource_reads_the_same_through_both(routes, uri):
    async with routes.session("single") as single, routes.session("fed") as federated:
        expected = dumped(await single.read_resource(uri))
        assert dumped(await federated.read_resource(wrapped(uri))) == offered(expected)
    assert expected["contents"][0]["uri"] == uri


async def progress_of(routes: Routes, route: str, tool: str) -> list[tuple]:
    """The progress notifications a call of `tool` on `route` delivers to its callback."""
    seen: list[tuple] = []

    async def progress(done: float, total: float | None, message: str | None) -> None:
        seen.append((done, total))

    async with routes.session(route) as session:
        await session.call_tool(tool, {}, progress_callback=progress)
    return seen


async def logs_of(routes: Routes, route: str, tool: str) -> list[tuple]:
    """The log messages (level, data) a call of `tool` on `route` delivers, at level debug."""
    seen: list[tuple] = []

    async def logged(params) -> None:
        seen.append((params.level, params.data))

    async with routes.session(route, logging_callback=logged) as session:
        await session.set_logging_level("debug")
        await session.call_tool(tool, {})
    return seen


async def test_progress_inside_a_call_is_the_same_through_both(routes):
    single = await progress_of(routes, "single", "test_tool_with_progress")
    assert single == [(0, 100), (50, 100), (100, 100)]
    assert await progress_of(routes, "fed", prefixed("test_tool_with_progress")) == single


async def test_log_messages_inside_a_call_are_the_same_through_both(routes):
    single = await logs_of(routes, "single", "test_tool_with_logging")
    assert [data for _, data in single] == [
        "Tool execution started",
        "Tool processing data",
        "Tool execution completed",
    ]
    assert await logs_of(routes, "fed", prefixed("test_tool_with_logging")) == single


async def asked_of(routes: Routes, route: str, tool: str, arguments: dict) -> tuple[dict, list]:
    """A call of `tool` whose server asks the client back (sampling or elicitation), answered
    by the client's callbacks: (the call's result, what the server asked)."""
    asked: list = []

    async def sample(context, params: CreateMessageRequestParams) -> CreateMessageResult:
        asked.append(dumped(params))
        answer = TextContent(type="text", text="an answer from the client")
        return CreateMessageResult(role="assistant", content=answer, model="test-model")

    async def elicit(context, params: ElicitRequestParams) -> ElicitResult:
        asked.append(dumped(params))
        return ElicitResult(action="accept", content={"username": "u", "email": "u@example.test"})

    callbacks = {"sampling_callback": sample, "elicitation_callback": elicit}
    async with routes.session(route, **callbacks) as session:
        result = dumped(await session.call_tool(tool, arguments))
    return result, asked


@pytest.mark.parametrize(
    ("tool", "arguments", "answered"),
    [
        ("test_sampling", {"prompt": "Say hi"}, "LLM response: an answer from the client"),
        ("test_elicitation", {"message": "Who?"}, 'content={"username": "u", "email"'),
    ],
)
async def test_a_tool_asking_the_client_back_is_the_same_through_both(
    routes, tool, arguments, answered
):
    single = await asked_of(routes, "single", tool, arguments)
    assert answered in single[0]["content"][0]["text"], single
    assert len(single[1]) == 1, single
    assert await asked_of(routes, "fed", prefixed(tool), arguments) == single


async def test_a_completion_is_the_same_through_both(routes):
    argument = {"name": "arg1", "value": "par"}
    async with routes.session("single") as single, routes.session("fed") as federated:
        own = PromptReference(type="ref/prompt", name="test_prompt_with_arguments")
        expected = dumped(await single.complete(own, argument))
        renamed = PromptReference(type="ref/prompt", name=prefixed("test_prompt_with_arguments"))
        assert dumped(await federated.complete(renamed, argument)) == expected
    assert expected["completion"]["values"] == ["paris", "park", "party"]


def renamed(items: list, key: str, rename) -> list[dict]:
    """Each item dumped, with `key` renamed as the federated route shows it."""
    return [{**dumped(item), key: rename(getattr(item, key))} for item in items]


async def test_the_lists_are_the_single_routes_renamed(routes):
    async with routes.session("single") as single, routes.session("fed") as federated:
        tools = (await single.list_tools()).tools
        fed_tools = [t for t in (await federated.list_tools()).tools if t.name.startswith("conf_")]
        assert [dumped(t) for t in fed_tools] == renamed(tools, "name", prefixed)
        prompts = (await single.list_prompts()).prompts
        fed_prompts = [
            p for p in (await federated.list_prompts()).prompts if p.name.startswith("conf_")
        ]
        assert [dumped(p) for p in fed_prompts] == renamed(prompts, "name", prefixed)
        listed = (await single.list_resources()).resources
        fed_listed = [dumped(r) for r in (await federated.list_resources()).resources]
        own = [{**r, "uri": wrapped(r["uri"])} for r in map(dumped, listed)]
        assert [r for r in fed_listed if r["uri"].startswith(wrapped(""))] == own
        names = {t.name for t in (await federated.list_tools()).tools}
    assert {prefixed(t) for t in TOOLS} <= names
    assert "named_whoami" in names  # the second target's tools beside them
