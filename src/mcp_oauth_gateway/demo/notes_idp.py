"""The notes server's own authorization server: a second dev identity provider (Keycloak
flavour) set up as a third-party service would be: its users, a `notes` scope whose tokens name
the notes server as their audience, and a confidential client for the gateway whose redirect URI
is the gateway's connect callback (what an operator registers at GitHub or Atlassian)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import httpx

from ..authorization_server_modes import AuthorizationServerMode
from ..idp import keycloak
from ..idp.steps import Progress

CLIENT_ID = "mcp-oauth-gateway"
SCOPE = "notes"
TOOL = "notes-idp"


@dataclass(frozen=True)
class NotesIdp:
    """What the gateway's `userOAuth` needs to know of it."""

    issuer: str
    client_id: str


@dataclass(frozen=True)
class NotesIdpOptions:
    """Where it is, who signs in there, and the gateway's client there."""

    url: str
    admin_password: str
    user_password: str
    users: tuple[tuple[str, str], ...]
    resource: str  # the notes server's URL: its tokens' audience
    callback: str  # the gateway's `<MCP path>/connect/callback`
    client_secret: str


def _client_body(options: NotesIdpOptions) -> dict[str, Any]:
    return {
        "clientId": CLIENT_ID,
        "name": "MCP OAuth gateway (for its users' notes)",
        "publicClient": False,
        "secret": options.client_secret,
        "standardFlowEnabled": True,
        "directAccessGrantsEnabled": False,
        "serviceAccountsEnabled": False,
        # Users are asked, as a third-party service asks before it lets an app act for them.
        "consentRequired": True,
        "redirectUris": [options.callback],
        "protocol": "openid-connect",
        "attributes": {"pkce.code.challenge.method": "S256"},
    }


def _gateway_client(admin: keycloak.KeycloakAdmin, options: NotesIdpOptions) -> str:
    """Create the gateway's confidential client, or set its secret and redirect URI."""
    found = admin.expect(admin.call("GET", "/clients", params={"clientId": CLIENT_ID}), 200)
    existing = [c for c in found.json() if c.get("clientId") == CLIENT_ID]
    body = _client_body(options)
    if not existing:
        admin.expect(admin.call("POST", "/clients", json=body), 201)
        return f"created confidential client {CLIENT_ID!r}, redirect URI {options.callback}"
    # The secret file of the demo directory is the one the gateway reads: make it the client's.
    changed = {**existing[0], **body}
    admin.expect(admin.call("PUT", f"/clients/{existing[0]['id']}", json=changed), 204)
    return f"confidential client {CLIENT_ID!r} exists; secret and redirect URI set"


def provision(options: NotesIdpOptions, http: httpx.Client) -> NotesIdp:
    """Users, scope and audience (the provisioning tool's steps), then the gateway's client."""
    progress = Progress(TOOL, len(keycloak.STEPS) + 1)
    kc = keycloak.KeycloakOptions(
        url=options.url,
        admin_user="admin",
        admin_password=options.admin_password,
        resource=options.resource,
        users=list(options.users),
        user_password=options.user_password,
        scope=SCOPE,
        backend=options.resource,
        # No Broker client: the gateway's client here is the one below.
        mode=AuthorizationServerMode.FACADE,
    )
    values = keycloak.provision(kc, http, progress)
    progress.begin("gateway's client")
    admin = keycloak.KeycloakAdmin(http, kc, progress)
    admin.login()
    progress.say(_gateway_client(admin, options))
    return NotesIdp(issuer=values.issuer, client_id=CLIENT_ID)
