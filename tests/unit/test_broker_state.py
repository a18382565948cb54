"""The Broker's typed records and request reading: records round-trip through the store as their
types, one that does not read back counts as absent, consent cookies cannot be forged,
parameters appear once."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.broker import consent
from mcp_oauth_gateway.broker.errors import OAuthError
from mcp_oauth_gateway.broker.requests import single_params
from mcp_oauth_gateway.broker.state import (
    BrokerState,
    IssuedCode,
    PendingAuthorization,
    UpstreamRequest,
)
from mcp_oauth_gateway.broker.store import MemoryStore

PENDING = PendingAuthorization(
    client_id="c",
    client_name="n",
    redirect_uri="http://127.0.0.1:5/cb",
    redirect_href="http://127.0.0.1:5/cb",
    state=None,
    challenge="x" * 43,
    scope="openid",
    resource=None,
    browser="b",
)


async def test_records_round_trip_once():
    state = BrokerState(MemoryStore())
    await state.put_pending("r", PENDING)
    assert await state.take_pending("r") == PENDING
    assert await state.take_pending("r") is None
    upstream = UpstreamRequest(PENDING, "v" * 64, "http://gw/mcp/oauth/callback")
    await state.put_upstream("s", upstream)
    assert await state.take_upstream("s") == upstream
    issued = IssuedCode("c", "http://127.0.0.1:5/cb", "x" * 43, {"access_token": "t"})
    await state.put_code("k", issued)
    assert await state.take_code("k") == issued


async def test_a_record_that_does_not_read_back_counts_as_absent():
    store = MemoryStore()
    await store.put("authz", "old", {"client_id": "c", "no_such_field": 1}, ttl=60)
    await store.put("upstream", "old", {"pending": {}}, ttl=60)
    state = BrokerState(store)
    assert await state.take_pending("old") is None
    assert await state.take_upstream("old") is None


def test_consent_cookies_list_only_what_was_signed():
    secret = b"k" * 32
    value = consent.write_consent(secret, ["a1", "b2"])
    assert consent.read_consent(secret, value) == ["a1", "b2"]
    assert consent.read_consent(b"other" * 8, value) == []
    assert consent.read_consent(secret, "a1-b2-c3." + value.rpartition(".")[2]) == []
    assert consent.read_consent(secret, None) == []
    assert consent.cookie_names("https://gw", "r" * 32)[0] == "__Host-mcp-consent-" + "r" * 16
    assert consent.cookie_names("http://gw", "r" * 32)[2] == ""


def test_parameters_appear_once():
    assert single_params("a=1&b=&c=3") == {"a": "1", "b": "", "c": "3"}
    with pytest.raises(OAuthError, match="'a' appears more than once"):
        single_params("a=1&a=2")
