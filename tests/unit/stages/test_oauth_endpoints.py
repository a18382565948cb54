"""The MCP OAuth endpoints stage (`dataplane/oauth_endpoints.py` `OAuthEndpoints`) on its own:
protected resource metadata, authorization server metadata and the registration shim it answers,
the errors on each, and everything else passed on.

Covered elsewhere, not repeated: the provider-B PRM document and its origin behind trusted
forwarded headers, AS metadata answered 502 before discovery was ever fetched
(`tests/unit/test_dataplane.py`); registration bodies' validation (`tests/unit/test_fuzz.py`);
the Keycloak forward over the network (`tests/e2e/test_client_flow.py`)."""

from __future__ import annotations

import dataclasses

import orjson
import pytest

from mcp_oauth_gateway.asgi import TRUST_FORWARDED_KEY, Receive, Scope, Send, send_json
from mcp_oauth_gateway.controlplane.fetch import FetchError
from mcp_oauth_gateway.controlplane.snapshot import CompiledMcp, CompiledProvider, KeysetSource
from mcp_oauth_gateway.dataplane.oauth_endpoints import OAuthEndpoints
from mcp_oauth_gateway.provider_kinds import ProviderKind
from mcp_oauth_gateway.providers import RegistrationError, RegistrationResult, adapter_for
from mcp_oauth_gateway.providers.base import DiscoveryFacade
from unit.tokens_support import ALL_DPOP_ALGS, ISSUER, compiled_mcp

from .harness import Inner, drive

PROVIDER = CompiledProvider(
    ISSUER,
    frozenset({"mcp-public"}),
    KeysetSource("inline", 0.0),
    "http://idp/.well-known/openid-configuration",
)
PRM = "/.well-known/oauth-protected-resource/mcp"
ASM = "/.well-known/oauth-authorization-server/mcp"
REGISTRATION = ASM + "/client-registration"
DISCOVERY = {
    "issuer": ISSUER,
    "authorization_endpoint": "http://idp/authorize",
    "token_endpoint": "http://idp/token",
    "registration_endpoint": "http://idp/register-directly",
}
REGISTER = orjson.dumps(
    {"redirect_uris": ["http://127.0.0.1:33418/callback"], "client_name": "Inspector"}
)


class Discovery:
    """The discovery cache's `get()`: a fixed document, or FetchError when there is none."""

    def __init__(self, document: dict[str, object] | None = DISCOVERY):
        self.document = document
        self.gets = 0

    async def get(self) -> dict[str, object]:
        self.gets += 1
        if self.document is None:
            raise FetchError("GET http://idp/.well-known/openid-configuration: connection refused")
        return self.document


class ForwardingAdapter(DiscoveryFacade):
    """An adapter of the Keycloak kind, answering registration without a network."""

    kind = ProviderKind.KEYCLOAK

    def __init__(self, error: RegistrationError | None = None):
        self.error = error
        self.calls: list[tuple[dict[str, object], bytes, dict[str, object] | None]] = []

    async def register(
        self,
        metadata: dict[str, object],
        raw_body: bytes,
        discovery: dict[str, object] | None,
        session: object,
    ) -> RegistrationResult:
        self.calls.append((metadata, raw_body, discovery))
        if self.error is not None:
            raise self.error
        return RegistrationResult(201, b'{"client_id": "dyn-1"}', b"application/json")


def endpoints(
    inner: Inner,
    mcp: CompiledMcp | None = None,
    adapter: object = "default",
    discovery: Discovery | None = None,
    extra: dict | None = None,
) -> OAuthEndpoints:
    mcp = mcp or compiled_mcp("ProviderB")
    if adapter == "default":
        adapter = adapter_for(mcp.provider, mcp.client_id)
    return OAuthEndpoints(
        inner,
        mcp,
        (PROVIDER,),
        adapter,  # type: ignore[arg-type]
        discovery or Discovery(),
        lambda: None,
        extra,
    )  # type: ignore[arg-type]


# --- protected resource metadata ----------------------------------------------------------------


@pytest.mark.parametrize("path", [PRM, PRM + "/", "/.well-known/oauth-protected-resource"])
async def test_prm_is_served_at_its_path_with_or_without_a_trailing_slash_and_at_the_root(path):
    inner = Inner()
    response = await drive(endpoints(inner), "GET", path, inner=inner)
    assert not response.reached
    assert response.status == 200
    assert response.json()["resource"] == "http://gw.test/mcp"
    assert response.header(b"cache-control") == b"no-store"
    assert response.header(b"content-type") == b"application/json"


async def test_without_a_provider_prm_names_the_issuer_and_defaults_the_resource():
    mcp = dataclasses.replace(
        compiled_mcp(None), resource=None, extra_metadata=(("resource_name", "Tools"),)
    )
    response = await drive(
        endpoints(Inner(), mcp, adapter=None),
        "HEAD",
        PRM,
        host=b"mcp.example:8443",
        scope={"scheme": "https"},
    )
    assert response.status == 200
    assert response.json() == {
        "resource": "https://mcp.example:8443/mcp",
        "authorization_servers": [ISSUER],
        "mcp_protocol_version": "2025-06-18",
        "resource_type": "mcp-server",
        "bearer_methods_supported": ["header"],
        "scopes_supported": ["openid"],
        # RFC 9728 §2: a provider takes DPoP tokens unless Disabled (Allowed by default).
        "dpop_signing_alg_values_supported": ALL_DPOP_ALGS,
        "dpop_bound_access_tokens_required": False,
        "resource_name": "Tools",
    }


@pytest.mark.parametrize(
    ("path", "method", "allowed"),
    [(PRM, "POST", "GET"), (ASM, "PUT", "GET"), (REGISTRATION, "GET", "POST")],
)
async def test_other_methods_are_405_with_allow(path, method, allowed):
    inner = Inner()
    response = await drive(endpoints(inner), method, path, inner=inner)
    assert not response.reached
    assert response.status == 405
    assert response.header(b"allow") == allowed.encode()
    assert response.json() == {
        "error": "invalid_request",
        "error_description": f"{method} is not allowed here; use {allowed}",
    }


# --- authorization server metadata --------------------------------------------------------------


async def test_asm_is_the_discovery_document_with_the_gateways_registration_endpoint():
    response = await drive(
        endpoints(Inner()),
        "GET",
        ASM,
        host=b"gw.internal:8080",
        headers=[(b"x-forwarded-proto", b"https"), (b"x-forwarded-host", b"mcp.example.com")],
        scope={TRUST_FORWARDED_KEY: True},
    )
    assert response.status == 200
    assert response.json() == {
        **DISCOVERY,
        "registration_endpoint": "https://mcp.example.com" + REGISTRATION,  # replaced
        "code_challenge_methods_supported": ["S256"],  # advertised when the provider is silent
    }


async def test_asm_keeps_the_providers_own_pkce_methods():
    discovery = Discovery({**DISCOVERY, "code_challenge_methods_supported": ["S256", "plain"]})
    response = await drive(endpoints(Inner(), discovery=discovery), "GET", ASM)
    assert response.json()["code_challenge_methods_supported"] == ["S256", "plain"]


async def test_asm_is_404_when_the_gateway_fronts_no_authorization_server():
    response = await drive(endpoints(Inner(), compiled_mcp(None), adapter=None), "GET", ASM)
    assert response.status == 404
    assert response.json() == {
        "error": "not_found",
        "error_description": "this gateway does not front an authorization server for this "
        "route (mcp.provider is not set); use the issuer named in the "
        "protected resource metadata",
    }


# --- client registration -------------------------------------------------------------------------


async def test_registration_at_provider_b_names_the_preregistered_client():
    discovery = Discovery(None)  # not needed: provider B's registration is answered locally
    response = await drive(
        endpoints(Inner(), discovery=discovery),
        "POST",
        REGISTRATION,
        headers=[(b"content-type", b"application/json")],
        body=[REGISTER[:20], REGISTER[20:]],
    )
    assert response.status == 201
    assert response.header(b"content-type") == b"application/json"
    assert response.header(b"cache-control") == b"no-store"
    assert response.header(b"content-length") == str(len(response.body)).encode()
    document = response.json()
    assert {k: v for k, v in document.items() if k != "client_id_issued_at"} == {
        "client_id": "mcp-public",
        "token_endpoint_auth_method": "none",
        "grant_types": ["authorization_code", "refresh_token"],
        "response_types": ["code"],
        "redirect_uris": ["http://127.0.0.1:33418/callback"],
        "client_name": "Inspector",
    }
    assert discovery.gets == 0


async def test_registration_at_keycloak_is_handed_the_discovery_document_and_relayed():
    adapter = ForwardingAdapter()
    response = await drive(
        endpoints(Inner(), compiled_mcp("Keycloak"), adapter=adapter),
        "POST",
        REGISTRATION,
        body=REGISTER,
    )
    assert (response.status, response.body) == (201, b'{"client_id": "dyn-1"}')
    assert adapter.calls == [(orjson.loads(REGISTER), REGISTER, DISCOVERY)]


async def test_registration_at_keycloak_without_discovery_is_502():
    adapter = ForwardingAdapter()
    response = await drive(
        endpoints(Inner(), compiled_mcp("Keycloak"), adapter=adapter, discovery=Discovery(None)),
        "POST",
        REGISTRATION,
        body=REGISTER,
    )
    assert response.status == 502
    assert response.json() == {
        "error": "server_error",
        "error_description": "the provider's discovery document could not be fetched: GET "
        "http://idp/.well-known/openid-configuration: connection refused",
    }
    assert adapter.calls == []


async def test_a_refusal_from_the_provider_keeps_its_status_and_error():
    adapter = ForwardingAdapter(RegistrationError(504, "server_error", "the provider is slow"))
    response = await drive(
        endpoints(Inner(), compiled_mcp("Keycloak"), adapter=adapter),
        "POST",
        REGISTRATION,
        body=REGISTER,
    )
    assert response.status == 504
    assert response.json() == {"error": "server_error", "error_description": "the provider is slow"}


@pytest.mark.parametrize(
    ("body", "error"),
    [
        (b"{not json", "invalid_client_metadata"),
        (b'{"redirect_uris": ["javascript:alert(1)"]}', "invalid_redirect_uri"),
    ],
)
async def test_a_bad_registration_body_is_400_and_never_reaches_the_provider(body, error):
    adapter = ForwardingAdapter()
    response = await drive(
        endpoints(Inner(), compiled_mcp("Keycloak"), adapter=adapter),
        "POST",
        REGISTRATION,
        body=body,
    )
    assert response.status == 400
    assert response.json()["error"] == error
    assert adapter.calls == []


async def test_a_registration_body_over_64_kib_is_413():
    adapter = ForwardingAdapter()
    response = await drive(
        endpoints(Inner(), compiled_mcp("Keycloak"), adapter=adapter),
        "POST",
        REGISTRATION,
        body=[b" " * 40_000, b" " * 40_000, b"{}"],
    )
    assert response.status == 413
    assert response.json() == {
        "error": "request_too_large",
        "error_description": "the request body exceeds 65536 bytes, the limit of a client "
        "registration (fixed)",
    }
    assert adapter.calls == []


async def test_registration_is_404_without_a_provider():
    response = await drive(
        endpoints(Inner(), compiled_mcp(None), adapter=None), "POST", REGISTRATION, body=REGISTER
    )
    assert response.status == 404
    assert response.json()["error"] == "not_found"


# --- everything else ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/mcp",
        "/mcp/",
        "/.well-known/oauth-protected-resource/other",
        ASM + "/other",
        "/.well-known/oauth-protected-resource/mcpx",
    ],
)
async def test_other_paths_go_on_untouched(path):
    inner = Inner()
    response = await drive(
        endpoints(inner),
        "POST",
        path,
        body=b"{}",
        inner=inner,
        headers=[(b"authorization", b"Bearer t")],
    )
    assert response.reached
    assert response.status == 200
    assert inner.last.scope["path"] == path
    assert inner.last.headers == [(b"host", b"gw.test"), (b"authorization", b"Bearer t")]
    assert inner.last.body == b"{}"


async def test_broker_mode_handlers_take_over_their_paths():
    async def own_metadata(scope: Scope, receive: Receive, send: Send) -> None:
        await send_json(send, 200, {"issuer": "http://gw.test/mcp"})

    inner = Inner()
    app = endpoints(inner, extra={ASM: own_metadata, "/mcp/token": own_metadata})
    metadata = await drive(app, "GET", ASM)
    token = await drive(app, "POST", "/mcp/token/", inner=inner)
    assert metadata.json() == token.json() == {"issuer": "http://gw.test/mcp"}
    assert not token.reached
