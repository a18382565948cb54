"""A federated route's shared parts on a real six-node Redis Cluster: every key of a session under
its hash tag, so each transaction and script that touches several runs on one slot. Two replicas'
connections over the same Cluster keep and resume a session's stream events, take a target's
request once, know a call in flight, count a caller's sessions and add up the targets' health;
and two gateway processes on the Cluster resume a client's GET stream and take its answer at
the other replica."""

from __future__ import annotations

import json
import secrets
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import httpx
import pytest
from joserfc.jwk import RSAKey

from federation_support import asking_server, start_gateway
from mcp_oauth_gateway.proxy.federation.backlog import EventLog
from mcp_oauth_gateway.proxy.federation.exchange import Exchanges
from mcp_oauth_gateway.proxy.federation.health import Seen
from mcp_oauth_gateway.proxy.federation.shared import SharedSessions
from mcp_oauth_gateway.redis_clients import RedisConnection
from redis_ha_support import RedisClusterSet, redis_cluster
from support import INITIALIZE, Process, claims_for, free_port, mcp_headers, mint, new_key

ALICE = ("https://idp", "alice")


@pytest.fixture(scope="module")
def cluster(logs: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RedisClusterSet]:
    with redis_cluster(logs, tmp_path_factory.mktemp("federation-cluster")) as running:
        yield running


@dataclass
class Held:
    """A session as the backlog sees it."""

    id: str = field(default_factory=lambda: secrets.token_urlsafe(16))
    backlog: EventLog = field(default_factory=EventLog)


@pytest.fixture
async def stores(cluster: RedisClusterSet) -> AsyncIterator[tuple[SharedSessions, ...]]:
    """Two replicas' views of one route rule, each over its own connection to the Cluster."""
    route = f"default/cluster-{secrets.token_hex(4)}"
    connections = [RedisConnection(cluster.url) for _ in range(2)]
    try:
        yield tuple(SharedSessions(c, route, 0) for c in connections)
    finally:
        for connection in connections:
            await connection.close()


async def test_a_sessions_stream_events_are_kept_and_resumed_on_one_slot(stores):
    one, two = stores
    session = Held()
    primed = await one.prime(session)
    kept = await one.keep(session, b'{"n":1}', "a", ("sess-a", "a-7"))
    assert primed is not None
    assert kept is not None
    resumed = await two.resume(session, primed)
    assert resumed is not None
    assert resumed.events == ((kept, b'{"n":1}'),)
    assert resumed.cursors == {"a": ("sess-a", "a-7")}
    await two.drop(session.id)
    assert await one.resume(session, primed) is None


async def test_a_targets_request_and_a_call_in_flight_are_shared_on_one_slot(stores):
    one, two = stores
    session = secrets.token_urlsafe(16)
    here, there = Exchanges(), Exchanges()
    here.share(one, session)
    there.share(two, session)
    minted = here.ask("a", 3)
    here.start("c-1", ("b",), progress=5)
    await here.settle()
    assert await there.take(minted) == ("a", 3)
    assert await here.take(minted) is None
    assert await there.cancelled("c-1") == ("b",)
    assert await there.progress_elsewhere("b", 5)
    withdrawn = here.ask("a", 4)
    await here.settle()
    await there.recall("a", 4)
    assert there.withdraw("a", 4) == withdrawn


async def test_a_callers_sessions_are_counted_and_the_health_added_up(stores):
    one, two = stores
    first, second, third = (secrets.token_urlsafe(8) for _ in range(3))
    assert await one.admit(first, ALICE, 2, 100) == []
    assert await two.admit(second, ALICE, 2, 100) == []
    assert await one.admit(third, ALICE, 2, 100) == [first]
    await two.touch(second, ALICE)
    await one.release(second, ALICE)
    await one.add_health({"a": Seen(down_at=1.0, failures={"timeout": 1})})
    await two.add_health({"a": Seen(up_at=2.0, ok_at=2.0), "b": Seen(failures={"refused": 2})})
    seen = await one.read_health(["a", "b"])
    assert seen is not None
    assert seen["a"].health().up is True
    assert seen["a"].failures == {"timeout": 1}
    assert seen["b"].failures == {"refused": 2}


def tool_call(call_id: int | str, name: str, arguments: dict[str, str]) -> dict[str, object]:
    return {
        "jsonrpc": "2.0",
        "id": call_id,
        "method": "tools/call",
        "params": {"name": name, "arguments": arguments},
    }


def replica_on(
    cluster: RedisClusterSet,
    gateways: list[Process],
    directory: Path,
    logs: Path,
    ports: dict[str, int],
    key: RSAKey,
    rules: list[str],
) -> str:
    """A federating gateway sharing `cluster`, added to `gateways` to be stopped; its MCP URL."""
    gateway_port = free_port()
    directory.mkdir()
    env = {"MCP_OAUTH_GATEWAY_REDIS_URL": cluster.url}
    gateways.append(start_gateway(directory, logs, gateway_port, ports, key, rules, env=env))
    return f"http://127.0.0.1:{gateway_port}/mcp"


def test_two_gateways_on_the_cluster_resume_a_stream_and_take_an_answer(
    cluster: RedisClusterSet, logs: Path, tmp_path: Path
):
    ports = {"p": free_port(), "q": free_port()}
    targets = [asking_server("p", ports["p"], logs, resumable=True)]
    targets.append(asking_server("q", ports["q"], logs))
    key = new_key("federation-cluster-key")
    rules = ['mcp.target == "p" || mcp.target == "q"']
    gateways: list[Process] = []
    try:
        urls = [
            replica_on(cluster, gateways, tmp_path / name, logs, ports, key, rules)
            for name in ("one", "two")
        ]
        token = mint(key, claims_for("http://idp.federation.test/", "mcp-federation"))
        headers = mcp_headers(token)
        init = {**INITIALIZE, "params": {**INITIALIZE["params"], "capabilities": {"sampling": {}}}}
        opened = httpx.post(urls[0], headers=headers, json=init, timeout=30)
        assert opened.status_code == 200, opened.text
        headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]

        def told(url: str, text: str) -> None:
            call = tool_call(1, "p_tell", {"text": text})
            assert httpx.post(url, headers=headers, json=call, timeout=30).status_code == 200

        with httpx.stream("GET", urls[0], headers=headers, timeout=30) as stream:
            lines = stream.iter_lines()
            told(urls[0], "first")
            seen = ""
            for line in lines:
                seen = line if line.startswith("id:") else seen
                if "first" in line:
                    break
        told(urls[1], "while away")
        resumed = {**headers, "Last-Event-ID": seen[3:].strip()}
        with httpx.stream("GET", urls[1], headers=resumed, timeout=30) as stream:
            said = next(line for line in stream.iter_lines() if "while away" in line)
        assert said.startswith("data:")
        # A target's request relayed at one replica, answered at the other.
        body = tool_call("s-1", "q_sample", {"prompt": "ping"})
        with httpx.stream("POST", urls[0], headers=headers, json=body, timeout=30) as running:
            data = (json.loads(line[5:]) for line in running.iter_lines() if line[5:].strip())
            asked = next(data)
            assert asked["method"] == "sampling/createMessage"
            content = {"type": "text", "text": "pong"}
            result = {"role": "assistant", "content": content, "model": "m"}
            answer = {"jsonrpc": "2.0", "id": asked["id"], "result": result}
            assert httpx.post(urls[1], headers=headers, json=answer, timeout=30).status_code == 202
            done = next(message for message in data if message.get("id") == "s-1")
        assert done["result"]["content"][0]["text"] == "q sampled: pong"
    finally:
        for process in [*gateways, *targets]:
            process.stop()
