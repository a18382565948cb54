"""The route-level rule for the headers a route's stages set or remove
(`dataplane/headers.py::OwnedHeaders`): a client copy sent twice, an underscore alias and a
`Connection` header naming one are refused before any stage runs.

Covered elsewhere, not repeated: the whole pipeline with a secret header, a signed identity and a
transformation header (`tests/unit/test_backend_headers.py`); the writer's own backstop
(`tests/unit/stages/test_reverse_proxy.py`)."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.dataplane.headers import OwnedHeaders

from .harness import Inner, drive

# A route that sets X-User (a transformation) and X-Api-Key (the backend's secret) and removes
# X-Internal.
SETS = frozenset({b"x-user", b"x-api-key"})
REMOVES = frozenset({b"x-internal"})


def stage(inner: Inner) -> OwnedHeaders:
    return OwnedHeaders(inner, SETS, REMOVES)


@pytest.mark.parametrize("name", [b"x-user", b"x-api-key"])
async def test_two_copies_of_a_header_the_route_sets_are_refused(name):
    inner = Inner()
    response = await drive(stage(inner), inner=inner, headers=[(name, b"a"), (name, b"b")])
    assert not response.reached
    assert response.status == 400
    display = "X-User" if name == b"x-user" else "X-Api-Key"
    assert response.json() == {
        "error": "invalid_request",
        "error_description": f"the request carries more than one {display} header, which this "
        "route sets itself; send it at most once",
    }


@pytest.mark.parametrize(
    ("name", "display", "alias_of"),
    [
        (b"x_user", "X_User", "X-User"),
        (b"x_internal", "X_Internal", "X-Internal"),
        (b"x_api_key", "X_Api_Key", "X-Api-Key"),
        (b"x-api_key", "X-api_Key", "X-Api-Key"),
    ],
)
async def test_an_underscore_alias_of_a_set_or_removed_header_is_refused(name, display, alias_of):
    inner = Inner()
    response = await drive(stage(inner), headers=[(name, b"spoof")], inner=inner)
    assert not response.reached
    assert response.status == 400
    assert response.json()["error_description"] == (
        f"the header {display} would be read as {alias_of} by some servers, and this route "
        f"sets or removes {alias_of} itself"
    )


@pytest.mark.parametrize(
    "named", [b"x-user", b"X-Internal", b"keep-alive, x-user", b"X-API-KEY", b" x-api-key ,te"]
)
async def test_a_connection_header_cannot_make_a_set_or_removed_header_hop_by_hop(named):
    # The proxy drops what Connection names: naming X-User would remove the value set here.
    inner = Inner()
    response = await drive(stage(inner), headers=[(b"connection", named)], inner=inner)
    assert not response.reached
    assert response.status == 400
    assert "the Connection header names X-" in response.json()["error_description"]


async def test_other_headers_pass_as_they_came():
    inner = Inner()
    headers = [(b"accept", b"a"), (b"accept", b"b"), (b"x_other", b"2"), (b"x-user", b"one")]
    response = await drive(stage(inner), headers=headers, inner=inner)
    assert response.reached
    assert inner.last.headers == [(b"host", b"gw.test"), *headers]
