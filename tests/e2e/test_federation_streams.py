"""What a federated route routes besides calls, on real processes: two `mcp` SDK servers whose
tools ask the client back (peers/mcp_asking.py) behind one gateway. A real `mcp` SDK client's
sampling, elicitation and roots callbacks answer the targets' requests made inside a call, its
logging callback hears them; a raw client's GET stream carries a target's list_changed, logging
and roots request made outside any call, a forged answer from another session is refused and
never reaches the target, a cancellation reaches only the target that has the request, and
progress on the GET stream passes only for a call in flight at the target that reports it."""

from __future__ import annotations

import json
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import pytest
from mcp import types

from federation_support import Federated, asking_server, config_path, start_gateway
from support import INITIALIZE, free_port, mcp_headers, new_key, wait_until

RULES = ['mcp.target == "p" || mcp.target == "q"']
CAPABILITIES = {"sampling": {}, "elicitation": {}, "roots": {"listChanged": True}}


@pytest.fixture(scope="module")
def asking(logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Federated]:
    ports = {"p": free_port(), "q": free_port()}
    processes = {name: asking_server(name, port, logs) for name, port in ports.items()}
    key = new_key("federation-streams-key")
    port = free_port()
    directory = tmp_path_factory.mktemp("federation-streams")
    gateway = start_gateway(directory, logs, port, ports, key, RULES)
    stack = Federated(f"http://127.0.0.1:{port}/mcp", key, logs, ports, processes)
    stack.config = config_path(directory)
    stack.gateway_port = port
    try:
        yield stack
    finally:
        gateway.stop()
        for process in processes.values():
            process.stop()


async def sampling(context, params) -> types.CreateMessageResult:
    asked = params.messages[0].content.text
    text = types.TextContent(type="text", text=f"pong to {asked}")
    return types.CreateMessageResult(role="assistant", content=text, model="test-model")


async def elicitation(context, params) -> types.ElicitResult:
    return types.ElicitResult(action="accept", content={"ok": True})


async def list_roots(context) -> types.ListRootsResult:
    return types.ListRootsResult(roots=[types.Root(uri="file:///work")])


def text(result) -> str:
    return result.content[0].text


async def test_a_targets_requests_inside_a_call_are_answered_by_the_sdk_clients_callbacks(asking):
    logged: list[object] = []

    async def logging(params: types.LoggingMessageNotificationParams) -> None:
        logged.append(params.data)

    callbacks = {
        "sampling_callback": sampling,
        "elicitation_callback": elicitation,
        "list_roots_callback": list_roots,
        "logging_callback": logging,
    }
    async with asking.session(**callbacks) as session:
        assert text(await session.call_tool("p_sample", {"prompt": "ping"})) == (
            "p sampled: pong to ping"
        )
        assert text(await session.call_tool("q_confirm", {})) == "q was told accept True"
        assert text(await session.call_tool("q_roots", {})) == "q roots: file:///work"
        assert text(await session.call_tool("p_chat", {})) == "chatted"
        assert "p is chatting" in logged


async def test_uris_in_results_carry_their_target(asking):
    async with asking.session() as session:
        linked = (await session.call_tool("q_link", {})).content[0]
        assert str(linked.uri) == "mcp+gw://q/note://q"
        read = await session.read_resource(str(linked.uri))
        assert str(read.contents[0].uri) == "mcp+gw://q/note://q"
        assert read.contents[0].text == "note of q"


def open_session(asking: Federated) -> dict[str, str]:
    """A raw client session that can be asked for sampling, elicitation and roots."""
    headers = mcp_headers(asking.token())
    init = {**INITIALIZE, "params": {**INITIALIZE["params"], "capabilities": CAPABILITIES}}
    response = httpx.post(asking.url, headers=headers, json=init, timeout=30)
    assert response.status_code == 200, response.text
    headers["Mcp-Session-Id"] = response.headers["mcp-session-id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert httpx.post(asking.url, headers=headers, json=initialized).status_code == 202
    return headers


def messages(response: httpx.Response) -> Iterator[dict]:
    """The JSON-RPC messages of an event stream, as they come (a priming event, an id with
    empty data, is none)."""
    for line in response.iter_lines():
        if line.startswith("data:") and line[5:].strip():
            yield json.loads(line[5:])


def call(
    asking: Federated,
    headers: dict[str, str],
    name: str,
    request_id: object = 9,
    **params: object,
) -> dict:
    """A tool call's result, read from its event stream."""
    body = {
        "jsonrpc": "2.0",
        "id": request_id,
        "method": "tools/call",
        "params": {"name": name, **params},
    }
    with httpx.stream("POST", asking.url, headers=headers, json=body, timeout=30) as response:
        for message in messages(response):
            if message.get("id") == request_id:
                return message
    raise AssertionError("the call's stream ended without its answer")


def post(asking: Federated, headers: dict[str, str], message: dict) -> httpx.Response:
    return httpx.post(asking.url, headers=headers, json=message, timeout=30)


def test_the_get_stream_carries_what_targets_send_outside_a_call(asking):
    headers, other = open_session(asking), open_session(asking)
    seen: list[dict] = []
    with (
        httpx.stream("GET", asking.url, headers=headers, timeout=30) as stream,
        ThreadPoolExecutor(1) as pool,
    ):
        assert stream.status_code == 200
        assert stream.headers["content-type"].startswith("text/event-stream")
        announced = pool.submit(call, asking, headers, "p_announce")
        for message in messages(stream):
            seen.append(message)
            if message.get("method") == "roots/list":
                break
        asked = seen[-1]["id"]
        answer = {"jsonrpc": "2.0", "id": asked, "result": {"roots": [{"uri": "file:///r"}]}}
        # Another session answering with the id it saw elsewhere reaches no target.
        forged = post(asking, other, {**answer, "result": {"roots": [{"uri": "file:///evil"}]}})
        assert forged.status_code == 400
        assert post(asking, headers, answer).status_code == 202
        result = announced.result(timeout=30)
    assert result["result"]["content"][0]["text"] == "p heard roots: file:///r"
    methods = [m.get("method") for m in seen]
    assert "notifications/tools/list_changed" in methods
    assert {"level": "info", "data": "p announces"}.items() <= next(
        m["params"] for m in seen if m.get("method") == "notifications/message"
    ).items()


def test_a_cancellation_reaches_only_the_target_that_has_the_request(asking):
    headers = open_session(asking)
    body = {"jsonrpc": "2.0", "id": "w-1", "method": "tools/call", "params": {"name": "p_wait"}}
    # The call's head is in once the target has it: the gateway knows where it went.
    with httpx.stream("POST", asking.url, headers=headers, json=body, timeout=30) as running:
        assert running.status_code == 200
        cancel = {"requestId": "w-1", "reason": "the user gave up"}
        note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": cancel}
        assert post(asking, headers, note).status_code == 202

        def cancelled() -> list[str]:
            return json.loads(call(asking, headers, "p_cancelled")["result"]["content"][0]["text"])

        wait_until(lambda: "w-1" in cancelled(), what="p's wait cancelled")
    assert "w-1" in json.loads(call(asking, headers, "p_heard")["result"]["content"][0]["text"])
    assert "w-1" not in json.loads(call(asking, headers, "q_heard")["result"]["content"][0]["text"])


def reported(asking: Federated, headers: dict[str, str], name: str, token: object) -> None:
    """`name` (p_report or q_report) reports `token` as done on its GET stream."""
    done = call(asking, headers, name, f"{name}-{token!r}", arguments={"token": token})
    assert done["result"]["content"][0]["text"] == "reported", done


def test_the_get_stream_passes_progress_only_of_a_call_in_flight_at_the_reporting_target(asking):
    headers = open_session(asking)
    seen: list[dict] = []
    wait = {
        "jsonrpc": "2.0",
        "id": 5,
        "method": "tools/call",
        "params": {"name": "p_wait", "_meta": {"progressToken": 5}},
    }
    with (
        httpx.stream("GET", asking.url, headers=headers, timeout=30) as stream,
        httpx.stream("POST", asking.url, headers=headers, json=wait, timeout=30) as waiting,
    ):
        assert stream.status_code == 200
        assert waiting.status_code == 200  # the call is in flight at p
        # q reports the call the client made to p as done (SDK tokens are request ids), then
        # p reports it; each logs after reporting, so once both logs are in, both reports are.
        reported(asking, headers, "q_report", 5)
        reported(asking, headers, "p_report", 5)
        # A call that asked progress under 7 was answered: nothing is in flight under it.
        assert "result" in call(asking, headers, "p_heard", 7, _meta={"progressToken": 7})
        reported(asking, headers, "p_report", 7)
        logs = {"q reported 5", "p reported 5", "p reported 7"}
        for message in messages(stream):
            seen.append(message)
            if logs <= {
                m["params"]["data"] for m in seen if m.get("method") == "notifications/message"
            }:
                break
    progress = [m["params"] for m in seen if m.get("method") == "notifications/progress"]
    assert [(p["progressToken"], p["message"]) for p in progress] == [(5, "p reports")]
