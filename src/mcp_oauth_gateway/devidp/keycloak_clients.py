"""The realm's clients in the Keycloak flavour: a client's record by client id, the record as the
OpenID provider sees it (a redirect URI ending in `*` is a wildcard), and what `PUT
/admin/realms/master/clients/{id}` does to a record: a client representation (as `GET …/clients`
shows it, changed) updates the fields the dev IdP keeps and leaves the rest."""

from __future__ import annotations

from typing import Any

from .oidc import OAuthClient
from .store import Record, Store

# Representation flag → the grant it stands for.
_FLAGS = {
    "standardFlowEnabled": ("authorization_code", "refresh_token"),
    "directAccessGrantsEnabled": ("password",),
    "serviceAccountsEnabled": ("client_credentials",),
}
_BOOLEANS = ("publicClient", "consentRequired", "fullScopeAllowed")
_LISTS = ("redirectUris", "webOrigins")


def client_record(store: Store, client_id: str) -> Record | None:
    """The record of the client with this client id."""
    return next((c for c in store.collection("kc_clients") if c["clientId"] == client_id), None)


def oauth_client(record: Record) -> OAuthClient:
    """A client's record as the OpenID provider sees it."""
    uris = tuple(("wildcard" if u.endswith("*") else "strict", u) for u in record["redirectUris"])
    return OAuthClient(
        client_id=record["clientId"],
        public=record["publicClient"],
        secret=record["secret"],
        redirect_uris=uris,
        grant_types=frozenset(record["grantTypes"]),
        consent=record.get("consentRequired", False),
        name=record.get("name") or record["clientId"],
    )


def update_client(record: Record, body: dict[str, Any]) -> None:
    """Apply a client representation to a client's record."""
    if isinstance(body.get("name"), str):
        record["name"] = body["name"]
    for name in _BOOLEANS:
        if isinstance(body.get(name), bool):
            record[name] = body[name]
    for name in _LISTS:
        if isinstance(body.get(name), list):
            record[name] = [v for v in body[name] if isinstance(v, str)]
    grants = list(record["grantTypes"])
    for flag, granted in _FLAGS.items():
        if body.get(flag) is True:
            grants += [g for g in granted if g not in grants]
        elif body.get(flag) is False:
            grants = [g for g in grants if g not in granted]
    record["grantTypes"] = grants
    attributes = body.get("attributes")
    if isinstance(attributes, dict):
        record.setdefault("attributes", {}).update(
            {k: v for k, v in attributes.items() if isinstance(v, str)}
        )
    if record.get("publicClient"):
        record["secret"] = None
    elif isinstance(body.get("secret"), str):
        record["secret"] = body["secret"]
