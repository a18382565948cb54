"""`idp keycloak --token-exchange-client NAME --token-exchange-audience BACKEND`: what standard
token exchange (Keycloak ≥ 26.2) needs, as docs/token-exchange.md §1.5 records it.

- BACKEND exists as a client (the exchanged token's `aud`);
- NAME is a confidential client with `standard.token.exchange.enabled`, and its secret is
  written to a file beside the resources (never printed), which the policy names;
- users' tokens name NAME in `aud` (a mapper on the MCP client scope): Keycloak refuses to
  exchange a token whose audience does not include the requesting client;
- a client scope `<BACKEND>-audience` lets NAME ask for BACKEND's audience (`audience` only
  narrows what the requester's scopes give)."""

from __future__ import annotations

import os
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from .steps import Progress

ENABLED = "standard.token.exchange.enabled"
SECRET_FILE = "token-exchange-client-secret"


@dataclass(frozen=True)
class ExchangeOptions:
    client: str
    audience: str
    secret_file: Path


@dataclass(frozen=True)
class ExchangeValues:
    """What the generated policy's `credentials.tokenExchange` says."""

    client: str
    audience: str
    scope: str
    secret_file: Path


class Admin(Protocol):
    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """An admin REST call."""
        ...

    def expect(self, response: Any, *ok: int) -> Any:
        """The response, if its status is one of `ok`."""
        ...


def _client(admin: Admin, client_id: str) -> dict[str, Any] | None:
    found = admin.expect(admin.call("GET", "/clients", params={"clientId": client_id}), 200)
    return next((c for c in found.json() if c.get("clientId") == client_id), None)


def _ensure_backend(admin: Admin, audience: str, progress: Progress) -> None:
    if _client(admin, audience) is not None:
        progress.say(f"backend client {audience!r} exists; unchanged")
        return
    body = {"clientId": audience, "publicClient": False, "standardFlowEnabled": False}
    admin.expect(admin.call("POST", "/clients", json=body), 201)
    progress.say(f"created client {audience!r} (the exchanged tokens' audience)")


def _ensure_exchange_client(admin: Admin, options: ExchangeOptions, progress: Progress) -> None:
    existing = _client(admin, options.client)
    if existing is not None:
        if (existing.get("attributes") or {}).get(ENABLED) != "true":
            raise progress.fail(
                f"client {options.client!r} exists without standard token exchange; enable "
                f"'{ENABLED}' on it, or choose another --token-exchange-client"
            )
        if not options.secret_file.exists():
            raise progress.fail(
                f"client {options.client!r} exists but its secret is not in "
                f"{options.secret_file}; write it there, or choose another name"
            )
        progress.say(f"exchange client {options.client!r} exists; its secret file is kept")
        return
    secret = secrets.token_urlsafe(32)
    body = {
        "clientId": options.client,
        "name": "MCP OAuth gateway (token exchange)",
        "publicClient": False,
        "secret": secret,
        "standardFlowEnabled": False,
        "attributes": {ENABLED: "true"},
    }
    admin.expect(admin.call("POST", "/clients", json=body), 201)
    options.secret_file.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(options.secret_file, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secret + "\n")
    progress.say(
        f"created confidential client {options.client!r} with token exchange enabled; "
        f"secret written to {options.secret_file} (mode 600)"
    )


def _audience_mapper(name: str, audience: str) -> dict[str, Any]:
    return {
        "name": name,
        "protocol": "openid-connect",
        "protocolMapper": "oidc-audience-mapper",
        "config": {
            "included.client.audience": audience,
            "access.token.claim": "true",
            "id.token.claim": "false",
        },
    }


def _ensure_user_audience(admin: Admin, scope_id: str, client: str, progress: Progress) -> None:
    path = f"/client-scopes/{scope_id}/protocol-mappers/models"
    mappers = admin.expect(admin.call("GET", path), 200).json()
    if any(m.get("name") == "token-exchange-audience" for m in mappers):
        progress.say("users' tokens already name the exchange client; unchanged")
        return
    admin.expect(
        admin.call("POST", path, json=_audience_mapper("token-exchange-audience", client)), 201
    )
    progress.say(f"users' tokens now name {client!r} in aud (required to exchange them)")


def _ensure_backend_scope(admin: Admin, audience: str, progress: Progress) -> str:
    name = f"{audience}-audience"
    scopes = admin.expect(admin.call("GET", "/client-scopes"), 200).json()
    if any(s.get("name") == name for s in scopes):
        progress.say(f"client scope {name!r} exists; unchanged")
        return name
    body = {
        "name": name,
        "protocol": "openid-connect",
        "protocolMappers": [_audience_mapper(f"{audience}-audience", audience)],
    }
    admin.expect(admin.call("POST", "/client-scopes", json=body), 201)
    progress.say(f"created client scope {name!r} giving audience {audience!r}")
    return name


def provision(
    admin: Admin, options: ExchangeOptions, mcp_scope_id: str, progress: Progress
) -> ExchangeValues:
    """Make standard token exchange from users' tokens to the backend's audience possible."""
    _ensure_backend(admin, options.audience, progress)
    _ensure_exchange_client(admin, options, progress)
    _ensure_user_audience(admin, mcp_scope_id, options.client, progress)
    scope = _ensure_backend_scope(admin, options.audience, progress)
    return ExchangeValues(options.client, options.audience, scope, options.secret_file)
