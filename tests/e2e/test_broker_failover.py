"""What a Broker request had claimed when the Redis primary died is given back once a replica is
promoted (issue 37): a refresh token taken for a rotation (the claim acknowledged, so it
survives the failover) is rotated once a replica is promoted, or stands again for the provider's
newest token, so the client's 503 ("nothing was changed, try again") holds and the same token
works after the failover; a code
taken for its redemption is redeemable again. Found by benchmarks/redis_failover.py: before,
the token was given back once, at once, to the dead primary, and the client was signed out."""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import Iterator
from dataclasses import dataclass

import httpx
import pytest
import redis

from broker_flow import BrokerClient
from conftest import CLIENT_ID, use_broker, write_example
from mcp_oauth_gateway.broker import store as broker_store
from mcp_oauth_gateway.broker.refresh import digest
from mcp_oauth_gateway.broker.state import BrokerState, IssuedCode
from mcp_oauth_gateway.broker.store import PREFIX, TAKEN, RedisStore, give_back
from mcp_oauth_gateway.redis_clients import RedisConnection
from redis_ha_support import SERVER_PASSWORD, SentinelSet, sentinel_set
from support import NODE_DIR, Process, free_port, gateway_cmd, node, wait_for_port, wait_until


@dataclass
class Broker:
    gateway: str
    idp: Process


@pytest.fixture
def sentinels(logs, tmp_path) -> Iterator[SentinelSet]:
    # Two replicas: after the primary dies, the one not promoted acknowledges the new one.
    with sentinel_set(logs, tmp_path / "sentinel", replicas=2) as running:
        yield running


@pytest.fixture
def broker(sentinels, logs, tmp_path, idp_key, backend) -> Iterator[Broker]:
    """A Broker gateway on the Sentinel set, and its provider (oidc-provider) as a process."""
    gw_port, idp_port = free_port(), free_port()
    env = {
        "IDP_PORT": str(idp_port),
        "FLAVOUR": "authentik",
        "KEY_FILE": str(idp_key[1]),
        "CLIENT_ID": CLIENT_ID,
        "RESOURCE": f"http://127.0.0.1:{gw_port}/mcp",
        "SLUG": "mcp",
    }
    idp = Process("idp-failover", [node(), str(NODE_DIR / "idp.mjs")], logs, env=env)
    ports = {"8080": gw_port, "9000": idp_port, "8000": backend.rsplit(":", 1)[1]}
    config = use_broker(write_example("provider-b", tmp_path / "gateway", ports))
    gateway = None
    try:
        wait_for_port(idp_port, idp)
        redis_env = {"MCP_OAUTH_GATEWAY_REDIS_URL": sentinels.url}
        gateway = Process("gateway-failover", gateway_cmd(config), logs, env=redis_env)
        wait_for_port(gw_port, gateway)
        wait_until(lambda: registered(gw_port), 60, "the replicas to acknowledge a write")
        yield Broker(f"http://127.0.0.1:{gw_port}", idp)
    finally:
        if gateway is not None:
            gateway.stop()
        idp.stop()


def registered(port: int) -> bool:
    """Whether a registration goes through (its store secret written and acknowledged)."""
    client = BrokerClient(f"http://127.0.0.1:{port}/mcp")
    body = {"client_name": "probe", "redirect_uris": [client.redirect]}
    return httpx.post(client.registration_endpoint, json=body, timeout=10).status_code == 201


def refresh(client: BrokerClient, token: str) -> httpx.Response:
    form = {
        "grant_type": "refresh_token",
        "refresh_token": token,
        "client_id": client.client_id,
        "resource": client.mcp,
    }
    return httpx.post(f"{client.mcp}/oauth/token", data=form, timeout=60)


def untaken(server: redis.Redis, pattern: str) -> list[bytes]:
    """The keys matching `pattern` that hold a value no request has taken."""
    values = [server.get(key) for key in server.scan_iter(pattern)]
    return [v for v in values if isinstance(v, bytes) and not v.startswith(TAKEN)]


async def test_a_refresh_cut_by_the_primary_s_death_leaves_the_client_s_token_working(
    broker, sentinels
):
    client = BrokerClient(f"{broker.gateway}/mcp").register()
    token = (await client.tokens("alice", "x", "openid profile offline_access"))["refresh_token"]
    primary = redis.Redis(port=sentinels.primary_port, password=SERVER_PASSWORD)
    stored = f"{PREFIX}refresh:*:{digest(token)}"
    assert untaken(primary, stored), "the token is in the store"
    # The provider holds the refresh while the gateway has claimed the token (acknowledged by
    # a replica); the primary dies before the rotation is written.
    os.kill(broker.idp.popen.pid, signal.SIGSTOP)
    try:
        # Sent from a thread of its own at once (the waits below block this loop).
        answer = asyncio.get_running_loop().run_in_executor(None, refresh, client, token)
        wait_until(lambda: not untaken(primary, stored), 30, "the token to be claimed")
        sentinels.primary.popen.kill()
    finally:
        os.kill(broker.idp.popen.pid, signal.SIGCONT)
    cut = await answer
    # The store's writes wait (bounded) for the promoted replica: the refresh is done, or
    # refused with 503 and the client's token stands.
    assert cut.status_code in (200, 503), cut.text
    if cut.status_code == 200:
        token = cut.json()["refresh_token"]
    else:
        assert cut.headers["retry-after"].isdigit()
        assert cut.json()["error"] == "temporarily_unavailable"
    # Trying again, as told, once the sentinels have promoted a replica: the token works.
    answers: list[httpx.Response] = []
    wait_until(
        lambda: answers.append(refresh(client, token)) or answers[-1].status_code != 503,
        60,
        "the failover to end",
    )
    assert answers[-1].status_code == 200, answers[-1].text
    assert answers[-1].json()["refresh_token"] != token


async def acknowledging(sentinels: SentinelSet) -> RedisConnection:
    """A connection to the set once its replicas acknowledge writes."""
    connection = RedisConnection(sentinels.url)
    key = f"{PREFIX}probe"
    async with asyncio.timeout(60):
        while not await give_back(lambda: RedisStore(connection).put("probe", key, {}, 60), "-"):
            pass
    return connection


async def test_a_code_claimed_when_the_primary_dies_is_given_back_after_the_promotion(sentinels):
    connection = await acknowledging(sentinels)
    state = BrokerState(RedisStore(connection))
    issued = IssuedCode("client", "http://127.0.0.1:47111/cb", "challenge", {"access_token": "a"})
    await state.put_code("code-1", issued)
    taken = await state.take_code("code-1")
    assert taken is not None  # claimed, and a replica has the claim
    sentinels.primary.popen.kill()
    assert await give_back(lambda: state.put_code("code-1", issued), "a code")
    assert await state.take_code("code-1") == issued
    await connection.close()


async def test_what_cannot_be_given_back_in_time_is_reported_lost(sentinels, monkeypatch):
    connection = await acknowledging(sentinels)
    monkeypatch.setattr(broker_store, "GIVE_BACK_SECONDS", 0.5)
    state = BrokerState(RedisStore(connection))
    issued = IssuedCode("client", "http://127.0.0.1:47111/cb", "challenge", {"access_token": "a"})
    os.kill(sentinels.primary.popen.pid, signal.SIGSTOP)  # hangs longer than the patience
    try:
        assert not await give_back(lambda: state.put_code("code-2", issued), "a code")
    finally:
        os.kill(sentinels.primary.popen.pid, signal.SIGCONT)
    await connection.close()
