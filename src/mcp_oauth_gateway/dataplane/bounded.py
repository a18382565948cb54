"""A bounded map for the request path's memos (tokens → claims, decisions, keys, values)."""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")


class BoundedCache(Generic[K, V]):
    """Forgets its oldest entries first once `size` are held. An OrderedDict: dropping a plain
    dict's oldest entry walks the holes earlier deletions left, a cost that grows with it."""

    __slots__ = ("_entries", "size")

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[K, V] = OrderedDict()

    def get(self, key: K) -> V | None:
        """The value remembered for `key`, or None."""
        return self._entries.get(key)

    def put(self, key: K, value: V) -> None:
        """Remember `value` for `key`, forgetting the oldest entry when full."""
        entries = self._entries
        if key not in entries and len(entries) >= self.size:
            entries.popitem(last=False)
        entries[key] = value

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
