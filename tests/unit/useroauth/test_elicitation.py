"""The answers a caller without an upstream grant gets, and the request state of the
2026-07-28 wire: bound to the caller, the backend, the request and a deadline."""

from __future__ import annotations

import base64

import pytest

from mcp_oauth_gateway.jsonrpc import CONNECT_FIRST, URL_ELICITATION_REQUIRED
from mcp_oauth_gateway.useroauth.elicitation import (
    STATE_PREFIX,
    BadState,
    Elicitation,
    RequestState,
    connect_first_error,
    input_required,
    is_gateway_state,
    open_state,
    params_digest,
    required_error,
    seal_state,
    without_retry_fields,
)
from mcp_oauth_gateway.usertokens.keys import parse_keys

KEYS = parse_keys(base64.b64encode(bytes(range(32))).decode() + "\n", "test keys")
OTHER = parse_keys(base64.b64encode(bytes(range(1, 33))).decode() + "\n", "other keys")
SHOWN = Elicitation("e1", "https://gw.example/mcp/connect?id=e1", "Connect your GitHub account.")
PARAMS = {"name": "whoami", "arguments": {"x": 1}}


def state(**changes: object) -> RequestState:
    fields: dict[str, object] = {
        "elicitation": "e1",
        "issuer": "https://idp.example",
        "subject": "alice",
        "backend": "ns/p|ns/r|gh",
        "digest": params_digest("tools/call", PARAMS),
        "expires": 2000.0,
    }
    fields.update(changes)
    return RequestState(**fields)  # type: ignore[arg-type]


def test_the_2025_error_is_32042_with_one_url_elicitation_carrying_its_id() -> None:
    error = required_error(7, SHOWN)["error"]
    assert isinstance(error, dict)
    assert error["code"] == URL_ELICITATION_REQUIRED == -32042
    assert error["data"] == {
        "elicitations": [
            {"mode": "url", "elicitationId": "e1", "url": SHOWN.url, "message": SHOWN.message}
        ]
    }


def test_the_2026_forms_carry_no_elicitation_id() -> None:
    result = input_required(7, SHOWN, "S")["result"]
    assert isinstance(result, dict)
    assert result["resultType"] == "input_required"
    assert result["requestState"] == "S"
    (request,) = result["inputRequests"].values()
    assert request == {
        "method": "elicitation/create",
        "params": {"mode": "url", "url": SHOWN.url, "message": SHOWN.message},
    }
    error = connect_first_error(7, SHOWN)["error"]
    assert isinstance(error, dict)
    assert error["code"] == CONNECT_FIRST
    assert SHOWN.url in error["message"]


def test_a_state_opens_for_the_same_caller_and_request() -> None:
    text = seal_state(state(), KEYS.seal)
    opened = open_state(text, KEYS.open, state(elicitation=""), now=1000.0)
    assert opened.elicitation == "e1"


@pytest.mark.parametrize(
    ("change", "why"),
    [
        ({"subject": "bob"}, "another user"),
        ({"issuer": "https://evil.example"}, "another user"),
        ({"backend": "ns/p|ns/r|other"}, "another request"),
        ({"digest": params_digest("tools/call", {"name": "rm", "arguments": {}})}, "another"),
    ],
)
def test_a_state_is_refused_for_anyone_or_anything_else(
    change: dict[str, object], why: str
) -> None:
    text = seal_state(state(), KEYS.seal)
    with pytest.raises(BadState, match=why):
        open_state(text, KEYS.open, state(**change), now=1000.0)


def test_a_stale_forged_or_foreign_state_is_refused() -> None:
    text = seal_state(state(), KEYS.seal)
    with pytest.raises(BadState, match="expired"):
        open_state(text, KEYS.open, state(), now=2000.5)
    with pytest.raises(BadState, match="not one this gateway issued"):
        open_state(seal_state(state(), OTHER.seal), KEYS.open, state(), now=1000.0)
    sealed = text.removeprefix(STATE_PREFIX)
    flipped = bytearray(base64.urlsafe_b64decode(sealed))
    flipped[-1] ^= 1
    forged = STATE_PREFIX + base64.urlsafe_b64encode(bytes(flipped)).decode()
    for bad in (forged, sealed, STATE_PREFIX, STATE_PREFIX + "!!", STATE_PREFIX + "A" * 5000):
        with pytest.raises(BadState):
            open_state(bad, KEYS.open, state(), now=1000.0)
    for bad in ("", "!!", 5, None):
        with pytest.raises(BadState):
            open_state(bad, KEYS.open, state(), now=1000.0)


def test_only_states_that_say_they_are_the_gateways_are_checked_as_its_own() -> None:
    assert is_gateway_state(seal_state(state(), KEYS.seal))
    assert is_gateway_state(STATE_PREFIX + "forged")
    # A backend's own state (its own input_required round) is passed on, never opened.
    for other in ("round-1", "", "eyJhbGciOiJIUzI1NiJ9.e30.x", 5, None, {"s": 1}):
        assert not is_gateway_state(other)


def test_the_retry_fields_and_meta_do_not_change_the_digest_and_never_reach_the_backend() -> None:
    retry = {**PARAMS, "inputResponses": {"connect": {"action": "accept"}}, "requestState": "S"}
    meta = {**retry, "_meta": {"progressToken": 3}}
    assert params_digest("tools/call", retry) == params_digest("tools/call", PARAMS)
    assert params_digest("tools/call", meta) == params_digest("tools/call", PARAMS)
    assert params_digest("prompts/get", PARAMS) != params_digest("tools/call", PARAMS)
    assert without_retry_fields(meta) == {**PARAMS, "_meta": {"progressToken": 3}}
