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
