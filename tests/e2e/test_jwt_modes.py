"""JWT `mode` with real processes: Optional lets a caller without a token through as anonymous
(rules see an empty `jwt`) and still refuses a bad token; Permissive never refuses, logs and
counts why a token was not accepted, and never passes that token to the backend."""

from __future__ import annotations

import uuid
from pathlib import Path

import httpx
import pytest

from conftest import gateway_beside
from support import INITIALIZE, mcp_headers, wait_until

# Anonymous callers may use the server; signed-in ones need the group.
RULES = (
    ("      mode: Strict", "      mode: {mode}"),
    (
        "          - '\"mcp-agent\" in jwt.groups'",
        "          - '\"mcp-agent\" in jwt.groups || size(jwt) == 0'",
    ),
)


def gateway(mode: str, stack_b, tmp_path_factory, logs):
    edits = tuple((a, b.format(mode=mode)) for a, b in RULES)
    yield from gateway_beside(
        stack_b, tmp_path_factory.mktemp(mode), logs, f"gateway-{mode.lower()}", edits=edits
    )


@pytest.fixture(scope="module")
def optional(stack_b, tmp_path_factory, logs):
    yield from gateway("Optional", stack_b, tmp_path_factory, logs)


@pytest.fixture(scope="module")
def permissive(stack_b, tmp_path_factory, logs):
    yield from gateway("Permissive", stack_b, tmp_path_factory, logs)


def post(base: str, token: str | None) -> tuple[httpx.Response, str]:
    mark = uuid.uuid4().hex
    headers = mcp_headers(token, **{"Mcp-Param-Mark": mark})
    return httpx.post(f"{base}/mcp", json=INITIALIZE, headers=headers), mark


def backend_saw(stack_b, mark: str) -> dict[str, str] | None:
    for request in httpx.get(f"http://{stack_b.backend}/debug/requests").json():
        headers = dict(request["headers"])
        if headers.get("mcp-param-mark") == mark:
            return headers
    return None


def test_optional_lets_an_anonymous_caller_through_and_refuses_a_bad_token(optional, stack_b):
    anonymous, mark = post(optional, None)
    assert anonymous.status_code == 200
    assert backend_saw(stack_b, mark) is not None
    bad, mark = post(optional, stack_b.token(iss="http://elsewhere/"))
    assert bad.status_code == 401
    assert bad.json()["error"] == "invalid_token"
    assert backend_saw(stack_b, mark) is None
    good, _ = post(optional, stack_b.token())
    assert good.status_code == 200
    # Signed in without the group: the rule for anonymous callers does not apply.
    outsider, _ = post(optional, stack_b.token(groups=[]))
    assert outsider.status_code == 403


def test_permissive_never_refuses_and_says_why(permissive, stack_b, logs: Path):
    bad_token = stack_b.token(iss="http://elsewhere/")
    bad, mark = post(permissive, bad_token)
    assert bad.status_code == 200
    seen = backend_saw(stack_b, mark)
    assert seen is not None
    assert "authorization" not in seen  # the unverified token stays at the gateway
    log = logs / "gateway-permissive.log"
    wait_until(
        lambda: "continues anonymously (Permissive): iss 'http://elsewhere/'" in log.read_text(),
        10,
        "the gateway to log why the token was not accepted",
    )
