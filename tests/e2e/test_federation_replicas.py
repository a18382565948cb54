"""A federated route served by two gateway processes sharing a real Redis
(MCP_OAUTH_GATEWAY_REDIS_URL): a session opened at one is listed and called at the other (and
back), stays its caller's only, and ends at both; a caller's sessions are counted against its
limit across both; and both show the same health of the targets on `/status` (a target down,
seen by each), what each saw added up."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from federation_support import AUDIENCE, ISSUER, Federated, named_server, start_gateway
from mcp_oauth_gateway.proxy.federation.session import MAX_SESSIONS_PER_OWNER
from support import claims_for, free_port, mint, new_key, wait_until

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}
ACCEPT = "application/json, text/event-stream"


# Each replica's admin listener (`/status`, `/metrics`), by its MCP URL.
ADMIN: dict[str, str] = {}


@pytest.fixture(scope="module")
def replicas(
    logs: Path, tmp_path_factory: pytest.TempPathFactory, redis_url: str
) -> Iterator[tuple[Federated, list[str]]]:
    ports = {"a": free_port(), "b": free_port()}
    processes = {name: named_server(name, port, logs) for name, port in ports.items()}
    # A target nothing listens on: down at every replica.
    targets = {**ports, "gone": free_port()}
    key = new_key("federation-replicas-key")
    gateways, urls = [], []
    try:
        for replica in ("one", "two"):
            port, admin = free_port(), free_port()
            directory = tmp_path_factory.mktemp(f"federation-{replica}")
            env = {"MCP_OAUTH_GATEWAY_REDIS_URL": redis_url}
            args = ("--admin-port", str(admin))
            gateways.append(start_gateway(directory, logs, port, targets, key, env=env, args=args))
            urls.append(f"http://127.0.0.1:{port}/mcp")
            ADMIN[urls[-1]] = f"http://127.0.0.1:{admin}"
        yield Federated(urls[0], key, logs, ports, processes), urls
    finally:
        for process in [*gateways, *processes.values()]:
            process.stop()


def post(url: str, token: str, message: dict, session: str | None = None) -> httpx.Response:
    headers = {"Authorization": f"Bearer {token}", "Accept": ACCEPT}
    if session is not None:
        headers["Mcp-Session-Id"] = session
    return httpx.post(url, json=message, headers=headers, timeout=30)


def rpc(method: str, request_id: int, **params: object) -> dict:
    return {"jsonrpc": "2.0", "id": request_id, "method": method, "params": params}


def text_of(response: httpx.Response) -> str:
    """The text a tool call answered, from a JSON answer or an event stream."""
    if response.headers["content-type"].startswith("text/event-stream"):
        data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
        message = next(json.loads(d) for d in data if '"result"' in d)
    else:
        message = response.json()
    return str(message["result"]["content"][0]["text"])


def opened(url: str, token: str) -> str:
    response = post(url, token, INIT)
    assert response.status_code == 200, response.text
    assert "mcp-session-id" in response.headers, response.text
    session = response.headers["mcp-session-id"]
    initialized = {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert post(url, token, initialized, session).status_code == 202
    return session


def test_a_session_opened_at_one_replica_is_listed_and_called_at_the_other(replicas):
    stack, (one, two) = replicas
    token = stack.token("admin")
    session = opened(one, token)
    listed = post(two, token, rpc("tools/list", 2), session)
    assert listed.status_code == 200, listed.text
    names = sorted(tool["name"] for tool in listed.json()["result"]["tools"])
    assert names == ["a_add", "a_count", "a_whoami", "b_add", "b_count", "b_whoami"]
    called = post(two, token, rpc("tools/call", 3, name="b_whoami", arguments={}), session)
    assert called.status_code == 200, called.text
    assert text_of(called) == "b"
    added = rpc("tools/call", 4, name="a_add", arguments={"a": 2, "b": 3})
    again = post(one, token, added, session)
    assert again.status_code == 200
    assert text_of(again) == "5"


def test_another_caller_is_refused_at_both_and_an_ended_session_is_gone_at_both(replicas):
    stack, (one, two) = replicas
    token = stack.token("admin")
    session = opened(one, token)
    mallory = stack.token("admin", sub="mallory")
    for url in (one, two):
        assert post(url, mallory, rpc("tools/list", 2), session).status_code == 404
    ended = httpx.delete(
        two, headers={"Authorization": f"Bearer {token}", "Mcp-Session-Id": session}, timeout=30
    )
    assert ended.status_code == 204
    for url in (one, two):
        assert post(url, token, rpc("tools/list", 3), session).status_code == 404


def test_callers_whose_tokens_name_no_subject_do_not_share_a_session(replicas):
    """Tokens without `sub` (a Keycloak client without the `basic` scope issues them) name no
    one: a session opened with one is that token's alone, at either replica, not every such
    caller's of the issuer."""
    stack, (one, two) = replicas

    def subjectless(group: str) -> str:
        claims = claims_for(ISSUER, AUDIENCE, groups=["admin", group])
        del claims["sub"]
        return mint(stack.key, claims)

    token, other = subjectless("x"), subjectless("y")
    session = opened(one, token)
    for url in (one, two):
        assert post(url, other, rpc("tools/list", 2), session).status_code == 404
        assert post(url, token, rpc("tools/list", 3), session).status_code == 200


def test_a_callers_sessions_are_counted_against_its_limit_across_both_replicas(replicas):
    """Opened alternately at both, a caller's sessions past its limit push out its first one at
    both (each replica holds fewer than the limit itself)."""
    stack, urls = replicas
    token = stack.token("admin", sub="counted")
    first = opened(urls[0], token)
    sessions = [opened(urls[i % 2], token) for i in range(1, MAX_SESSIONS_PER_OWNER + 1)]
    for url in urls:
        assert post(url, token, rpc("tools/list", 2), first).status_code == 404
        assert post(url, token, rpc("tools/list", 3), sessions[0]).status_code == 200
    # Another caller's sessions were not pushed out by this one's.
    other = stack.token("admin", sub="not-counted")
    kept = opened(urls[1], other)
    opened(urls[0], token)
    assert post(urls[0], other, rpc("tools/list", 4), kept).status_code == 200


def federation_status(url: str) -> dict:
    response = httpx.get(f"{ADMIN[url]}/status", timeout=30)
    assert response.status_code == 200, response.text
    status: dict = response.json()["federation"]["default/mcp"]["0"]["targets"]
    return status


def own_failures(url: str, target: str) -> int:
    """The replica's own count of `target`'s failures (its metrics)."""
    text = httpx.get(f"{ADMIN[url]}/metrics", timeout=30).text
    pattern = (
        rf'mcp_gateway_federation_target_failures_total{{[^}}]*target="{target}"[^}}]*}} (\S+)'
    )
    return sum(int(float(n)) for n in re.findall(pattern, text))


def test_both_replicas_show_the_same_health_what_each_saw_added_up(replicas):
    stack, urls = replicas
    token = stack.token("admin")
    opened(urls[0], token)
    opened(urls[1], token)
    opened(urls[1], token)

    def same() -> bool:
        one, two = (federation_status(url) for url in urls)
        return one == two

    wait_until(same, what="the same targets' health at both replicas")
    status = federation_status(urls[0])
    gone = status["gone"]
    assert gone["up"] is False
    assert gone["lastError"] == "it is unreachable"
    counted = sum(own_failures(url, "gone") for url in urls)
    assert own_failures(urls[0], "gone") < counted
    wait_until(
        lambda: federation_status(urls[1])["gone"]["failures"] == {"unreachable": counted},
        what="both replicas' failures of the target added up",
    )
    assert status["a"]["up"] is True
    assert status["a"]["failures"] == {}
