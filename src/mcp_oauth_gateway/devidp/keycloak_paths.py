"""Where the Keycloak flavour's `master` realm answers: its OpenID endpoints, its dynamic client
registration and its admin API, as paths under the server's base URL."""

from __future__ import annotations

REALM = "master"
REALM_ID = "master-realm-id"
REALM_PATH = f"/realms/{REALM}"
OIDC = f"{REALM_PATH}/protocol/openid-connect"
DISCOVERY = f"{REALM_PATH}/.well-known/openid-configuration"
REGISTRATION = f"{REALM_PATH}/clients-registrations/openid-connect"
ADMIN = f"/admin/realms/{REALM}"
