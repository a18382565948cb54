"""The Broker's authorization server metadata (`broker/metadata_endpoint.py`): the gateway's own
endpoints, at the origin the client used."""

from __future__ import annotations

import dataclasses

from mcp_oauth_gateway.asgi import TRUST_FORWARDED_KEY
from mcp_oauth_gateway.broker.endpoints import Broker
from mcp_oauth_gateway.controlplane.snapshot import CompiledDpop
from unit.tokens_support import ALL_DPOP_ALGS

from .broker_support import ASM, Rig, error_of, started_rig


async def test_the_document_names_the_gateway_as_issuer_and_its_endpoints(rig: Rig):
    response = await rig.call("GET", ASM)
    assert response.status == 200
    assert response.header(b"cache-control") == b"no-store"
    assert response.json() == {
        "issuer": "http://gw.test/mcp",
        "authorization_endpoint": "http://gw.test/mcp/oauth/authorize",
        "token_endpoint": "http://gw.test/mcp/oauth/token",
        "revocation_endpoint": "http://gw.test/mcp/oauth/revoke",
        "revocation_endpoint_auth_methods_supported": ["none"],
        "registration_endpoint": "http://gw.test" + ASM + "/client-registration",
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token"],
        "token_endpoint_auth_methods_supported": ["none"],
        "code_challenge_methods_supported": ["S256"],
        "authorization_response_iss_parameter_supported": True,
        "client_id_metadata_document_supported": True,
        "scopes_supported": ["openid", "profile"],
        "dpop_signing_alg_values_supported": ALL_DPOP_ALGS,
    }


async def test_the_origin_is_the_one_the_client_used_behind_a_trusted_proxy(rig: Rig):
    response = await rig.call(
        "HEAD",
        ASM,
        headers=[(b"x-forwarded-proto", b"https"), (b"x-forwarded-host", b"mcp.example.com")],
        scope={TRUST_FORWARDED_KEY: True},
    )
    assert response.status == 200
    assert response.json()["issuer"] == "https://mcp.example.com/mcp"
    assert response.json()["token_endpoint"] == "https://mcp.example.com/mcp/oauth/token"


async def test_no_scopes_supported_is_advertised_when_the_route_names_none(rig: Rig):
    context = rig.broker.context
    mcp = dataclasses.replace(context.mcp, scopes_supported=())
    broker = Broker(
        mcp, context.providers, context.store, context.documents, context.session, context.policy
    )
    rig = dataclasses.replace(rig, broker=broker)
    assert "scopes_supported" not in (await rig.call("GET", ASM)).json()


async def test_other_methods_are_405_naming_get(rig: Rig):
    response = await rig.call("POST", ASM)
    assert error_of(response) == (405, "invalid_request", "use GET")
    assert response.header(b"allow") == b"GET"


async def test_the_dpop_algorithms_are_those_of_every_provider_whose_tokens_are_bound():
    es256 = CompiledDpop("Allowed", frozenset({"ES256"}))
    required = CompiledDpop("Required", frozenset({"PS256", "ES256", "EdDSA"}))
    disabled = CompiledDpop("Disabled", frozenset({"RS256"}))
    async with started_rig(("A", "B", "C"), dpop=(es256, required, disabled)) as rig:
        document = (await rig.call("GET", ASM)).json()
    # In the order offered (elliptic curves first), the Disabled provider's RS256 left out.
    assert document["dpop_signing_alg_values_supported"] == ["ES256", "EdDSA", "PS256"]


async def test_no_dpop_algorithms_are_advertised_when_every_provider_is_disabled():
    disabled = CompiledDpop("Disabled")
    async with started_rig(("A", "B"), dpop=(disabled, disabled)) as rig:
        document = (await rig.call("GET", ASM)).json()
    assert "dpop_signing_alg_values_supported" not in document
