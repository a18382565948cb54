"""The request path's bounded memo: the least recently used entry goes first, a known key is
replaced in place, evictions are counted."""

from __future__ import annotations

from mcp_oauth_gateway.dataplane.bounded import BoundedCache, CacheCounts


def test_the_least_recently_used_entry_is_forgotten_once_full():
    counts = CacheCounts()
    cache: BoundedCache[str, int] = BoundedCache(2, counts)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)  # replaced, not added: nothing is forgotten
    assert (cache.get("a"), cache.get("b"), len(cache), counts.evictions) == (10, 2, 2, 0)
    assert cache.get("a") == 10  # read last: "b" is now the least recently used
    cache.put("c", 3)
    assert "b" not in cache
    assert (cache.get("a"), cache.get("c"), len(cache), counts.evictions) == (10, 3, 2, 1)
    assert cache.get("missing") is None


def test_a_written_entry_counts_as_used():
    cache: BoundedCache[str, int] = BoundedCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 3)
    cache.put("c", 4)
    assert ("a" in cache, "b" in cache) == (True, False)


def test_the_entries_of_live_memos_are_counted_and_dropped_memos_forgotten():
    counts = CacheCounts()
    kept: BoundedCache[str, int] = BoundedCache(5, counts)
    dropped: BoundedCache[str, int] = BoundedCache(5, counts)
    kept.put("a", 1)
    dropped.put("b", 2)
    dropped.put("c", 3)
    assert counts.entries() == 3
    del dropped  # a reload's old pipelines go with their memos
    assert counts.entries() == 1


def test_every_routes_memo_shares_one_process_wide_budget():
    """Issue 29: the bound is the process's, not each route's, so memory does not grow with
    the number of routes."""
    counts = CacheCounts(limit=4)
    routes: list[BoundedCache[str, int]] = [BoundedCache(4, counts) for _ in range(3)]
    for i in range(4):
        routes[0].put(f"a{i}", i)
    assert counts.entries() == 4
    # A full budget: a memo that holds entries gives up its own oldest one ...
    routes[0].put("a4", 4)
    assert ("a0" in routes[0], len(routes[0]), counts.entries()) == (False, 4, 4)
    # ... and an empty one takes the room from the fullest memo.
    routes[1].put("b0", 0)
    assert (len(routes[0]), len(routes[1]), counts.entries()) == (3, 1, 4)
    assert "a1" not in routes[0]
    for i in range(1, 10):
        routes[2].put(f"c{i}", i)
    assert counts.entries() == sum(len(r) for r in routes) == 4
    assert counts.evictions == 11


def test_a_dropped_memo_gives_its_room_back_and_dead_entries_leave_the_budget():
    counts = CacheCounts(limit=3)
    old: BoundedCache[str, int] = BoundedCache(3, counts)
    for key in "abc":
        old.put(key, 0)
    del old  # a reload: the old configuration's memos go
    new: BoundedCache[str, int] = BoundedCache(3, counts)
    new.put("x", 1)
    new.put("y", -1)
    assert (counts.entries(), counts.evictions) == (2, 0)
    new.drop_oldest_if(lambda value: value > 0)  # "x", the oldest, can never serve again
    assert ("x" in new, counts.entries()) == (False, 1)
