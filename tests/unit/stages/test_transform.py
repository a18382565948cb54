"""The header transformation stage (`dataplane/transform.py`) on its own: headers set from the
claims, incoming copies of them dropped, values that cannot be headers, and the 400s it answers.

Covered elsewhere, not repeated: the end-to-end wire with a real backend
(`tests/e2e/test_transformations.py`); the entry check refusing repeated guarded headers
(`tests/unit/test_headers.py`); copies of the headers a route sets under other names, or named by
`Connection` (`tests/unit/stages/test_owned_headers.py`)."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.asgi import CLAIMS_KEY, TOKEN_KEY
from mcp_oauth_gateway.controlplane.policies import compile_transformation
from mcp_oauth_gateway.controlplane.snapshot import CompiledTransformation
from mcp_oauth_gateway.dataplane.transform import HeaderTransformation
from mcp_oauth_gateway.resources.models import Transformation

from .harness import Inner, count_calls, drive

ALICE = {CLAIMS_KEY: {"sub": "alice", "groups": ["mcp-agent", "users"], "level": 3}}


def transformation(set_: dict[str, str], remove: tuple[str, ...] = ()) -> CompiledTransformation:
    spec = Transformation.model_validate(
        {
            "request": {
                "set": [{"name": name, "value": value} for name, value in set_.items()],
                "remove": list(remove),
            }
        }
    )
    problems: list[str] = []
    compiled = compile_transformation(spec, True, problems)
    assert problems == []
    assert compiled is not None
    return compiled


def stage(inner: Inner, set_: dict[str, str], remove: tuple[str, ...] = ()) -> HeaderTransformation:
    return HeaderTransformation(inner, transformation(set_, remove))


async def test_headers_are_set_from_the_claims_after_the_others():
    inner = Inner()
    app = stage(inner, {"X-User": "jwt.sub", "X-Groups": 'jwt.groups.join(",")'})
    response = await drive(
        app, "POST", headers=[(b"accept", b"*/*")], body=b"{}", scope=ALICE, inner=inner
    )
    assert response.status == 200
    assert inner.last.headers == [
        (b"host", b"gw.test"),
        (b"accept", b"*/*"),
        (b"x-user", b"alice"),
        (b"x-groups", b"mcp-agent,users"),
    ]
    assert inner.last.body == b"{}"


async def test_a_client_supplied_copy_is_replaced_by_the_computed_value():
    inner = Inner()
    await drive(
        stage(inner, {"X-User": "jwt.sub"}),
        headers=[(b"x-user", b"admin")],
        scope=ALICE,
        inner=inner,
    )
    assert [v for k, v in inner.last.headers if k == b"x-user"] == [b"alice"]


async def test_a_value_that_cannot_be_computed_leaves_the_header_unset_and_the_spoof_dropped():
    inner = Inner()
    response = await drive(
        stage(inner, {"X-Team": "jwt.team"}),
        scope=ALICE,
        inner=inner,
        headers=[(b"x-team", b"root")],
    )
    assert response.reached
    assert inner.last.header(b"x-team") is None


async def test_removed_headers_are_dropped_in_every_copy():
    inner = Inner()
    await drive(
        stage(inner, {}, remove=("X-Internal",)),
        scope=ALICE,
        inner=inner,
        headers=[(b"x-internal", b"1"), (b"x-keep", b"k"), (b"x-internal", b"2")],
    )
    assert inner.last.headers == [(b"host", b"gw.test"), (b"x-keep", b"k")]


@pytest.mark.parametrize(
    ("expression", "value"),
    [
        ("jwt.level", b"3"),
        ("jwt.level > 2", b"true"),
        ("jwt.level > 5", b"false"),
        ("double(jwt.level) / 2.0", b"1.5"),
        ("jwt.level / 2.0", None),  # int / double is a CEL type error: no value
        ('"Zo\u00eb"', "Zo\u00eb".encode()),
        ("jwt.groups", None),  # a list is not a header value
        ('{"a": 1}', None),
    ],
)
async def test_values_become_header_text_or_nothing(expression, value):
    inner = Inner()
    await drive(stage(inner, {"X-Value": expression}), scope=ALICE, inner=inner)
    assert inner.last.header(b"x-value") == value


async def test_a_value_may_read_the_request():
    inner = Inner()
    await drive(
        stage(inner, {"X-Route": 'request.method + " " + request.path'}),
        "POST",
        "/mcp/x",
        scope=ALICE,
        inner=inner,
    )
    assert inner.last.header(b"x-route") == b"POST /mcp/x"


# (NUL is checked too, but cel-expr-python cuts strings at NUL before the check sees them.)
@pytest.mark.parametrize("bad", ["\r\nx-admin: yes", "\n", "\r"])
async def test_a_computed_value_with_control_characters_is_refused(bad):
    inner = Inner()
    response = await drive(
        stage(inner, {"X-User": "jwt.sub"}), inner=inner, scope={CLAIMS_KEY: {"sub": "alice" + bad}}
    )
    assert not response.reached
    assert response.status == 400
    assert response.json() == {
        "error": "invalid_request",
        "error_description": "the value computed for header x-user contains control characters",
    }


async def test_other_headers_may_repeat_and_keep_their_order():
    inner = Inner()
    headers = [(b"accept", b"a"), (b"x-custom", b"1"), (b"accept", b"b"), (b"x_other", b"2")]
    await drive(stage(inner, {"X-User": "jwt.sub"}), scope=ALICE, headers=headers, inner=inner)
    assert inner.last.headers == [(b"host", b"gw.test"), *headers, (b"x-user", b"alice")]


async def test_values_over_the_claims_are_computed_once_per_token(monkeypatch):
    """The same token twice: one evaluation, the same headers; another token is computed
    anew; a value reading the request is computed for every request."""
    from mcp_oauth_gateway.dataplane import transform as module

    evaluations = count_calls(monkeypatch, module, "value_of")
    inner = Inner()
    app = stage(inner, {"X-User": "jwt.sub"})
    alice = {**ALICE, TOKEN_KEY: "token-a"}
    bob = {CLAIMS_KEY: {"sub": "bob"}, TOKEN_KEY: "token-b"}
    for scope in (alice, alice, bob):
        await drive(app, headers=[(b"x-user", b"admin")], scope=scope, inner=inner)
    users = [[v for k, v in seen.headers if k == b"x-user"] for seen in inner.seen]
    assert users == [[b"alice"], [b"alice"], [b"bob"]]
    assert evaluations[0] == 2
    by_request = stage(inner, {"X-Path": "request.path"})
    for _ in range(2):
        await drive(by_request, scope=alice, inner=inner)
    assert evaluations[0] == 4


async def test_a_remembered_refusal_is_refused_again():
    inner = Inner()
    app = stage(inner, {"X-Name": "jwt.name"})
    scope = {CLAIMS_KEY: {"name": "a\r\nX-Admin: 1"}, TOKEN_KEY: "token-crlf"}
    first = await drive(app, scope=scope, inner=inner)
    second = await drive(app, scope=scope, inner=inner)
    assert (first.status, second.status) == (400, 400)
    assert (first.reached, second.reached) == (False, False)
