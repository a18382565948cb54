"""A bounded map for the request path's memos (tokens → claims, decisions, keys, values)."""

from __future__ import annotations

import weakref
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sized
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class CacheCounts:
    """One kind of memo over every route's copy, kept across reloads (a reload builds new
    memos): hits, misses, evictions, the entries the live copies hold, and `limit`, the most
    they may hold together (None: each copy's own size only). A process-wide budget, so the
    memory a memo may take does not grow with the number of routes."""

    __slots__ = ("caches", "evictions", "hits", "limit", "misses", "total")

    def __init__(self, limit: int | None = None) -> None:
        self.hits = 0
        self.misses = 0
        self.evictions = 0
        self.limit = limit
        self.total = 0
        self.caches: weakref.WeakSet[BoundedCache[object, object]] = weakref.WeakSet()

    def entries(self) -> int:
        """The entries the live memos of this kind hold."""
        return self.total

    def fullest(self) -> BoundedCache[object, object] | None:
        """The live memo holding the most entries (None when all are empty)."""
        fullest = max(list(self.caches), key=len, default=None)
        return fullest if fullest is not None and len(fullest) else None

    def _released(self, entries: Sized) -> None:
        # A memo of an older configuration is gone: its entries leave the budget.
        self.total -= len(entries)


class BoundedCache(Generic[K, V]):
    """Forgets its least recently used entry once `size` are held: a hot token stays while a
    crowd of tokens seen once passes through. An OrderedDict: `OrderedDict.move_to_end` and
    dropping the oldest entry are constant time. Its users count their hits and misses in
    `counts` (what is a hit is theirs to say: an expired entry found is a miss)."""

    __slots__ = ("__weakref__", "_entries", "counts", "size")

    def __init__(self, size: int, counts: CacheCounts | None = None) -> None:
        self.size = size
        self._entries: OrderedDict[K, V] = OrderedDict()
        self.counts = CacheCounts() if counts is None else counts
        self.counts.caches.add(self)  # type: ignore[arg-type]
        weakref.finalize(self, self.counts._released, self._entries)

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
            entries[key] = value
            return
        counts = self.counts
        if len(entries) >= self.size:
            self.evict_oldest()
        elif counts.limit is not None and counts.total >= counts.limit:
            # The process-wide budget is spent: this memo gives up its own oldest entry, or,
            # when it holds none, the fullest memo does.
            victim = self if entries else counts.fullest()
            if victim is not None:
                victim.evict_oldest()
        entries[key] = value
        counts.total += 1

    def evict_oldest(self) -> None:
        """Forget the least recently used entry to make room (counted as an eviction)."""
        if self._entries:
            self._entries.popitem(last=False)
            self.counts.evictions += 1
            self.counts.total -= 1

    def drop_oldest_if(self, dead: Callable[[V], bool]) -> None:
        """Forget the least recently used entry when `dead(value)` says it can never serve
        again: one look per call, so dead entries leave as fast as new ones come."""
        entries = self._entries
        if entries:
            key, value = next(iter(entries.items()))
            if dead(value):
                del entries[key]
                self.counts.total -= 1

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
