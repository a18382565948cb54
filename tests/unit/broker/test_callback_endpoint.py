"""The provider's redirect back to the gateway (`broker/callback_endpoint.py`): state and `iss`
checked, the provider's code exchanged with the gateway's PKCE verifier, and the client sent its
own one-time code with the gateway's `iss`; the provider's refusals go back to the client."""

from __future__ import annotations

from mcp_oauth_gateway import pkce
from support import free_port

from .broker_support import (
    IDP_ISSUER,
    REDIRECT,
    Rig,
    at_provider,
    come_back,
    error_of,
    redirected,
    register,
    started_rig,
)


async def test_the_client_gets_the_gateways_code_for_the_providers_tokens(rig: Rig):
    client_id = await register(rig)
    upstream = await at_provider(rig, client_id)
    response = await come_back(rig, state=upstream["state"], code="upstream-code", iss=IDP_ISSUER)
    where, params = redirected(response)
    assert where == REDIRECT
    code = params.pop("code")
    assert params == {"iss": "http://gw.test/mcp", "state": "client-state"}
    form = rig.provider.last_token_form
    assert pkce.s256(form.pop("code_verifier")) == upstream["code_challenge"]
    assert form == {
        "client_id": "gateway-at-0",
        "grant_type": "authorization_code",
        "code": "upstream-code",
        "redirect_uri": "http://gw.test/mcp/oauth/callback",
        "resource": "http://gw.test/mcp",
    }
    issued = await rig.context().state.take_code(code)
    assert issued is not None
    assert (issued.client_id, issued.redirect_uri) == (client_id, REDIRECT)
    assert issued.tokens["access_token"] == "provider-at-1"


async def test_the_exchange_keeps_the_resource_from_a_provider_that_does_not_take_it():
    async with started_rig(forwards_resource=False) as rig:
        upstream = await at_provider(rig, await register(rig))
        await come_back(rig, state=upstream["state"], code="c", iss=IDP_ISSUER)
        assert "resource" not in rig.provider.last_token_form


async def test_an_absent_unknown_or_used_state_is_refused_in_place(rig: Rig):
    upstream = await at_provider(rig, await register(rig))
    assert (await come_back(rig, state=upstream["state"], code="c", iss=IDP_ISSUER)).status == 302
    for params in ({"code": "c"}, {"state": "forged", "code": "c"}, {"state": upstream["state"]}):
        response = await come_back(rig, **params)
        assert response.header(b"location") is None
        assert error_of(response) == (
            400,
            "invalid_request",
            "unknown, expired or already used state; start the sign-in again",
        )
    assert len(rig.provider.tokens) == 1


async def test_another_issuer_is_refused_as_a_mix_up(rig: Rig):
    upstream = await at_provider(rig, await register(rig))
    response = await come_back(rig, state=upstream["state"], code="c", iss="http://evil.test")
    assert error_of(response) == (
        400,
        "invalid_request",
        f"the authorization response iss 'http://evil.test' is not the provider issuer "
        f"{IDP_ISSUER!r} (RFC 9207 mix-up defence)",
    )
    assert rig.provider.tokens == []


async def test_a_missing_iss_is_refused_when_the_provider_says_it_sends_one(rig: Rig):
    document = rig.discoveries[0].document
    assert document is not None
    upstream = await at_provider(rig, await register(rig))
    without = await come_back(rig, state=upstream["state"], code="c")
    assert without.status == 302  # a provider that does not say so may leave it out
    document["authorization_response_iss_parameter_supported"] = True
    upstream = await at_provider(rig, await register(rig))
    response = await come_back(rig, state=upstream["state"], code="c")
    assert error_of(response)[:2] == (400, "invalid_request")


async def test_the_providers_refusal_goes_back_to_the_client(rig: Rig):
    upstream = await at_provider(rig, await register(rig))
    response = await come_back(
        rig,
        state=upstream["state"],
        iss=IDP_ISSUER,
        error="access_denied",
        error_description="the user cancelled",
    )
    where, params = redirected(response)
    assert where == REDIRECT
    assert params == {
        "error": "access_denied",
        "error_description": "the user cancelled",
        "iss": "http://gw.test/mcp",
        "state": "client-state",
    }
    assert rig.provider.tokens == []


async def test_a_refused_code_exchange_goes_back_to_the_client_as_server_error(rig: Rig):
    rig.provider.token_answers.append((400, {"error": "invalid_grant"}))
    upstream = await at_provider(rig, await register(rig))
    response = await come_back(rig, state=upstream["state"], code="c", iss=IDP_ISSUER)
    where, params = redirected(response)
    assert where == REDIRECT
    assert params == {
        "error": "server_error",
        "error_description": "the identity provider refused the code exchange",
        "iss": "http://gw.test/mcp",
        "state": "client-state",
    }


async def test_an_answer_without_an_access_token_is_a_refusal(rig: Rig):
    rig.provider.token_answers.append((200, {"token_type": "Bearer"}))
    upstream = await at_provider(rig, await register(rig))
    _, params = redirected(await come_back(rig, state=upstream["state"], code="c", iss=IDP_ISSUER))
    assert params["error"] == "server_error"


async def test_an_unreachable_token_endpoint_goes_back_to_the_client_as_server_error(rig: Rig):
    document = rig.discoveries[0].document
    assert document is not None
    document["token_endpoint"] = f"http://127.0.0.1:{free_port()}/token"  # nothing listens
    upstream = await at_provider(rig, await register(rig))
    _, params = redirected(await come_back(rig, state=upstream["state"], code="c", iss=IDP_ISSUER))
    assert params["error"] == "server_error"


async def test_unavailable_provider_metadata_is_502_in_place(rig: Rig):
    upstream = await at_provider(rig, await register(rig))
    rig.discoveries[0].document = None
    response = await come_back(rig, state=upstream["state"], code="c", iss=IDP_ISSUER)
    assert response.header(b"location") is None
    assert error_of(response)[:2] == (502, "temporarily_unavailable")
