"""Pending values (a connect flow's state, its PKCE verifier) in each store: sealed, kept for
their time only, and taken once: of many takers racing over several store instances (several
replicas' worth), exactly one gets the value. An id from a URL that could never have been
stored reads as absent; a value opens only under its own kind and id."""

from __future__ import annotations

import asyncio

import pytest

from mcp_oauth_gateway.usertokens import GrantStore, open_store

from .store_support import eventually


async def test_a_pending_value_is_read_until_taken_once(store: GrantStore):
    value = {"verifier": "v", "subject": "alice", "n": 3}
    await store.put_pending("connect", "e-1", value, 600)
    assert await store.get_pending("connect", "e-1") == value
    assert await store.get_pending("connect", "e-1") == value
    assert await store.take_pending("connect", "e-1") == value
    assert await store.take_pending("connect", "e-1") is None
    assert await store.get_pending("connect", "e-1") is None


async def test_a_pending_value_is_found_under_its_own_kind_and_id_only(store: GrantStore):
    await store.put_pending("connect", "a:b", {"n": 1}, 600)
    await store.put_pending("state", "a:b", {"n": 2}, 600)
    await store.put_pending("connect", "a", {"n": 3}, 600)
    assert await store.get_pending("connect", "a:b") == {"n": 1}
    assert await store.get_pending("state", "a:b") == {"n": 2}
    assert await store.get_pending("connect", "a") == {"n": 3}
    assert await store.take_pending("connect", "b") is None
    assert await store.take_pending("connect", "a:") is None


async def test_an_expired_pending_value_vanishes(store: GrantStore):
    await store.put_pending("connect", "short", {"n": 1}, 0.05)
    await store.put_pending("connect", "long", {"n": 2}, 600)

    async def gone() -> bool:
        return await store.get_pending("connect", "short") is None

    await eventually(gone, "the short-lived value to expire")
    assert await store.take_pending("connect", "short") is None
    assert await store.take_pending("connect", "long") == {"n": 2}


async def test_one_taker_of_many_racing_over_several_stores_gets_the_value(
    store_url: str, token_keys
):
    stores = [open_store(store_url, token_keys) for _ in range(3)]
    try:
        for round_ in range(5):
            await stores[0].put_pending("connect", f"race-{round_}", {"round": round_}, 600)
            takes = [s.take_pending("connect", f"race-{round_}") for s in stores for _ in range(4)]
            got = [value for value in await asyncio.gather(*takes) if value is not None]
            assert got == [{"round": round_}], got
    finally:
        for s in stores:
            await s.close()


@pytest.mark.parametrize("id", ["", "x" * 513, "a\ud800"])
async def test_an_id_that_could_never_be_stored_reads_as_absent(store: GrantStore, id):
    with pytest.raises(ValueError, match="a pending id is 1 to 512 characters"):
        await store.put_pending("connect", id, {"n": 1}, 600)
    assert await store.get_pending("connect", id) is None
    assert await store.take_pending("connect", id) is None


@pytest.mark.parametrize("kind", ["", "Connect", "a:b", "x" * 33])
async def test_a_kind_is_a_lower_case_name(store: GrantStore, kind):
    with pytest.raises(ValueError, match="is not a lower-case name"):
        await store.put_pending(kind, "e", {"n": 1}, 600)
    with pytest.raises(ValueError, match="is not a lower-case name"):
        await store.take_pending(kind, "e")


@pytest.mark.parametrize("ttl", [0, -1, float("nan"), float("inf")])
async def test_a_pending_ttl_is_a_positive_number(store: GrantStore, ttl):
    with pytest.raises(ValueError, match="ttl is a positive number of seconds"):
        await store.put_pending("connect", "e", {"n": 1}, ttl)
