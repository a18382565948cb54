"""The Broker's dynamic client registration (`broker/register_endpoint.py`): public clients get a
client id that carries their redirect URIs; everything else is refused with RFC 7591 errors."""

from __future__ import annotations

import orjson
import pytest

from mcp_oauth_gateway.broker.clients import read_client_id

from .broker_support import REDIRECT, REGISTRATION, Rig, error_of


async def test_a_public_client_gets_a_client_id_bound_to_its_redirect_uris(rig: Rig):
    body = orjson.dumps(
        {"client_name": "Inspector", "redirect_uris": [REDIRECT], "application_type": "native"}
    )
    response = await rig.call("POST", REGISTRATION, body=body)
    assert response.status == 201
    assert response.header(b"cache-control") == b"no-store"
    answer = response.json()
    assert isinstance(answer.pop("client_id_issued_at"), int)
    client_id = answer.pop("client_id")
    assert answer == {
        "client_name": "Inspector",
        "redirect_uris": [REDIRECT],
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "application_type": "native",
    }
    client = read_client_id(await rig.store.secret(), client_id)
    assert client is not None
    assert (client.name, client.redirect_uris, client.kind) == ("Inspector", (REDIRECT,), "dcr")


async def test_each_registration_is_a_client_of_its_own_named_by_default(rig: Rig):
    body = orjson.dumps({"redirect_uris": [REDIRECT]})
    first = (await rig.call("POST", REGISTRATION, body=body)).json()
    second = (await rig.call("POST", REGISTRATION, body=body)).json()
    assert first["client_id"] != second["client_id"]
    assert first["client_name"] == "MCP client"
    assert "application_type" not in first


@pytest.mark.parametrize(
    ("body", "error", "description"),
    [
        (
            {"redirect_uris": [REDIRECT], "token_endpoint_auth_method": "client_secret_basic"},
            "invalid_client_metadata",
            "only public clients (token_endpoint_auth_method none) can register; they prove "
            "themselves with PKCE",
        ),
        (
            {"client_name": "no URIs"},
            "invalid_redirect_uri",
            "redirect_uris must be a non-empty array of absolute URLs",
        ),
        (
            ["not", "an", "object"],
            "invalid_client_metadata",
            "the registration body must be a JSON object",
        ),
    ],
)
async def test_bad_metadata_is_refused(rig: Rig, body, error, description):
    response = await rig.call("POST", REGISTRATION, body=orjson.dumps(body))
    assert error_of(response) == (400, error, description)


async def test_a_body_that_is_not_json_is_refused(rig: Rig):
    response = await rig.call("POST", REGISTRATION, body=b"redirect_uris=x")
    assert error_of(response) == (
        400,
        "invalid_client_metadata",
        "the registration body is not valid JSON",
    )


async def test_a_body_over_64_kib_is_413(rig: Rig):
    response = await rig.call("POST", REGISTRATION, body=[b" " * 32768, b" " * 32768, b"{}"])
    assert error_of(response) == (
        413,
        "request_too_large",
        "the request body exceeds 65536 bytes, the limit of a client registration (fixed)",
    )


async def test_other_methods_are_405_naming_post(rig: Rig):
    response = await rig.call("GET", REGISTRATION)
    assert error_of(response) == (405, "invalid_request", "use POST")
    assert response.header(b"allow") == b"POST"
