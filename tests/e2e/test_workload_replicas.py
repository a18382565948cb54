"""Workload identity across replicas sharing the Broker's Redis (a real redis-server): an
assertion exchanged at one replica is a replay at every other, also when they race; and a token
one replica issued verifies at another that never issued one (the key is derived from the
store's secret, the same on every replica). Each replica is a whole gateway in this process with
its own process state and its own connection to Redis, as separate processes have."""

from __future__ import annotations

import asyncio
import uuid

from mcp_oauth_gateway.broker.binding import route_key
from support import wait_until_async
from unit.broker.workload_support import (
    RESOURCE,
    call,
    exchange,
    gateway,
    policy_yaml,
    sa_claims,
    sa_token,
)


def replicas(tmp_path, redis_url: str, count: int = 2) -> list:
    """`count` gateways with the policy's Broker state in `redis_url`."""
    out = []
    for i in range(count):
        directory = tmp_path / f"replica-{i}"
        directory.mkdir()
        app, _ = gateway(directory, policy_yaml(redis_url=redis_url))
        out.append(app)
    return out


async def test_an_assertion_used_at_one_replica_is_a_replay_at_another(redis_url, tmp_path):
    first, second = replicas(tmp_path, redis_url)
    assertion = sa_token(sa_claims(jti=uuid.uuid4().hex))
    assert (await exchange(first, assertion)).status == 200
    again = await exchange(second, assertion)
    assert again.status == 400, again.body
    assert again.json()["error"] == "invalid_grant"
    assert "used already" in again.json()["error_description"]


async def test_replicas_racing_on_one_assertion_issue_one_token(redis_url, tmp_path):
    apps = replicas(tmp_path, redis_url, count=4)
    # No jti (remembered by its signed part): a claim of its own keeps it unlike other runs'.
    assertion = sa_token(sa_claims(jti=None, run=uuid.uuid4().hex))
    answers = await asyncio.gather(*(exchange(app, assertion) for app in apps * 2))
    assert sorted(a.status for a in answers) == [200] + [400] * 7


async def test_a_token_issued_at_one_replica_works_at_another(redis_url, tmp_path):
    first, second = replicas(tmp_path, redis_url)
    issued = await exchange(first, sa_token(sa_claims(jti=uuid.uuid4().hex)))
    assert issued.status == 200, issued.body
    # The second never issued a token: it derives the same key from the shared secret, once
    # it has read that secret (until then such tokens are answered 503 with Retry-After).
    keys = second.process_state.workload_keys(redis_url, route_key("default/auth", RESOURCE))
    await wait_until_async(lambda: keys.available, what="the second replica's key")
    reached = await call(second, issued.json()["access_token"])
    assert reached.status == 200, reached.body
