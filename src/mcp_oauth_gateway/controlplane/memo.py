"""Results of the build's pure steps kept from one build to the next, so that a change costs what
it changed: a step given the same inputs as last time takes last time's result.

Inputs are compared strictly: objects by identity (the loader and the controller's cache hand
over the same model object while its text or its content is unchanged, and every step below
them hands over the same result), plain values (strings, numbers, tuples of them) by equality.
An object that is merely equal is a new input, and its result is computed again: a kept result
can only ever be one the same inputs would give. Only what the last build used is kept, so
nothing of an older configuration stays reachable through the memo.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from operator import is_
from typing import Any, Generic, TypeVar

K = TypeVar("K", bound=Hashable)
V = TypeVar("V")

Inputs = tuple[object, ...]
# How a step asks for a result: by key and inputs, computed from the inputs (given as the
# callable's arguments, so that it can read nothing else that varies) when not kept.
Keep = Callable[[K, Inputs, Callable[..., V]], V]


def computed(key: object, inputs: Inputs, compute: Callable[..., V]) -> V:
    """A `Keep` that keeps nothing (a build without a memo)."""
    return compute(*inputs)


class _Equal:
    """A settings object that is the same input as another when they are equal (its equality
    is its whole value)."""

    __slots__ = ("value",)

    def __init__(self, value: object) -> None:
        self.value = value

    def __eq__(self, other: object) -> bool:
        return isinstance(other, _Equal) and self.value == other.value

    __hash__ = None  # type: ignore[assignment]


# The plain values compared by equality (their equality is their whole value).
_PLAIN = (str, int, float, bool, bytes, type(None), _Equal)


def same(a: object, b: object) -> bool:
    """Whether two inputs are the same: one object, or equal plain values (tuples of them
    element by element)."""
    if a is b:
        return True
    kind = type(a)
    if kind is not type(b):
        return False
    if isinstance(a, tuple) and isinstance(b, tuple) and kind is tuple:
        # Mostly the very same objects: checked first, in C.
        return len(a) == len(b) and (all(map(is_, a, b)) or all(map(same, a, b)))
    return kind in _PLAIN and a == b


def same_inputs(a: Inputs, b: Inputs) -> bool:
    """`same` for two tuples of inputs, the very same objects checked first (in C)."""
    return len(a) == len(b) and (all(map(is_, a, b)) or all(map(same, a, b)))


class Memo(Generic[K, V]):
    """One step's results by key, each with the inputs it was computed from."""

    def __init__(self) -> None:
        self._last: dict[K, tuple[Inputs, V]] = {}
        self._next: dict[K, tuple[Inputs, V]] = {}
        self.computed = 0  # results computed by the build under way (the rest were kept)

    def get(self, key: K, inputs: Inputs, compute: Callable[..., V]) -> V:
        """Last build's result for `key` when its inputs are the same, else `compute(*inputs)`."""
        known = self._last.get(key)
        if known is None or not (
            # Mostly the very same objects: checked first, in C.
            (all(map(is_, known[0], inputs)) and len(known[0]) == len(inputs))
            or same_inputs(known[0], inputs)
        ):
            known = (inputs, compute(*inputs))
            self.computed += 1
        self._next[key] = known
        return known[1]

    def whole(
        self, key: K, inputs: Inputs, compute: Callable[[], V], parts: tuple[Memo[Any, Any], ...]
    ) -> V:
        """A step's whole result, last build's when all its inputs are the same (then the memos
        of the results it is made of, `parts`, keep theirs as they are, none of them asked),
        else `compute()`. The result is shared by the builds: never changed in place."""
        known = self._last.get(key)
        if known is not None and same_inputs(known[0], inputs):
            for part in parts:
                part._next = dict(part._last)
        else:
            known = (inputs, compute())
        self._next[key] = known
        return known[1]

    def end(self, keep: bool) -> None:
        """The build ended: keep what it used (`keep`), or forget it (it failed)."""
        if keep:
            self._last = self._next
        self._next = {}
        self.computed = 0

    def __len__(self) -> int:
        return len(self._last)


class Tokens:
    """One object standing for a set of inputs many results share (the Gateways every route's
    binding reads, the Services every policy may resolve): the same object while those inputs
    are the same, a new one when any changed, so each result names one input for them."""

    def __init__(self) -> None:
        self._memo: Memo[str, object] = Memo()
        self._made: dict[str, tuple[Inputs, object]] = {}

    def of(self, name: str, inputs: Inputs) -> object:
        """The token of `inputs` under `name` (the same within one build, however often asked
        for the same inputs)."""
        made = self._made.get(name)
        if made is not None and same_inputs(made[0], inputs):
            return made[1]
        token = self._memo.get(name, inputs, lambda *_: object())
        self._made[name] = (inputs, token)
        return token

    def of_value(self, name: str, value: object) -> object:
        """The token of a value compared by equality (a frozen settings object whose equality
        is its whole value)."""
        return self.of(name, (_Equal(value),))

    def end(self, keep: bool) -> None:
        """As `Memo.end`."""
        self._memo.end(keep)
        self._made = {}
