"""Grant records: a key's text is canonical and no two keys share one (it is the store's key and
the associated data sealed with the grant), empty or non-text parts are refused, a grant reads
back as written and never shows its tokens in a repr, and a sealed JSON of another shape is
refused naming the field."""

from __future__ import annotations

import math

import orjson
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.usertokens.grants import Grant, GrantKey, summary

PART = st.text(min_size=1, max_size=12, alphabet=st.characters(exclude_categories=("Cs",)))


def grant(**changes: object) -> Grant:
    fields: dict[str, object] = {
        "access_token": "at-1234",
        "refresh_token": "rt-5678",
        "token_type": "Bearer",
        "expires_at": 1_700_000_600.5,
        "scope": "repo read:user",
        "upstream_issuer": "https://github.com/login/oauth",
        "obtained_at": 1_700_000_000.25,
        "refreshed_at": None,
    }
    fields.update(changes)
    return Grant(**fields)  # type: ignore[arg-type]


@given(PART, PART, PART, PART, PART, PART)
def test_two_keys_share_a_text_only_when_equal(a, b, c, d, e, f):
    one, two = GrantKey(a, b, c), GrantKey(d, e, f)
    assert (one.text() == two.text()) == (one == two)
    assert GrantKey.from_text(one.text()) == one


@pytest.mark.parametrize(
    ("one", "two"),
    [
        (("https://idp", "a:b", "c"), ("https://idp", "a", "b:c")),
        (("https://idp", 'a","b', "c"), ("https://idp", "a", 'b","c')),
        (("i", "a\x00b", "c"), ("i", "a", "b\x00c")),
        (("i\\", "s", "b"), ("i", "\\s", "b")),
    ],
)
def test_separators_inside_a_part_do_not_make_two_keys_one(one, two):
    assert GrantKey(*one).text() != GrantKey(*two).text()


@pytest.mark.parametrize(
    ("parts", "error"),
    [
        (("", "alice", "b"), "issuer is a non-empty string"),
        (("i", "", "b"), "subject is a non-empty string"),
        (("i", "alice", ""), "backend is a non-empty string"),
        (("i", None, "b"), "subject is a non-empty string"),
        (("i", "al\ud800ice", "b"), "subject holds a lone surrogate"),
    ],
)
def test_a_key_part_that_is_empty_or_no_text_is_refused(parts, error):
    with pytest.raises(ValueError, match=error):
        GrantKey(*parts)


@pytest.mark.parametrize("text", ["", "[", '{"a":1}', '["i","s"]', '["i","s",3]', '["","s","b"]'])
def test_a_text_that_is_no_key_is_refused(text):
    with pytest.raises(ValueError, match=r"grant key|non-empty"):
        GrantKey.from_text(text)


def test_a_grant_reads_back_as_written():
    for written in (
        grant(),
        grant(
            refresh_token=None,
            expires_at=None,
            scope=None,
            upstream_issuer=None,
            refreshed_at=1_700_000_100,
        ),
    ):
        assert Grant.from_json(written.to_json()) == written


def test_a_grant_never_shows_its_tokens():
    shown = repr(grant()) + str(grant()) + repr(summary(GrantKey("i", "s", "b"), grant(), "k1"))
    assert "at-1234" not in shown
    assert "rt-5678" not in shown
    assert "repo read:user" in shown


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"access_token": ""}, "access_token is a non-empty string"),
        ({"access_token": 5}, "access_token is a non-empty string"),
        ({"token_type": None}, "token_type is a non-empty string"),
        ({"refresh_token": ""}, "refresh_token is a non-empty string"),
        ({"obtained_at": math.nan}, "obtained_at is a number of seconds"),
        ({"obtained_at": True}, "obtained_at is a number of seconds"),
        ({"expires_at": math.inf}, "expires_at is a number of seconds"),
        ({"expires_at": "soon"}, "expires_at is a number of seconds"),
        ({"access_token": "a\udc80"}, "access_token holds a lone surrogate"),
    ],
)
def test_a_grant_with_a_wrong_field_is_refused(changes, error):
    with pytest.raises(ValueError, match=error):
        grant(**changes)


@pytest.mark.parametrize(
    ("changes", "error"),
    [
        ({"access_token": ""}, "access_token is a non-empty string"),
        ({"access_token": 5}, "access_token is a non-empty string"),
        ({"token_type": None}, "token_type is a non-empty string"),
        ({"scope": ["read"]}, "scope is a non-empty string"),
        ({"obtained_at": None}, "obtained_at is a number of seconds"),
        ({"obtained_at": False}, "obtained_at is a number of seconds"),
        ({"refreshed_at": "1700000000"}, "refreshed_at is a number of seconds"),
    ],
)
def test_sealed_json_with_a_wrong_field_is_refused(changes, error):
    data = orjson.loads(grant().to_json())
    data.update(changes)
    with pytest.raises(ValueError, match=error):
        Grant.from_json(orjson.dumps(data))


@pytest.mark.parametrize(
    "raw",
    [b"", b"[]", b'{"v":2}', b'{"access_token":"a"}', b'{"v":1,"access_token":"a","x":1}'],
)
def test_sealed_json_of_another_shape_is_refused(raw):
    with pytest.raises(ValueError, match=r"JSON|format|no field"):
        Grant.from_json(raw)
