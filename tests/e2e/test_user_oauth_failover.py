"""Users' upstream grants on a Redis Sentinel set whose primary dies (issue 37), with real parts:
the gateway with `userOAuth` and `--user-token-store redis+sentinel://…` (a primary, two
replicas, three sentinels), FastMCP behind oidc-provider, the Python `mcp` client and a browser.
A user told "connected" is never asked to connect again because a failover lost the grant, and
while the store fails over the gateway answers 503, never a call without the user's token."""

from __future__ import annotations

from collections.abc import Iterator

import httpx
import pytest
from mcp import MCPError

from redis_ha_support import SentinelSet, sentinel_set
from support import INITIALIZE, free_port, mcp_headers
from user_oauth_gateway_support import callback_url, new_key_line, route_idp, write_key_file
from user_oauth_lifecycle_support import Evidence, Rig, connect, whoami

USERS = {"keeper-a": "alice", "keeper-b": "bob"}
ASKED = -32042


@pytest.fixture
def sentinels(logs, tmp_path) -> Iterator[SentinelSet]:
    with sentinel_set(logs, tmp_path / "redis", replicas=2) as running:
        yield running


async def test_a_connected_user_is_not_asked_again_after_the_store_s_primary_dies(
    logs, tmp_path_factory, idp_key, upstreams, sentinels
):
    port = free_port()
    upstream = upstreams(redirect_uris=[callback_url(port)])
    directory = tmp_path_factory.mktemp("failover-rig")
    with route_idp(logs, idp_key[1], port) as idp:
        rig = Rig(logs, directory, idp_key, upstream, port, idp, sentinels.url, Evidence())
        key_file = write_key_file(directory / "user-token.key", new_key_line())
        with rig.start(key_file) as gateway:
            for sub, upstream_user in USERS.items():
                await connect(gateway, sub, upstream_user)
            # Every grant was acknowledged by a replica before "connected" was shown.
            sentinels.primary.popen.kill()
            refusals: list[httpx.Response] = []
            for sub, upstream_user in USERS.items():
                me = await _answered(gateway, sub, refusals)
                assert me["sub"] == gateway.upstream.auth.subject(upstream_user)
    assert len(upstream.auth.grants()) == len(USERS), "a user was asked to connect again"
    # What a client met meanwhile: the gateway's 503, clearly, naming neither Redis nor its
    # password (the SDK reports it as -32603; the raw answer is looked at). The sentinels wait a
    # second before they even call the primary down: the first calls meet its absence.
    assert refusals, "no call met the failover"
    for answer in refusals:
        assert answer.status_code == 503, answer.text
        assert answer.headers["retry-after"].isdigit()
        assert answer.json()["error"] == "temporarily_unavailable"
        assert "server-pw" not in answer.text
        assert "127.0.0.1" not in answer.text


async def _answered(gateway, sub: str, refusals: list[httpx.Response]) -> dict:
    """`sub`'s whoami once the store answers again (each refusal meanwhile kept as the raw
    answer to an initialize); an ask to connect fails the test."""
    for _ in range(600):
        try:
            return await whoami(gateway, sub)
        except MCPError as error:
            if error.error.code == ASKED:
                raise AssertionError(f"{sub} was asked to connect again: {error.error}") from error
        answer = await _initialize(gateway, sub)
        if answer.status_code != 200:
            refusals.append(answer)
    raise AssertionError(f"{sub}'s call never went through again: {refusals[-3:]}")


async def _initialize(gateway, sub: str) -> httpx.Response:
    async with httpx.AsyncClient(timeout=30) as client:
        return await client.post(
            gateway.mcp, json=INITIALIZE, headers=mcp_headers(gateway.token(sub))
        )
