"""A bounded map for the request path's memos (tokens → claims, decisions, keys, values)."""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class CacheCounts:
    """Hits, misses and evictions of one kind of memo, summed over every route's copy and kept
    across reloads (a reload builds new memos); the live memos, for their size."""

    __slots__ = ("caches", "evictions", "hits", "misses")

    def __init__(self) -> None:
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.caches: weakref.WeakSet[BoundedCache[object, object]] = weakref.WeakSet()

    def entries(self) -> int:
        """The entries the live memos of this kind hold."""
        return sum(len(cache) for cache in list(self.caches))


class BoundedCache(Generic[K, V]):
    """Forgets its least recently used entry once `size` are held: a hot token stays while a
    crowd of tokens seen once passes through. An OrderedDict: `move_to_end` and dropping the
    oldest entry are constant time. Its users count their hits and misses in `counts` (what
    is a hit is theirs to say: an expired entry found is a miss)."""

    __slots__ = ("__weakref__", "_entries", "counts", "size")

    def __init__(self, size: int, counts: CacheCounts | None = None) -> None:
        self.size = size
        self._entries: OrderedDict[K, V] = OrderedDict()
        self.counts = CacheCounts() if counts is None else counts
        self.counts.caches.add(self)  # type: ignore[arg-type]

    def get(self, key: K) -> V | None:
        """The value remembered for `key` (now the most recently used), or None."""
        entries = self._entries
        value = entries.get(key)
        if value is not None:
            entries.move_to_end(key)
        return value

    def put(self, key: K, value: V) -> None:
        """Remember `value` for `key`, forgetting the least recently used entry when full."""
        entries = self._entries
        if key in entries:
            entries.move_to_end(key)
        elif len(entries) >= self.size:
            entries.popitem(last=False)
            self.counts.evictions += 1
        entries[key] = value

    def drop_oldest_if(self, dead: Callable[[V], bool]) -> None:
        """Forget the least recently used entry when `dead(value)` says it can never serve
        again: one look per call, so dead entries leave as fast as new ones come."""
        entries = self._entries
        if entries:
            key, value = next(iter(entries.items()))
            if dead(value):
                del entries[key]

    def __contains__(self, key: object) -> bool:
        return key in self._entries

    def __len__(self) -> int:
        return len(self._entries)


def per_token(memo: BoundedCache[str, V] | None, token: str | None, compute: Callable[[], V]) -> V:
    """`compute()`, remembered for the token when there is a memo (a result over the token's
    claims alone never changes) and the caller has a token."""
    if memo is None or token is None:
        return compute()
    known = memo.get(token)
    if known is None:
        known = compute()
        memo.put(token, known)
    return known
