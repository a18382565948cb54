"""Each store, SQLite and Redis, held to the same contract: a grant is its owner's only (another
subject, issuer or backend reads nothing, and a sealed grant copied into another user's row does
not open), survives a restart, is listed and removed without its tokens, and is never held in
clear; a record sealed with a key the file no longer holds reads as absent, said once per key;
`reseal_all` moves every record to the first key so an old key can go."""

from __future__ import annotations

import logging

import pytest

from mcp_oauth_gateway.usertokens import (
    GrantStore,
    GrantSummary,
    StoreError,
    new_key_line,
    open_store,
    reseal_all,
)
from support import free_port

from .store_support import (
    ALICE,
    ALICE_LINEAR,
    BOB,
    ISSUER,
    OTHER_ALICE,
    copy_sealed,
    grant,
    held_bytes,
    keys,
)


async def test_a_grant_reads_back_as_its_owner_stored_it(store: GrantStore):
    assert await store.get(ALICE) is None
    await store.put(ALICE, grant(ALICE))
    assert await store.get(ALICE) == grant(ALICE)
    await store.put(ALICE, grant(ALICE, 2, scope=None, expires_at=None))
    assert await store.get(ALICE) == grant(ALICE, 2, scope=None, expires_at=None)


async def test_a_grant_is_its_owners_only(store: GrantStore):
    await store.put(ALICE, grant(ALICE))
    for other in (BOB, OTHER_ALICE, ALICE_LINEAR):
        assert await store.get(other) is None, other
    await store.put(BOB, grant(BOB))
    assert await store.get(ALICE) == grant(ALICE)
    assert await store.get(BOB) == grant(BOB)


async def test_a_sealed_grant_copied_into_another_users_row_does_not_open(
    store: GrantStore, store_url: str, caplog: pytest.LogCaptureFixture
):
    await store.put(ALICE, grant(ALICE))
    await store.put(BOB, grant(BOB))
    copy_sealed(store_url, ALICE, BOB)
    with caplog.at_level(logging.WARNING, "mcp_oauth_gateway.usertokens"):
        assert await store.get(BOB) is None
    assert "subject 'bob'" in caplog.text
    assert "does not open" in caplog.text
    assert "secret" not in caplog.text
    assert await store.get(ALICE) == grant(ALICE)


async def test_grants_survive_a_restart(store_url: str, token_keys):
    first = open_store(store_url, token_keys)
    await first.put(ALICE, grant(ALICE))
    await first.put_pending("connect", "e1", {"verifier": "v"}, 3600)
    await first.close()
    again = open_store(store_url, token_keys)
    try:
        assert await again.get(ALICE) == grant(ALICE)
        assert await again.take_pending("connect", "e1") == {"verifier": "v"}
    finally:
        await again.close()


async def test_a_store_never_holds_a_token_or_pending_value_in_clear(
    store: GrantStore, store_url: str
):
    await store.put(ALICE, grant(ALICE))
    await store.put(BOB, grant(BOB, 2))
    await store.put_pending("connect", "e1", {"verifier": "PKCE-verifier-secret"}, 3600)
    held = held_bytes(store_url)
    # What the store shows in clear is there, so this is the store's data being looked at.
    assert b"alice" in held
    assert b"bob" in held
    for token in (b"AT-alice", b"RT-alice", b"AT-bob", b"RT-bob", b"PKCE-verifier", b"secret"):
        assert token not in held, token


async def test_grants_are_listed_by_user_and_all_without_tokens(store: GrantStore):
    for key in (ALICE_LINEAR, BOB, ALICE, OTHER_ALICE):
        await store.put(key, grant(key))
    kid = keys_id(store)
    mine = await store.list_user(ISSUER, "alice")
    assert mine == [
        GrantSummary(ALICE, "repo read:user", 1_700_000_000.0, None, 1_700_003_601.0, kid),
        GrantSummary(ALICE_LINEAR, "repo read:user", 1_700_000_000.0, None, 1_700_003_601.0, kid),
    ]
    everything = await store.list_all()
    assert [s.key for s in everything] == [ALICE, ALICE_LINEAR, BOB, OTHER_ALICE]
    assert "secret" not in repr(everything)
    assert await store.list_user(ISSUER, "carol") == []


async def test_grants_are_removed_one_a_backend_or_all_of_a_user(store: GrantStore):
    for key in (ALICE, ALICE_LINEAR, BOB, OTHER_ALICE):
        await store.put(key, grant(key))
    assert await store.delete(ALICE_LINEAR) is True
    assert await store.delete(ALICE_LINEAR) is False
    await store.put(ALICE_LINEAR, grant(ALICE_LINEAR))
    assert await store.delete_user(ISSUER, "alice", "linear") == 1
    assert await store.delete_user(ISSUER, "alice", "linear") == 0
    await store.put(ALICE_LINEAR, grant(ALICE_LINEAR))
    assert await store.delete_user(ISSUER, "alice") == 2
    assert await store.delete_user(ISSUER, "alice") == 0
    assert await store.get(ALICE) is None
    assert await store.list_user(ISSUER, "alice") == []
    assert [s.key for s in await store.list_all()] == [BOB, OTHER_ALICE]


async def test_a_record_sealed_with_a_key_no_longer_held_reads_as_absent_said_once(
    store_url: str, token_keys, caplog: pytest.LogCaptureFixture
):
    first = open_store(store_url, token_keys)
    await first.put(ALICE, grant(ALICE))
    await first.put(BOB, grant(BOB))
    await first.put_pending("connect", "e1", {"verifier": "v"}, 3600)
    await first.close()
    other = open_store(store_url, keys(new_key_line()))
    try:
        with caplog.at_level(logging.WARNING, "mcp_oauth_gateway.usertokens"):
            assert await other.get(ALICE) is None
            assert await other.get(BOB) is None
            assert await other.get(ALICE) is None
            assert await other.get_pending("connect", "e1") is None
        lines = [r.getMessage() for r in caplog.records]
        assert len(lines) == 1, lines
        assert token_keys.sealing_id in lines[0]
        assert "secret" not in caplog.text
        # The operator still sees them, with the id of the key they need.
        listed = await other.list_all()
        assert {s.key_id for s in listed} == {token_keys.sealing_id}
    finally:
        await other.close()


async def test_reseal_moves_every_record_to_the_first_key(store_url: str):
    old, new = new_key_line(), new_key_line()
    before = open_store(store_url, keys(old))
    for key in (ALICE, BOB):
        await before.put(key, grant(key))
    await before.put_pending("connect", "e1", {"verifier": "v"}, 3600)
    await before.close()
    rotating = open_store(store_url, keys(new, old))
    try:
        await rotating.put(ALICE_LINEAR, grant(ALICE_LINEAR))
        assert await rotating.get(ALICE) == grant(ALICE), "the old key still opens"
        assert await reseal_all(rotating) == 2
        assert await reseal_all(rotating) == 0
        assert {s.key_id for s in await rotating.list_all()} == {keys(new).sealing_id}
    finally:
        await rotating.close()
    after = open_store(store_url, keys(new))
    try:
        for key in (ALICE, BOB, ALICE_LINEAR):
            assert await after.get(key) == grant(key)
        assert await after.take_pending("connect", "e1") == {"verifier": "v"}
    finally:
        await after.close()


async def test_reseal_leaves_what_no_key_opens(store_url: str):
    lost, new = new_key_line(), new_key_line()
    before = open_store(store_url, keys(lost))
    await before.put(ALICE, grant(ALICE))
    await before.close()
    after = open_store(store_url, keys(new))
    try:
        await after.put(BOB, grant(BOB))
        assert await reseal_all(after) == 0
        assert {s.key.subject: s.key_id for s in await after.list_all()} == {
            "alice": keys(lost).sealing_id,
            "bob": keys(new).sealing_id,
        }
    finally:
        await after.close()


async def test_a_store_that_cannot_be_reached_says_which(token_keys):
    port = free_port()
    url = f"redis://:hunter2@127.0.0.1:{port}/0"
    store = open_store(url, token_keys)
    try:
        with pytest.raises(StoreError) as raised:
            await store.get(ALICE)
    finally:
        await store.close()
    message = str(raised.value)
    assert f"user token store redis://***@127.0.0.1:{port}/0" in message
    assert "hunter2" not in message


def keys_id(store: GrantStore) -> str:
    return store._sealer.keys.sealing_id  # type: ignore[attr-defined]
