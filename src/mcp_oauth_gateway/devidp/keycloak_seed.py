"""What a fresh Keycloak `master` realm holds before anyone provisions it: the realm's RS256
signing key and the HMAC key that signs refresh tokens, the admin user, the built-in client
scopes (the realm defaults among them), the default client registration policies and the
`admin-cli` client. Each is created once; a state file keeps them across restarts."""

from __future__ import annotations

import time

from joserfc.jwk import OctKey

from .keycloak_client_scopes import BUILTIN_SCOPES
from .keycloak_paths import REALM_ID
from .keycloak_registration import seed_policies
from .settings import DevIdpSettings
from .store import Record, Store, hash_password, new_id, new_signing_key


def seed(store: Store, settings: DevIdpSettings) -> None:
    """Create what is missing of a fresh realm, and save."""
    if store.value("kc_key") is None:
        store.data["kc_key"] = new_signing_key("kc")
    if store.value("kc_hmac") is None:
        hmac_key = OctKey.generate_key(512, parameters={"kid": new_id()})
        store.data["kc_hmac"] = hmac_key.as_dict(private=True)
    _admin_user(store, settings)
    _builtin_scopes(store)
    seed_policies(store, REALM_ID)
    _admin_cli(store)
    store.save()


def _admin_user(store: Store, settings: DevIdpSettings) -> None:
    users = store.collection("kc_users")
    admin = settings.admin_username.lower()
    if not any(u["username"] == admin for u in users):
        users.append(
            {
                "id": new_id(),
                "username": admin,
                "enabled": True,
                "emailVerified": False,
                "createdTimestamp": int(time.time() * 1000),
                "password": hash_password(settings.admin_password),
                "groups": [],
                "admin": True,
            }
        )


def _builtin_scopes(store: Store) -> None:
    scopes = store.collection("kc_scopes")
    if scopes:
        return
    for name, (default, in_token) in BUILTIN_SCOPES.items():
        scope: Record = {
            "id": new_id(),
            "name": name,
            "protocol": "openid-connect",
            "attributes": {"include.in.token.scope": str(in_token).lower()},
            "protocolMappers": [],
        }
        scopes.append(scope)
        if default:
            store.ids("kc_default_default").append(scope["id"])


def _admin_cli(store: Store) -> None:
    clients = store.collection("kc_clients")
    if not any(c["clientId"] == "admin-cli" for c in clients):
        clients.append(
            {
                "id": new_id(),
                "clientId": "admin-cli",
                "name": "admin-cli",
                "publicClient": True,
                "secret": None,
                "redirectUris": [],
                "grantTypes": ["password", "refresh_token"],
                "consentRequired": False,
                "webOrigins": [],
            }
        )
