"""The demo's notes route as the gateway loads it: beside the first route's resources (both
flavours' provisioning output), every policy is Accepted and Attached when the gateway has a
user-token store, the notes route signs callers in exactly as the first one (its providers,
Broker client and group rule), and its backend credential is `userOAuth` at the notes server's
own issuer with the client secret from a file; without a store the gateway refuses it."""

from __future__ import annotations

from pathlib import Path

import pytest

from mcp_oauth_gateway.authorization_server_modes import AuthorizationServerMode
from mcp_oauth_gateway.controlplane import build_snapshot
from mcp_oauth_gateway.controlplane.deployment import Deployment
from mcp_oauth_gateway.demo import notes_resources
from mcp_oauth_gateway.idp import resources
from mcp_oauth_gateway.provider_kinds import ProviderKind
from mcp_oauth_gateway.resources import load_paths

GATEWAY = "http://127.0.0.1:8080"
IDP = "http://127.0.0.1:9000"


def main_values(provider: ProviderKind) -> resources.GatewayValues:
    if provider is ProviderKind.KEYCLOAK:
        issuer, jwks, audience = (
            f"{IDP}/realms/master",
            "/realms/master/protocol/openid-connect/certs",
            f"{GATEWAY}/mcp",
        )
        client, group = "mcp-gateway", "users"
    else:
        issuer, jwks, audience = f"{IDP}/application/o/mcp/", "/application/o/mcp/jwks/", "abc123"
        client, group = "abc123", "mcp-agent"
    return resources.GatewayValues(
        provider=provider,
        idp_url=IDP,
        issuer=issuer,
        jwks_path=jwks,
        audiences=(audience,),
        client_id=client,
        resource=f"{GATEWAY}/mcp",
        backend="http://127.0.0.1:8000/mcp",
        group=group,
        mode=AuthorizationServerMode.BROKER,
    )


def notes_route(secret: Path) -> notes_resources.NotesRoute:
    return notes_resources.NotesRoute(
        gateway=GATEWAY,
        server="http://127.0.0.1:8001/mcp",
        issuer="http://127.0.0.1:9001/realms/master",
        client_id="mcp-oauth-gateway",
        secret_file=secret,
        scopes=("notes",),
    )


def written(tmp_path: Path, provider: ProviderKind) -> Path:
    secret = tmp_path / "notes-client-secret"
    secret.write_text("s3cret\n")
    main = main_values(provider)
    target = resources.write(main, tmp_path / "resources")
    notes_resources.write(main, notes_route(secret), target.parent)
    return target.parent


@pytest.mark.parametrize("provider", [ProviderKind.KEYCLOAK, ProviderKind.AUTHENTIK])
def test_both_routes_are_accepted_and_sign_callers_in_alike(tmp_path, provider):
    loaded = load_paths([written(tmp_path, provider)])
    snapshot = build_snapshot(loaded, Deployment(user_token_store="sqlite"))
    assert snapshot.ok, (snapshot.errors, [p.conditions for p in snapshot.policies])
    policies = {p.resource.metadata.name: p.resource for p in loaded.of_kind("GatewayPolicy")}
    first, notes = policies["mcp-authn"].spec.traffic, policies["notes-authn"].spec.traffic
    assert notes.jwt_authentication.providers == first.jwt_authentication.providers
    assert notes.authorization == first.authorization
    assert notes.jwt_authentication.mcp.client_id == first.jwt_authentication.mcp.client_id
    resource = notes.jwt_authentication.mcp.resource_metadata.resource
    assert resource == f"{GATEWAY}/notes/mcp"
    user_oauth = policies["notes-authn"].spec.backend.credentials.user_oauth
    assert user_oauth.issuer == "http://127.0.0.1:9001/realms/master"
    assert user_oauth.client_id == "mcp-oauth-gateway"
    assert policies["mcp-authn"].spec.backend is None


def test_without_a_user_token_store_the_notes_route_is_refused(tmp_path):
    loaded = load_paths([written(tmp_path, ProviderKind.KEYCLOAK)])
    snapshot = build_snapshot(loaded, Deployment())
    ok = {p.key: p.ok for p in snapshot.policies}
    assert ok == {"default/mcp-authn": True, "default/notes-authn": False}


def test_the_redirect_uris_the_route_provider_must_allow():
    assert notes_resources.redirect_uris(GATEWAY) == (
        f"{GATEWAY}/notes/mcp/oauth/callback",
        f"{GATEWAY}/notes/mcp/connect/signed-in",
    )
