"""Rate limits by caller (CEL key), in process and shared by two replicas through a real Redis,
a bucket per issuer and key."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest

from conftest import write_example
from support import (
    Process,
    claims_for,
    free_port,
    gateway_cmd,
    mint,
    second_issuer,
    wait_for_keyset,
    wait_for_port,
)

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


def limited_gateway(
    stack_b,
    tmp_path_factory,
    logs,
    name: str,
    requests: int,
    redis_url: str | None = None,
    edits: tuple[tuple[str, str], ...] = (),
) -> tuple[str, Process]:
    port = free_port()
    config = write_example(
        "provider-b",
        tmp_path_factory.mktemp(name),
        {
            "8080": str(port),
            "9000": stack_b.idp.rsplit(":", 1)[1],
            "8000": stack_b.backend.rsplit(":", 1)[1],
        },
    )
    block = f"    rateLimit:\n      key: 'jwt.sub'\n      requests: {requests}\n      window: 1m\n"
    if redis_url:
        block += f"      redisUrl: {redis_url}\n"
    policy = config / "policy.yaml"
    text = policy.read_text().replace("    authorization:\n", block + "    authorization:\n")
    for before, after in edits:
        assert before in text, before
        text = text.replace(before, after)
    policy.write_text(text)
    gateway = Process(name, gateway_cmd(config), logs)
    wait_for_port(port, gateway)
    base = f"http://127.0.0.1:{port}"
    wait_for_keyset(base, stack_b.token(sub="warm-up"))
    return base, gateway


def call(base: str, token: str) -> httpx.Response:
    return httpx.post(
        f"{base}/mcp",
        json=INIT,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
        },
    )


@pytest.fixture(scope="module")
def local_limit(stack_b, tmp_path_factory, logs) -> Iterator[str]:
    base, gateway = limited_gateway(stack_b, tmp_path_factory, logs, "gateway-ratelimit", 3)
    try:
        yield base
    finally:
        gateway.stop()


def test_caller_over_the_limit_gets_429(local_limit, stack_b):
    alice = stack_b.token(sub="alice-rl")
    assert [call(local_limit, alice).status_code for _ in range(3)] == [200, 200, 200]
    refused = call(local_limit, alice)
    assert refused.status_code == 429
    assert refused.json()["error"] == "rate_limited"
    assert 1 <= int(refused.headers["retry-after"]) <= 60
    # another caller has a bucket of its own
    assert call(local_limit, stack_b.token(sub="carol-rl")).status_code == 200


def test_replicas_share_the_bucket_through_redis(stack_b, tmp_path_factory, logs, redis_url):
    a, gw_a = limited_gateway(stack_b, tmp_path_factory, logs, "gateway-rl-a", 4, redis_url)
    b, gw_b = limited_gateway(stack_b, tmp_path_factory, logs, "gateway-rl-b", 4, redis_url)
    try:
        token = stack_b.token(sub="shared-rl")
        statuses = [
            call(a, token).status_code,
            call(b, token).status_code,
            call(a, token).status_code,
            call(b, token).status_code,
        ]
        assert statuses == [200, 200, 200, 200]
        assert call(a, token).status_code == 429
        assert call(b, token).status_code == 429
    finally:
        gw_a.stop()
        gw_b.stop()


def test_alice_at_two_providers_has_two_buckets_in_redis(
    stack_b, tmp_path_factory, logs, redis_url
):
    """`sub` is unique only within its issuer: alice at one provider never spends the
    allowance of alice at the other, in the bucket every replica shares."""
    issuer, edits = second_issuer(stack_b.idp)
    base, gateway = limited_gateway(
        stack_b, tmp_path_factory, logs, "gateway-rl-issuers", 2, redis_url, edits
    )
    try:
        wait_for_keyset(base, mint(stack_b.key, claims_for(issuer, "mcp-public", sub="warm-up")))
        here = stack_b.token(sub="alice-two-idps")
        other = mint(stack_b.key, claims_for(issuer, "mcp-public", sub="alice-two-idps"))
        assert [call(base, here).status_code for _ in range(3)] == [200, 200, 429]
        assert [call(base, other).status_code for _ in range(3)] == [200, 200, 429]
    finally:
        gateway.stop()
