"""The store's lock, in each store: held by one holder at a time across store instances and
across processes; given back at the end of the body (an exception too) and only by its holder
(a holder whose lock expired cannot free the next holder's); a holder that crashed never blocks
for longer than its ttl."""

from __future__ import annotations

import asyncio

import pytest

from mcp_oauth_gateway.usertokens import GrantStore, LockTimeout, open_store

from .store_support import lock_holder


async def test_one_holder_at_a_time_across_store_instances(
    store: GrantStore, store_url, token_keys
):
    other = open_store(store_url, token_keys)
    try:
        async with store.lock("refresh:alice", 60):
            with pytest.raises(LockTimeout, match="'refresh:alice' is held by another"):
                async with other.lock("refresh:alice", 60, wait=0):
                    pytest.fail("two holders")
            async with other.lock("refresh:bob", 60, wait=0):
                pass  # another name is another lock
        async with other.lock("refresh:alice", 60, wait=0):
            pass
    finally:
        await other.close()


async def test_a_waiter_gets_the_lock_when_the_holder_gives_it_back(
    store: GrantStore, store_url, token_keys
):
    other = open_store(store_url, token_keys)
    order: list[str] = []
    try:
        async with store.lock("refresh", 60):
            waiter = asyncio.ensure_future(_hold(other, "refresh", order))
            await asyncio.sleep(0)
            order.append("first done")
        await waiter
        assert order == ["first done", "second holds"]
    finally:
        await other.close()


async def _hold(store: GrantStore, name: str, order: list[str]) -> None:
    async with store.lock(name, 60, wait=60):
        order.append("second holds")


async def test_the_lock_is_given_back_when_the_body_raises(store: GrantStore):
    with pytest.raises(RuntimeError, match="refresh failed"):
        async with store.lock("refresh", 60):
            raise RuntimeError("refresh failed")
    async with store.lock("refresh", 60, wait=0):
        pass


async def test_a_holder_whose_lock_expired_cannot_free_the_next_holders(
    store: GrantStore, store_url, token_keys
):
    second, third = open_store(store_url, token_keys), open_store(store_url, token_keys)
    try:
        async with store.lock("refresh", 0.05):
            # Waits until the first holder's ttl ran out, then holds it.
            taken = asyncio.Event()
            release = asyncio.Event()

            async def next_holder() -> None:
                async with second.lock("refresh", 60, wait=60):
                    taken.set()
                    await release.wait()

            task = asyncio.ensure_future(next_holder())
            await taken.wait()
        # The first holder's exit gave back nothing of the second's.
        with pytest.raises(LockTimeout):
            async with third.lock("refresh", 60, wait=0):
                pytest.fail("the expired holder freed the next holder's lock")
        release.set()
        await task
    finally:
        await second.close()
        await third.close()


async def test_one_holder_at_a_time_across_processes(store: GrantStore, store_url, key_file):
    holder = lock_holder(store_url, key_file, "refresh:alice", 600, crash=False)
    try:
        assert holder.stdout is not None
        assert holder.stdin is not None
        assert holder.stdout.readline().strip() == "held"
        assert holder.stdout.readline().strip() == "excluded"
        with pytest.raises(LockTimeout):
            async with store.lock("refresh:alice", 60, wait=0):
                pytest.fail("held in two processes at once")
        holder.stdin.write("give it back\n")
        holder.stdin.flush()
        assert holder.stdout.readline().strip() == "released"
        async with store.lock("refresh:alice", 60, wait=0):
            pass
    finally:
        holder.kill()
        holder.communicate()


async def test_a_crashed_holders_lock_expires(store: GrantStore, store_url, key_file):
    holder = lock_holder(store_url, key_file, "refresh:alice", 1.0, crash=True)
    try:
        out, _ = holder.communicate(timeout=60)
    finally:
        holder.kill()
    assert out.split() == ["held", "excluded"], out
    assert holder.returncode == 0
    # Never given back: taken once its ttl ran out (LockTimeout after 60 s otherwise).
    async with store.lock("refresh:alice", 60, wait=60):
        pass


@pytest.mark.parametrize("ttl", [0, -1, float("nan")])
async def test_a_lock_ttl_is_a_positive_number(store: GrantStore, ttl):
    with pytest.raises(ValueError, match="ttl is a positive number of seconds"):
        async with store.lock("refresh", ttl):
            pass
