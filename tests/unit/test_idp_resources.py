"""The resources `idp keycloak` and `idp authentik` print: an `https://` backend is reached
over TLS (never in the clear), an `http://` one as before."""

from __future__ import annotations

import pytest

from mcp_oauth_gateway.idp.resources import GatewayValues, render
from mcp_oauth_gateway.provider_kinds import ProviderKind
from mcp_oauth_gateway.resources.models import KINDS


def backend_target(backend: str) -> dict[str, object]:
    values = GatewayValues(
        provider=ProviderKind.KEYCLOAK,
        idp_url="http://127.0.0.1:8180",
        issuer="http://127.0.0.1:8180/realms/master",
        jwks_path="/realms/master/protocol/openid-connect/certs",
        audiences=("http://127.0.0.1:8080/mcp",),
        client_id=None,
        resource="http://127.0.0.1:8080/mcp",
        backend=backend,
        group="mcp-agent",
    )
    documents = render(values)
    for document in documents:  # every one loads as the gateway reads it
        KINDS[document["apiVersion"], document["kind"]].model_validate(document)
    (found,) = (d for d in documents if d["kind"] == "GatewayBackend")
    return found["spec"]["mcp"]["targets"][0]["static"]  # type: ignore[index,no-any-return]


@pytest.mark.parametrize(
    ("backend", "port", "tls"),
    [
        ("https://mcp.example.com/mcp", 443, {}),
        ("https://mcp.example.com:8443/mcp", 8443, {}),
        ("http://mcp-server:8000/mcp", 8000, None),
    ],
)
def test_an_https_backend_is_reached_over_tls(backend, port, tls):
    static = backend_target(backend)
    assert (static["port"], static.get("tls")) == (port, tls)
