"""The request path's bounded memo: oldest entries go first, a known key is replaced in place."""

from __future__ import annotations

from mcp_oauth_gateway.dataplane.bounded import BoundedCache


def test_the_oldest_entry_is_forgotten_once_full():
    cache: BoundedCache[str, int] = BoundedCache(2)
    cache.put("a", 1)
    cache.put("b", 2)
    cache.put("a", 10)  # replaced, not added: nothing is forgotten
    assert (cache.get("a"), cache.get("b"), len(cache)) == (10, 2, 2)
    cache.put("c", 3)
    assert "a" not in cache
    assert (cache.get("b"), cache.get("c"), len(cache)) == (2, 3, 2)
    assert cache.get("missing") is None
