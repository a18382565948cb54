"""`idp keycloak --token-exchange-client NAME --token-exchange-audience BACKEND`: what standard
token exchange (Keycloak ≥ 26.2) needs, as docs/token-exchange.md §1.5 records it.

- BACKEND exists as a client (the exchanged token's `aud`);
- NAME is a confidential client with `standard.token.exchange.enabled`, and its secret is
  written to a file beside the resources (never printed), which the policy names; a secret
  already in that file (a run for another realm of the same policy) is given to the new client
  instead of a new one, so one policy's exchange works for the clients of all its realms;
- users' tokens name NAME in `aud` (a mapper on the MCP client scope): Keycloak refuses to
  exchange a token whose audience does not include the requesting client;
- a client scope `<BACKEND>-audience`, an optional scope of NAME, lets NAME ask for BACKEND's
  audience (`audience` only narrows what the requester's scopes give)."""

from __future__ import annotations

import secrets
from pathlib import Path
from typing import Any, Protocol

from .exchange import ExchangeOptions, ExchangeValues, write_secret
from .steps import Progress

ENABLED = "standard.token.exchange.enabled"
GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"
ACCESS_TOKEN = "urn:ietf:params:oauth:token-type:access_token"


class Admin(Protocol):
    def call(self, method: str, path: str, **kwargs: Any) -> Any:
        """An admin REST call."""
        ...

    def expect(self, response: Any, *ok: int) -> Any:
        """The response, if its status is one of `ok`."""
        ...

    def token_request(self, form: dict[str, str], client: tuple[str, str]) -> Any:
        """A request to the realm's token endpoint as `client` (id, secret)."""
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
        kept = _secret_in(options.secret_file)
        if kept is None:
            raise progress.fail(
                f"client {options.client!r} exists but its secret is not in "
                f"{options.secret_file}; write it there, or choose another name"
            )
        if not _authenticates(admin, options.client, kept):
            raise progress.fail(
                f"client {options.client!r} exists but Keycloak does not accept the secret in "
                f"{options.secret_file} (the gateway's exchanges would be refused); write the "
                "client's secret there (its Credentials tab), or choose another name"
            )
        progress.say(f"exchange client {options.client!r} exists; its secret file is kept")
        return
    kept = _secret_in(options.secret_file)
    secret = kept or secrets.token_urlsafe(32)
    body = {
        "clientId": options.client,
        "name": "MCP OAuth gateway (token exchange)",
        "publicClient": False,
        "secret": secret,
        "standardFlowEnabled": False,
        "attributes": {ENABLED: "true"},
    }
    admin.expect(admin.call("POST", "/clients", json=body), 201)
    if kept:
        progress.say(
            f"created confidential client {options.client!r} with token exchange enabled and "
            f"the secret already in {options.secret_file} (the policy has one secret for the "
            "exchange clients of all its realms)"
        )
        return
    write_secret(options.secret_file, secret)
    progress.say(
        f"created confidential client {options.client!r} with token exchange enabled; "
        f"secret written to {options.secret_file} (mode 600)"
    )


def _authenticates(admin: Admin, client: str, secret: str) -> bool:
    """Whether Keycloak authenticates `client` with `secret`: an exchange request without a
    subject token is refused after client authentication (400) or by it (401)."""
    form = {"grant_type": GRANT, "subject_token_type": ACCESS_TOKEN}
    return bool(admin.token_request(form, (client, secret)).status_code != 401)


def _secret_in(path: Path) -> str | None:
    """The secret a run for another realm wrote, if the file holds one: a policy names one
    secret file, so the exchange clients of every realm it serves must share that secret."""
    if not path.is_file():
        return None
    lines = path.read_text().splitlines()
    return lines[0] if len(lines) == 1 and lines[0] else None


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


def _scope_named(admin: Admin, name: str) -> dict[str, Any] | None:
    scopes = admin.expect(admin.call("GET", "/client-scopes"), 200).json()
    return next((s for s in scopes if s.get("name") == name), None)


def _ensure_backend_scope(admin: Admin, audience: str, progress: Progress) -> dict[str, Any]:
    name = f"{audience}-audience"
    found = _scope_named(admin, name)
    if found is not None:
        progress.say(f"client scope {name!r} exists; unchanged")
        return found
    body = {
        "name": name,
        "protocol": "openid-connect",
        "protocolMappers": [_audience_mapper(f"{audience}-audience", audience)],
    }
    admin.expect(admin.call("POST", "/client-scopes", json=body), 201)
    progress.say(f"created client scope {name!r} giving audience {audience!r}")
    created = _scope_named(admin, name)
    if created is None:
        raise progress.fail(f"client scope {name!r} was created but is not listed")
    return created


def _ensure_optional_scope(
    admin: Admin, client_id: str, scope: dict[str, Any], progress: Progress
) -> None:
    """Keycloak applies a requested scope only if it is one of the client's own scopes."""
    client = _client(admin, client_id)
    if client is None:
        raise progress.fail(f"client {client_id!r} was created but is not listed")
    path = f"/clients/{client['id']}/optional-client-scopes"
    assigned = admin.expect(admin.call("GET", path), 200).json()
    if any(s.get("id") == scope["id"] for s in assigned):
        progress.say(f"{scope['name']!r} is already an optional scope of {client_id!r}; unchanged")
        return
    admin.expect(admin.call("PUT", f"{path}/{scope['id']}"), 204)
    progress.say(f"{scope['name']!r} is now an optional scope of {client_id!r}")


def provision(
    admin: Admin, options: ExchangeOptions, mcp_scope_id: str, progress: Progress
) -> ExchangeValues:
    """Make standard token exchange from users' tokens to the backend's audience possible."""
    _ensure_backend(admin, options.audience, progress)
    _ensure_exchange_client(admin, options, progress)
    _ensure_user_audience(admin, mcp_scope_id, options.client, progress)
    scope = _ensure_backend_scope(admin, options.audience, progress)
    _ensure_optional_scope(admin, options.client, scope, progress)
    return ExchangeValues(options.client, options.audience, scope["name"], options.secret_file)
