"""The build's memo (`controlplane/memo.py`): a result is kept only for the very same inputs
(objects by identity, plain values by equality, never merely equal objects), only what the
last build used is kept, and a failed build keeps the one before's."""

from __future__ import annotations

from dataclasses import dataclass

from mcp_oauth_gateway.controlplane.memo import Memo, Tokens, same


@dataclass(frozen=True)
class Thing:
    name: str


def test_the_same_input_is_the_same_object_or_an_equal_plain_value():
    one = Thing("a")
    assert same(one, one)
    assert not same(one, Thing("a"))  # equal, but another object: computed again
    assert same("a" * 3, "".join(["a", "a", "a"]))
    assert same((1, ("x", one)), (1, ("x", one)))
    assert not same((1, ("x", one)), (1, ("x", Thing("a"))))
    assert not same(1, 1.0)
    assert not same(True, 1)


def test_a_result_is_kept_for_the_same_inputs_of_the_last_build_only():
    memo: Memo[str, list[str]] = Memo()
    one = Thing("a")
    first = memo.get("k", (one,), lambda thing: [thing.name])
    memo.end(keep=True)
    assert memo.get("k", (one,), lambda thing: ["again"]) is first
    memo.end(keep=True)
    # Not asked for in a build: forgotten.
    memo.end(keep=True)
    assert memo.get("k", (one,), lambda thing: ["again"]) == ["again"]


def test_a_failed_build_keeps_what_the_build_before_it_kept():
    memo: Memo[str, object] = Memo()
    one = Thing("a")
    kept = memo.get("k", (one,), lambda _: object())
    memo.end(keep=True)
    memo.get("k", (Thing("b"),), lambda _: object())
    memo.end(keep=False)
    assert memo.get("k", (one,), lambda _: object()) is kept


def test_a_token_stands_for_its_inputs():
    tokens = Tokens()
    one, two = Thing("a"), Thing("b")
    token = tokens.of("t", (one, two))
    assert tokens.of("t", (one, two)) is token
    other = tokens.of("t", (two, one))  # other inputs, asked in the same build: another token
    assert other is not token
    tokens.end(keep=True)
    assert tokens.of("t", (two, one)) is other
    assert tokens.of_value("v", {"a": 1}) is tokens.of_value("v", {"a": 1})


def test_a_whole_step_keeps_the_results_it_is_made_of():
    steps: Memo[str, dict[str, object]] = Memo()
    parts: Memo[str, object] = Memo()
    one = Thing("a")

    def compute() -> dict[str, object]:
        return {"a": parts.get("a", (one,), lambda _: object())}

    first = steps.whole("all", (one,), compute, (parts,))
    for memo in (steps, parts):
        memo.end(keep=True)
    assert steps.whole("all", (one,), compute, (parts,)) is first
    for memo in (steps, parts):
        memo.end(keep=True)
    # The parts were kept though not asked: a changed step still finds them.
    assert parts.get("a", (one,), lambda _: object()) is first["a"]
