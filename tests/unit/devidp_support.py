"""The dev IdP's Keycloak flavour in process, as `idp keycloak --allow-anonymous-dcr` leaves it."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from starlette.testclient import TestClient

from mcp_oauth_gateway.devidp import DevIdpSettings, create_app

KC = "http://127.0.0.1:8180"
ADMIN = "/admin/realms/master"
TOKEN = "/realms/master/protocol/openid-connect/token"


@contextmanager
def open_keycloak() -> Iterator[tuple[TestClient, dict[str, str]]]:
    """(client, the admin's Authorization header) of a dev IdP (admin password `pw`) whose
    trusted-hosts registration policies are gone, so clients register anonymously."""
    app = create_app(DevIdpSettings(flavour="keycloak", admin_password="pw"))
    with TestClient(app, base_url=KC, follow_redirects=False) as http:
        grant = {"grant_type": "password", "client_id": "admin-cli"}
        answer = http.post(TOKEN, data={**grant, "username": "admin", "password": "pw"})
        admin = {"Authorization": f"Bearer {answer.json()['access_token']}"}
        for policy in http.get(f"{ADMIN}/components", headers=admin).json():
            if policy["providerId"] == "trusted-hosts":
                http.delete(f"{ADMIN}/components/{policy['id']}", headers=admin)
        yield http, admin
