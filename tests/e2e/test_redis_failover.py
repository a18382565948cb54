"""Redis fails under steady traffic through gateway processes (issue 37). Two Broker-mode
replicas share a real Sentinel set (a primary, two replicas, three sentinels) behind one public
address; users sign in, call a tool with the `mcp` SDK, rotate, race and revoke refresh tokens
on both while the primary is killed (SIGKILL), hung (SIGSTOP, then SIGCONT), or one gateway's
network to Redis is cut. Afterwards nothing a client was told happened is lost, nothing refused
is let through, every refusal was a clear 503, and both replicas serve again. Also: a Redis
Cluster behind two replicas, and a rate-limited route across a failover. Tool calls need no
Redis on a Broker route: every one of them must succeed throughout.

The partition is a loopback TCP link (`Link`) between one gateway and Redis: the gateway is
given the primary through the link as a single-server URL (`acks=1`), as behind a TCP balancer
in front of the primary; a Sentinel URL would not do, since the sentinels hand the gateway the
servers' own addresses, around any link."""

from __future__ import annotations

import asyncio
import os
import signal
import time
from collections.abc import Iterator
from contextlib import ExitStack

import httpx
import pytest

from balancer_support import Limited, driving, until
from failover_traffic_support import Traffic
from mcp_oauth_gateway.broker.refresh import digest
from mcp_oauth_gateway.broker.store import PREFIX
from redis_failover_support import (
    LIMITED_REQUESTS,
    Gateway,
    Servers,
    Upstreams,
    current_primary,
    down_after,
    failover_timeout,
    gateway,
    gateways,
    identity_provider,
    link,
    replicas_online,
    replicate_through,
    role,
    settled_primary,
    stored,
    wait_for_new_primary,
)
from redis_ha_support import (
    CLUSTER_PASSWORD,
    SENTINEL_PASSWORD,
    SERVER_PASSWORD,
    SentinelSet,
    redis_cluster,
    sentinel_set,
)
from support import free_port, wait_until


@pytest.fixture(scope="module")
def sentinels(logs, tmp_path_factory) -> Iterator[SentinelSet]:
    with sentinel_set(logs, tmp_path_factory.mktemp("sentinel"), replicas=2) as running:
        yield running


@pytest.fixture(scope="module")
def servers(sentinels, logs, tmp_path_factory) -> Iterator[Servers]:
    running = Servers(sentinels, logs, tmp_path_factory.mktemp("restarted"))
    try:
        yield running
    finally:
        running.stop()


@pytest.fixture(scope="module")
def upstreams(logs, idp_key, backend) -> Iterator[Upstreams]:
    public = f"http://127.0.0.1:{free_port()}"  # the balancer's: nothing listens there
    with identity_provider(logs, idp_key[1], f"{public}/mcp") as (idp, port):
        yield Upstreams(idp, port, int(backend.rsplit(":", 1)[1]), public, idp_key[0])


@pytest.fixture(scope="module")
def pair(sentinels, upstreams, logs, tmp_path_factory) -> Iterator[dict[str, Gateway]]:
    directory = tmp_path_factory.mktemp("pair")
    with gateways(("a", "b"), upstreams, sentinels.url, directory, logs) as running:
        yield running


@pytest.fixture(scope="module")
def hidden(sentinels, servers) -> tuple[str, ...]:
    """What no answer may show: the passwords and the Redis servers' addresses."""
    ports = [*servers.by_port, *sentinels.sentinel_ports]
    return (SERVER_PASSWORD, SENTINEL_PASSWORD, *(f"127.0.0.1:{p}" for p in ports))


def failures(gateway: Gateway) -> float:
    """How many exchanges with Redis the gateway has seen fail (its metrics)."""
    return sum(gateway.metric("mcp_gateway_redis_failures_total"))


async def checked(
    traffic: Traffic, limited: Limited | None, hidden: tuple[str, ...], cycles: int = 3
) -> None:
    """Everything the drivers recorded, and the tokens checked once Redis is back."""
    seen = f"{traffic.cycles} cycles, answers: {traffic.summary()}"
    assert traffic.cycles >= cycles, f"the traffic hardly ran: {seen}"
    assert traffic.problems == [], "\n".join([seen, *traffic.problems])
    breaches = await traffic.verify()
    assert breaches == [], "\n".join([seen, *breaches])
    assert traffic.unclear(hidden) == [], "\n".join([seen, *traffic.unclear(hidden)])
    if limited is not None:
        assert limited.unclear(hidden) == []
        assert {a.status for a in limited.answers} >= {200, 429}


def shows_no_password(replica: Gateway, passwords: tuple[str, ...]) -> None:
    """Its admin listener's pages name no Redis password, whatever failed."""
    for page in ("status", "readyz", "metrics", "config"):
        text = httpx.get(f"{replica.admin}/{page}", timeout=10).text
        assert not [p for p in passwords if p in text], f"/{page} shows a password"


async def limit_holds(limited: Limited) -> None:
    """A new caller's bucket is shared by the replicas again: its calls go through until it
    is empty, then come back 429."""
    names = sorted(limited.replicas)
    subject = f"after-{time.monotonic_ns()}"
    statuses = [
        (await limited.call(names[n % 2], subject)).status for n in range(LIMITED_REQUESTS + 1)
    ]
    assert statuses == [200] * LIMITED_REQUESTS + [429]


async def test_the_primary_killed_under_traffic_loses_nothing_acknowledged(
    sentinels, servers, pair, upstreams, hidden
):
    # SIGKILL of the primary under sign-ins, refreshes, races, revocations, tool calls and
    # rate-limited calls on both replicas; one refresh caught between Redis and the provider.
    limited = Limited(pair, upstreams.token)
    old = current_primary(sentinels)
    async with Traffic(upstreams.public, pair) as traffic:
        midway = await traffic.signed_in()
        try:
            async with driving(traffic, limited):
                await until(lambda: traffic.cycles >= 2, 60, "steady traffic")
                before = {name: failures(g) for name, g in pair.items()}
                # The worst moment: a refresh the gateway has taken from Redis and asked the
                # provider about (held there) when the primary dies.
                os.kill(upstreams.idp.popen.pid, signal.SIGSTOP)
                try:
                    refreshing = asyncio.create_task(traffic.refresh_once(midway, "a"))
                    key = f"{PREFIX}refresh:{digest(midway.refresh)}"
                    await asyncio.to_thread(
                        wait_until, lambda: not stored(old, key), 30, "a to take the token"
                    )
                    servers.by_port[old].popen.kill()
                    killed = time.monotonic()
                finally:
                    os.kill(upstreams.idp.popen.pid, signal.SIGCONT)
                answer = await refreshing
                assert answer is not None
                assert answer.status_code in (200, 503), answer.text
                await asyncio.to_thread(wait_for_new_primary, sentinels, old)
                await until(lambda: traffic.served(killed), 90, "both replicas to issue tokens")
                await until(lambda: traffic.cycles >= 6, 60, "more traffic on the new primary")
        finally:
            # Back as a replica of the new primary, for the tests after this one.
            servers.restart_as_replica(old, current_primary(sentinels))
        felt = any(a.status == 503 for a in traffic.since(killed))
        assert felt or any(failures(g) > before[n] for n, g in pair.items()), "not felt"
        await checked(traffic, limited, hidden)
    await limit_holds(limited)


async def test_a_primary_killed_while_its_replicas_lag_loses_nothing_acknowledged(
    sentinels, servers, pair, upstreams, hidden
):
    # What acknowledgement is for: the replicas fall behind (their links to the primary cut),
    # the primary alone takes a rotation and a revocation, dies, and a replica that lacks
    # them is promoted. Told done, they must not be lost; refused, the tokens stand as they were.
    await asyncio.to_thread(wait_until, lambda: in_sync(sentinels) == 2, 60, "two replicas")
    old = current_primary(sentinels)
    followers = [port for port, p in servers.by_port.items() if port != old]
    async with Traffic(upstreams.public, pair) as traffic:
        rotating, revoking = await traffic.signed_in(), await traffic.signed_in()
        failover_timeout(sentinels, 600_000)  # the sentinels leave the replicas on the links
        try:
            with ExitStack() as links:
                cables = [links.enter_context(link(old)) for _ in followers]
                for follower, cable in zip(followers, cables, strict=True):
                    replicate_through(follower, cable.port)
                await asyncio.to_thread(
                    wait_until, lambda: replicas_online(old) == 2, 60, "replicas on the links"
                )
                for cable in cables:
                    cable.cut()
                rotated, revoked = await asyncio.gather(
                    traffic.refresh_once(rotating, "a"), traffic.revoke_once(revoking, "b")
                )
                servers.by_port[old].popen.kill()
            # The links closed: what the replicas were still to get is gone.
            await asyncio.to_thread(wait_for_new_primary, sentinels, old)
        finally:
            failover_timeout(sentinels, 5000)
            servers.restart_as_replica(old, current_primary(sentinels))
        await checked(traffic, None, hidden, cycles=0)  # no driver: the two users above
    # No replica had them: refused, not reported done.
    assert [_status(rotated), _status(revoked[1])] == [503, 503]


def _status(response: httpx.Response | None) -> int | None:
    return None if response is None else response.status_code


async def test_a_primary_hung_shorter_than_the_sentinels_wait_loses_nothing(
    sentinels, servers, pair, upstreams, hidden
):
    # Sentinels that wait longer than the gateway's socket timeout: the primary stalls, the
    # gateways give up on it, and it comes back still primary with what they sent meanwhile.
    await asyncio.to_thread(wait_until, lambda: in_sync(sentinels) == 2, 60, "replicas")
    primary = current_primary(sentinels)
    pid = servers.by_port[primary].popen.pid
    async with Traffic(upstreams.public, pair) as traffic:
        stranded = await traffic.signed_in()
        async with driving(traffic):
            await until(lambda: traffic.cycles >= 2, 60, "steady traffic")
            down_after(sentinels, 600_000)
            os.kill(pid, signal.SIGSTOP)
            try:
                # Sent while it hangs: refused once the gateway gives up on Redis.
                refused = await traffic.refresh_once(stranded, "a")
                assert refused is not None
                assert refused.status_code == 503, refused.text
                for replica in pair.values():
                    await asyncio.to_thread(
                        wait_until, lambda r=replica: r.redis_up() == [False], 30, "Redis down"
                    )
                    readiness = replica.readiness()
                    # Not a reason to leave the balancer: every replica shares the Redis.
                    assert readiness.status_code == 200
                    assert readiness.json()["degraded"]
                    assert replica.metric("mcp_gateway_redis_up") == [0.0]
                    shows_no_password(replica, (SERVER_PASSWORD, SENTINEL_PASSWORD))
            finally:
                os.kill(pid, signal.SIGCONT)
                down_after(sentinels, 1000)
            back = time.monotonic()
            for replica in pair.values():
                await asyncio.to_thread(
                    wait_until, lambda r=replica: r.redis_up() == [True], 30, "Redis up again"
                )
                assert replica.readiness().json()["degraded"] == []
                assert replica.metric("mcp_gateway_redis_up") == [1.0]
            await until(lambda: traffic.served(back), 90, "both replicas to issue tokens again")
        assert current_primary(sentinels) == primary, "the sentinels were to wait"
        await checked(traffic, None, hidden)


async def test_the_primary_hung_then_back_loses_nothing_acknowledged(
    sentinels, servers, pair, upstreams, hidden
):
    await asyncio.to_thread(wait_until, lambda: in_sync(sentinels) == 2, 60, "replicas")
    limited = Limited(pair, upstreams.token)
    old = current_primary(sentinels)
    pid = servers.by_port[old].popen.pid
    async with Traffic(upstreams.public, pair) as traffic:
        async with driving(traffic, limited):
            await until(lambda: traffic.cycles >= 2, 60, "steady traffic")
            before = {name: failures(g) for name, g in pair.items()}
            os.kill(pid, signal.SIGSTOP)
            try:
                hung = time.monotonic()
                await asyncio.to_thread(wait_for_new_primary, sentinels, old)
                await until(lambda: traffic.served(hung), 90, "both replicas to issue tokens")
                # Each gateway felt the hang (its health check alone would).
                await asyncio.to_thread(
                    wait_until,
                    lambda: all(failures(g) > before[n] for n, g in pair.items()),
                    30,
                    "each gateway to count the failures",
                )
            finally:
                os.kill(pid, signal.SIGCONT)
            back = time.monotonic()
            await asyncio.to_thread(
                wait_until, lambda: role(old) == "slave", 60, "the old primary to become a replica"
            )
            await until(lambda: traffic.served(back), 90, "both replicas to issue tokens again")
        await checked(traffic, limited, hidden)
    await limit_holds(limited)


def in_sync(sentinels: SentinelSet) -> int:
    """How many replicas the primary has in sync (none while the set is still settling)."""
    primary = settled_primary(sentinels)
    return 0 if primary is None else replicas_online(primary)


async def test_a_gateway_cut_off_from_redis_refuses_clearly_and_loses_nothing(
    sentinels, pair, upstreams, hidden, logs, tmp_path
):
    primary = current_primary(sentinels)
    with link(primary) as cable:
        url = f"redis://:{SERVER_PASSWORD}@127.0.0.1:{cable.port}/0?acks=1"
        with gateway("c", upstreams, url, url, tmp_path / "c", logs) as cut_off:
            replicas = {"b": pair["b"], "c": cut_off}
            hidden = (*hidden, f"127.0.0.1:{cable.port}")
            async with Traffic(upstreams.public, replicas) as traffic:
                stranded, elsewhere = await traffic.signed_in(), await traffic.signed_in()
                async with driving(traffic):
                    await until(lambda: traffic.cycles >= 2, 60, "steady traffic")
                    cable.cut()
                    # Sent as the network goes: c refuses, b (still on Redis) serves.
                    refused, served = await asyncio.gather(
                        traffic.refresh_once(stranded, "c"), traffic.refresh_once(elsewhere, "b")
                    )
                    assert [_status(refused), _status(served)] == [503, 200]
                    await asyncio.to_thread(
                        wait_until, lambda: cut_off.redis_up() == [False], 30, "c to see it down"
                    )
                    readiness = cut_off.readiness()
                    assert readiness.status_code == 200  # every replica shares the Redis
                    assert readiness.json()["degraded"]
                    assert cut_off.metric("mcp_gateway_redis_up") == [0.0]
                    assert pair["b"].metric("mcp_gateway_redis_up") == [1.0]
                    shows_no_password(cut_off, (SERVER_PASSWORD,))
                    # Healed soon: a refresh under way at c when the link was cut (between
                    # Redis and the provider) is still trying to keep its user's sign-in.
                    cable.heal()
                    healed = time.monotonic()
                    await asyncio.to_thread(
                        wait_until, lambda: cut_off.redis_up() == [True], 30, "c to see it up"
                    )
                    assert cut_off.readiness().json()["degraded"] == []
                    assert cut_off.metric("mcp_gateway_redis_up") == [1.0]
                    await until(lambda: traffic.served(healed), 90, "c to issue tokens again")
                # Told to try again: it does, and its sign-in stands.
                assert await traffic.rotate(stranded), traffic.problems
                await checked(traffic, None, hidden)


async def test_two_gateways_share_sign_ins_and_refreshes_on_a_redis_cluster(
    upstreams, logs, tmp_path
):
    with (
        redis_cluster(logs, tmp_path / "cluster") as cluster,
        gateways(("a", "b"), upstreams, cluster.url, tmp_path, logs) as replicas,
    ):
        async with Traffic(upstreams.public, replicas) as traffic:
            async with driving(traffic):
                await until(lambda: traffic.cycles >= 6, 90, "sign-ins and refreshes")
            hidden = (CLUSTER_PASSWORD, *(f"127.0.0.1:{p}" for p in cluster.ports))
            await checked(traffic, None, hidden)
        views = [replica.status()["redis"] for replica in replicas.values()]
        assert all(v[0]["kind"] == "cluster" and v[0]["up"] for v in views), views
