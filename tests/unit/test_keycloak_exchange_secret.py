"""`idp keycloak --token-exchange-client` for a second realm of the same policy: the policy names
one secret file, so the exchange client made in the second realm gets the secret already in it
(found with real Keycloak: the second run wrote a new secret over the first realm's, and the
first realm's exchanges were then refused as unauthorized_client). A run that finds the client
checks that Keycloak accepts the file's secret, rather than keep a file that cannot work."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

import httpx
import pytest

from mcp_oauth_gateway.idp import keycloak_exchange
from mcp_oauth_gateway.idp.exchange import ExchangeOptions, write_secret
from mcp_oauth_gateway.idp.steps import Progress, StepError


class Realm:
    """The admin REST API as an empty realm answers keycloak_exchange.provision: what is
    POSTed to a path is listed by a GET of it (filtered by clientId); PUTs are accepted."""

    def __init__(self) -> None:
        self.made: dict[str, list[dict[str, Any]]] = {}

    def call(self, method: str, path: str, **kwargs: Any) -> httpx.Response:
        listed = self.made.setdefault(path, [])
        if method == "POST":
            listed.append({"id": f"id-{len(listed)}", **kwargs["json"]})
            return httpx.Response(201)
        if method == "PUT":
            return httpx.Response(204)
        wanted = kwargs.get("params", {}).get("clientId")
        return httpx.Response(200, json=[c for c in listed if wanted in (None, c.get("clientId"))])

    def token_request(self, form: dict[str, str], client: tuple[str, str]) -> httpx.Response:
        """Client authentication first, as Keycloak's token endpoint does it."""
        known = [c for c in self.made.get("/clients", []) if c["clientId"] == client[0]]
        if not known or known[0].get("secret") != client[1]:
            return httpx.Response(401, json={"error": "unauthorized_client"})
        return httpx.Response(400, json={"error": "invalid_request"})

    def expect(self, response: httpx.Response, *ok: int) -> httpx.Response:
        assert response.status_code in ok
        return response

    def secret_of(self, client_id: str) -> str:
        clients = self.made["/clients"]
        return str(next(c for c in clients if c["clientId"] == client_id)["secret"])


def provision(realm: Realm, secret_file: Path) -> str:
    said = io.StringIO()
    options = ExchangeOptions("gateway-exchange", "mcp-backend", secret_file)
    keycloak_exchange.provision(realm, options, "mcp-scope-id", Progress("kc", 1, said))
    return said.getvalue()


def test_the_first_realm_gets_a_new_secret_written_to_the_file(tmp_path):
    realm, secret_file = Realm(), tmp_path / "out" / "token-exchange-client-secret"
    said = provision(realm, secret_file)
    secret = realm.secret_of("gateway-exchange")
    assert secret_file.read_text() == secret + "\n"
    assert secret_file.stat().st_mode & 0o777 == 0o600
    assert secret not in said


def test_a_second_realm_gets_the_secret_already_in_the_file(tmp_path):
    secret_file = tmp_path / "token-exchange-client-secret"
    staff, partner = Realm(), Realm()
    provision(staff, secret_file)
    said = provision(partner, secret_file)
    assert partner.secret_of("gateway-exchange") == staff.secret_of("gateway-exchange")
    assert secret_file.read_text() == staff.secret_of("gateway-exchange") + "\n"
    assert "the secret already in" in said
    assert staff.secret_of("gateway-exchange") not in said


def test_a_file_that_is_not_one_secret_is_replaced(tmp_path):
    secret_file = tmp_path / "token-exchange-client-secret"
    write_secret(secret_file, "")
    realm = Realm()
    provision(realm, secret_file)
    assert secret_file.read_text() == realm.secret_of("gateway-exchange") + "\n"
    assert realm.secret_of("gateway-exchange")


def test_a_rerun_keeps_a_secret_file_keycloak_accepts(tmp_path):
    realm, secret_file = Realm(), tmp_path / "token-exchange-client-secret"
    provision(realm, secret_file)
    said = provision(realm, secret_file)
    assert "exchange client 'gateway-exchange' exists; its secret file is kept" in said
    assert secret_file.read_text() == realm.secret_of("gateway-exchange") + "\n"


def test_a_rerun_refuses_a_secret_file_keycloak_does_not_accept(tmp_path):
    """E.g. a second realm set up with another output directory, its client given a secret of
    its own, then run again with the policy's: the exchanges would all be refused."""
    realm, secret_file = Realm(), tmp_path / "token-exchange-client-secret"
    provision(realm, tmp_path / "elsewhere" / "token-exchange-client-secret")
    write_secret(secret_file, "the-policys-secret")
    with pytest.raises(StepError, match="Keycloak does not accept the secret in"):
        provision(realm, secret_file)
    assert secret_file.read_text() == "the-policys-secret\n"
