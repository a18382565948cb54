"""The incremental build (`controlplane/build_cache.py`): whatever was built before, a build
through the cache equals a build from scratch of the same objects; every kind of input a change
can touch (a policy, a backend, a route, a listener, a namespace's labels, a Service, a
ReferenceGrant, the class's parameters, a Secret, the egress rules) is seen; and what a change
does not reach is kept (the same objects), what it reaches is compiled again."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.controlplane import build_from_objects
from mcp_oauth_gateway.controlplane.build_cache import BuildCache
from mcp_oauth_gateway.controlplane.builder import BuildResult

from .build_cache_support import AT, BASE, EDITS, Parsed, State
from .fuzz_settings import FUZZ


def built(parsed: Parsed, state: State, cache: BuildCache | None = None) -> BuildResult:
    objects = parsed.objects(state)
    return build_from_objects(objects, at=AT, deployment=state.deployment, cache=cache)


def rows(result: BuildResult) -> dict[tuple[str, str], object]:
    """Each compiled route rule as listed, by route and listener."""
    return {
        (row.route, row.listener_hostname): row
        for routes in result.snapshot.listeners.values()
        for row in routes
    }


@pytest.mark.parametrize("edit", list(EDITS))
def test_each_kind_of_change_is_seen(edit):
    parsed, cache = Parsed(), BuildCache()
    before = built(parsed, BASE, cache)
    after = EDITS[edit](BASE)
    cached = built(parsed, after, cache)
    assert cached == built(parsed, after)  # what a build from scratch gives
    assert cached != before  # the change shows: nothing stale was kept
    undone = EDITS[edit](after)
    assert built(parsed, undone, cache) == before


@FUZZ
@given(st.lists(st.sampled_from(list(EDITS)), min_size=1, max_size=8))
def test_a_cached_build_equals_a_build_from_scratch_after_any_edits(edits):
    parsed, cache = Parsed(), BuildCache()
    state = BASE
    built(parsed, state, cache)
    for edit in edits:
        state = EDITS[edit](state)
        assert built(parsed, state, cache) == built(parsed, state), edit


def test_a_changed_policy_compiles_its_route_alone():
    parsed, cache = Parsed(), BuildCache()
    before = rows(built(parsed, BASE, cache))
    after = rows(built(parsed, EDITS["a policy's rule"](BASE), cache))
    assert before.keys() == after.keys()
    for key, row in after.items():
        # The route the policy governs is compiled again; every other is the same object.
        assert (row is before[key]) is (key[0] != "apps/r0"), key


def test_a_change_to_a_shared_input_compiles_what_reads_it():
    parsed, cache = Parsed(), BuildCache()
    before = rows(built(parsed, BASE, cache))
    # The keys' Service is read by every policy: every route is compiled again.
    state = EDITS["the keys' Service"](BASE)
    after = rows(built(parsed, state, cache))
    assert all(row is not before[key] for key, row in after.items())
    # A backend's Service is read by that backend alone: the route to it.
    again = rows(built(parsed, EDITS["a Service's ports"](state), cache))
    assert {key[0] for key, row in again.items() if row is not after[key]} == {"apps/r1"}


def test_a_secret_is_read_only_by_the_policy_naming_it():
    parsed, cache = Parsed(), BuildCache()
    before = rows(built(parsed, BASE, cache))
    after = rows(built(parsed, EDITS["a Secret's value"](BASE), cache))
    assert {key[0] for key, row in after.items() if row is not before[key]} == {"apps/r1"}
    credentials = after["apps/r1", ""].policy.credentials
    assert credentials.secret_header.value == b"rotated"


def test_a_build_that_fails_keeps_what_the_last_good_one_computed():
    parsed, cache = Parsed(), BuildCache()
    before = rows(built(parsed, BASE, cache))
    with pytest.raises(ValueError, match="given twice"):
        build_from_objects(parsed.objects(BASE) * 2, at=AT, deployment=BASE.deployment, cache=cache)
    again = rows(built(parsed, BASE, cache))
    assert all(row is before[key] for key, row in again.items())


def test_only_the_last_build_is_kept():
    parsed, cache = Parsed(), BuildCache()
    built(parsed, BASE, cache)
    sizes = {id(memo): len(memo) for memo in cache.memos()}
    built(parsed, EDITS["a route removed"](BASE), cache)
    assert len(cache.routes) == sizes[id(cache.routes)] - 1
    assert len(cache.policies) == sizes[id(cache.policies)]
