"""`PUT /admin/realms/master/clients/{id}` in the Keycloak flavour: a client representation (as
`GET …/clients` shows it, changed) updates the fields the dev IdP keeps and leaves the rest;
204, or 404 `Could not find client`."""

from __future__ import annotations

from typing import Any

from .store import Record

# Representation flag → the grant it stands for.
_FLAGS = {
    "standardFlowEnabled": ("authorization_code", "refresh_token"),
    "directAccessGrantsEnabled": ("password",),
    "serviceAccountsEnabled": ("client_credentials",),
}
_BOOLEANS = ("publicClient", "consentRequired", "fullScopeAllowed")
_LISTS = ("redirectUris", "webOrigins")


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
