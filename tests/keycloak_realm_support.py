"""Helpers for the modules that set up realms of provider A with the product's own `idp keycloak`
(tests/e2e/test_provider_a_exchange.py, tests/e2e/test_provider_a_realms.py): a direct-grant
client and users' tokens from it, tokens verified against the realm's own keys, the generated
gateway resources edited, and a gateway serving them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import yaml
from joserfc import jwt
from joserfc.jwk import KeySet

from keycloak_support import USER_PASSWORD, Provider
from support import Process, gateway_cmd, wait_for_port

DIRECT_GRANT_CLIENT = "direct-grant-tests"


def direct_grant_client(provider: Provider, realm: str) -> str:
    """A public client with the password grant (made after `idp keycloak`, so it has the realm's
    default scopes, the MCP scope included, as any new client does)."""
    found = provider.admin("GET", "/clients", realm, params={"clientId": DIRECT_GRANT_CLIENT})
    assert found.status_code == 200, found.text
    if not any(c["clientId"] == DIRECT_GRANT_CLIENT for c in found.json()):
        body = {
            "clientId": DIRECT_GRANT_CLIENT,
            "publicClient": True,
            "standardFlowEnabled": False,
            "directAccessGrantsEnabled": True,
        }
        created = provider.admin("POST", "/clients", realm, json=body)
        assert created.status_code == 201, created.text
    return DIRECT_GRANT_CLIENT


def user_token(provider: Provider, realm: str, username: str, client: str | None = None) -> str:
    """A user's access token from the realm (a new session each time), by the password grant of
    `client` (default: the direct-grant client made here)."""
    answer = httpx.post(
        provider.token_endpoint(realm),
        data={
            "grant_type": "password",
            "client_id": client or direct_grant_client(provider, realm),
            "username": username,
            "password": USER_PASSWORD,
        },
        timeout=30,
    )
    assert answer.status_code == 200, answer.text
    token: str = answer.json()["access_token"]
    return token


def user_id(provider: Provider, realm: str, username: str) -> str:
    found = provider.admin("GET", "/users", realm, params={"username": username, "exact": "true"})
    assert found.status_code == 200, found.text
    assert found.json(), f"no user {username!r} in realm {realm!r}"
    return str(found.json()[0]["id"])


def verified_claims(provider: Provider, realm: str, token: str) -> dict[str, Any]:
    """The token's claims, its signature checked with the keys the realm publishes."""
    certs = httpx.get(f"{provider.issuer(realm)}/protocol/openid-connect/certs", timeout=30)
    assert certs.status_code == 200, certs.text
    keys = KeySet.import_key_set(certs.json())
    return dict(jwt.decode(token, keys, algorithms=["RS256"]).claims)


def audiences(claims: dict[str, Any]) -> list[str]:
    aud = claims.get("aud")
    return [aud] if isinstance(aud, str) else list(aud or [])


def edit_resources(config: Path, edit: Callable[[list[dict[str, Any]]], None]) -> None:
    """Apply `edit` to the YAML documents of `config` (gateway.yaml as `idp keycloak` wrote it)."""
    documents = [d for d in yaml.safe_load_all(config.read_text()) if d]
    edit(documents)
    config.write_text(yaml.safe_dump_all(documents, sort_keys=False))


def of_kind(documents: list[dict[str, Any]], kind: str) -> dict[str, Any]:
    return next(d for d in documents if d and d["kind"] == kind)


def listen_on(documents: list[dict[str, Any]], port: int) -> None:
    of_kind(documents, "Gateway")["spec"]["listeners"][0]["port"] = port


@contextmanager
def serving(directory: Path, logs: Path, name: str) -> Iterator[str]:
    """A gateway serving `directory`/gateway.yaml on its listener's port, stopped on exit;
    yields its base URL."""
    text = (directory / "gateway.yaml").read_text()
    documents = [d for d in yaml.safe_load_all(text) if d]
    port = int(of_kind(documents, "Gateway")["spec"]["listeners"][0]["port"])
    process = Process(name, gateway_cmd(directory), logs)
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        process.stop()


__all__ = [
    "audiences",
    "direct_grant_client",
    "edit_resources",
    "listen_on",
    "of_kind",
    "serving",
    "user_id",
    "user_token",
    "verified_claims",
]
