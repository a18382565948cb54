"""`spec.backend.credentials.tokenExchange` against provider A's own token exchange: real
Keycloak 26's standard token exchange (RFC 8693) in a realm of this module's own (`exchange`;
the session's server is shared, and test_provider_a.py owns its master realm), and the dev IdP's
Keycloak flavour (master realm only) held to the same assertions where it can be.

The realm is set up by the product's `idp keycloak --realm … --token-exchange-client …
--token-exchange-audience …`, the gateway serves what it wrote, and a user signs in with the
TypeScript SDK (Facade: anonymous DCR forwarded to the provider, its login page filled in). The
backend (the `mcp` SDK server, which records every request's headers) shows what it was sent:
a token Keycloak signed for the exchange audience, never the caller's. Exchanges Keycloak
refuses reach the caller as a 502 naming the provider's reason, and nothing reaches the backend.
"""

from __future__ import annotations

import json
import shutil
import uuid
from collections.abc import Callable, Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest

from keycloak_realm_support import (
    audiences,
    edit_resources,
    listen_on,
    of_kind,
    serving,
    user_id,
    user_token,
    verified_claims,
)
from keycloak_support import (
    FLAVOURS,
    KEYCLOAK_ONLY,
    USER_PASSWORD,
    Provider,
    RealKeycloak,
    either_provider,
    idp_keycloak,
)
from node_clients import run_ts_client
from support import (
    INITIALIZE,
    backend_requests,
    free_port,
    mcp_headers,
    unverified_claims,
    wait_for_keyset,
)

CLIENT = "gateway-exchange"
AUDIENCE = "mcp-backend"
# A client of the realm that no client scope of the exchange client gives as an audience:
# Keycloak's `audience` only narrows what the requester's scopes give, so it refuses.
ELSEWHERE = "mcp-elsewhere"
ENABLED = "standard.token.exchange.enabled"
SECRET_FILE = "token-exchange-client-secret"


provider = pytest.fixture(scope="module", params=FLAVOURS, name="provider")(either_provider)


@dataclass
class Exchange:
    provider: Provider
    realm: str
    out: Path
    args: list[str]  # what `idp keycloak` was run with
    gateway: str  # exchanges users' tokens for AUDIENCE
    # The same policy with one thing Keycloak refuses (VARIANTS), and `per-target`.
    variants: dict[str, str]
    backend: str

    @property
    def issuer(self) -> str:
        return self.provider.issuer(self.realm)


def _set_up(provider: Provider, realm: str, gateway: str, backend: str, out: Path) -> list[str]:
    args = [
        *("--realm", realm, "--resource", f"{gateway}/mcp", "--backend", f"http://{backend}/mcp"),
        *("--user", "alice:alice@example.com", "--user", "dave:dave@example.com"),
        *("--token-exchange-client", CLIENT, "--token-exchange-audience", AUDIENCE),
        *("--allow-anonymous-dcr", "--mode", "Facade", "--output-dir", str(out)),
    ]
    done = idp_keycloak(provider, *args)
    assert done.returncode == 0, done.stderr
    created = provider.admin("POST", "/clients", realm, json={"clientId": ELSEWHERE})
    assert created.status_code == 201, created.text
    return args


def _another_audience(exchange: dict[str, Any], directory: Path) -> None:
    exchange["audience"] = ELSEWHERE


def _another_secret(exchange: dict[str, Any], directory: Path) -> None:
    """A secret that is not the client's (one rotated at Keycloak, the gateway not told)."""
    (directory / "old-secret").write_text("not-the-secret-keycloak-holds\n")
    exchange["clientSecret"] = {"file": str(directory / "old-secret")}


def _per_target(out: Path, directory: Path) -> Path:
    """The generated resources on another port, their backend served as two targets of one
    federated route (the same MCP server twice): `main` exchanging for AUDIENCE, `elsewhere`
    for ELSEWHERE (which the provider refuses), credentials per target and no default."""
    directory.mkdir()
    config = directory / "gateway.yaml"
    config.write_text((out / "gateway.yaml").read_text())

    def edit(documents: list[dict[str, Any]]) -> None:
        listen_on(documents, free_port())
        mcp = of_kind(documents, "GatewayBackend")["spec"]["mcp"]
        [target] = mcp["targets"]
        mcp["targets"] = [{**target, "name": "main"}, {**target, "name": "elsewhere"}]
        credentials = of_kind(documents, "GatewayPolicy")["spec"]["backend"]["credentials"]
        exchange = credentials.pop("tokenExchange")
        credentials["targets"] = [
            {"name": "main", "tokenExchange": exchange},
            {"name": "elsewhere", "tokenExchange": {**exchange, "audience": ELSEWHERE}},
        ]

    edit_resources(config, edit)
    return directory


Change = Callable[[dict[str, Any], Path], None]
VARIANTS: dict[str, Change] = {"elsewhere": _another_audience, "stale-secret": _another_secret}


def _variant(out: Path, directory: Path, change: Change) -> Path:
    """The generated resources on another port, their tokenExchange changed by `change`."""
    directory.mkdir()
    config = directory / "gateway.yaml"
    config.write_text((out / "gateway.yaml").read_text())

    def edit(documents: list[dict[str, Any]]) -> None:
        listen_on(documents, free_port())
        policy = of_kind(documents, "GatewayPolicy")
        change(policy["spec"]["backend"]["credentials"]["tokenExchange"], directory)

    edit_resources(config, edit)
    return directory


@pytest.fixture(scope="module")
def exchange(
    provider: Provider, backend: str, logs: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Exchange]:
    # The dev IdP serves the master realm only; real Keycloak gets a realm of this module's own.
    realm = "exchange" if isinstance(provider, RealKeycloak) else "master"
    tmp = tmp_path_factory.mktemp("provider-a-exchange")
    gateway = f"http://127.0.0.1:{free_port()}"
    args = _set_up(provider, realm, gateway, backend, tmp / "out")
    name = f"gateway-a-exchange-{provider.name}"
    with ExitStack() as stack:
        base = stack.enter_context(serving(tmp / "out", logs, name))
        variants = {
            variant: stack.enter_context(
                serving(_variant(tmp / "out", tmp / variant, change), logs, f"{name}-{variant}")
            )
            for variant, change in VARIANTS.items()
        }
        per_target = _per_target(tmp / "out", tmp / "per-target")
        variants["per-target"] = stack.enter_context(serving(per_target, logs, f"{name}-per"))
        for started in (base, *variants.values()):
            wait_for_keyset(started, user_token(provider, realm, "alice"))
        yield Exchange(provider, realm, tmp / "out", args, base, variants, backend)


def _client(setup: Exchange, client_id: str) -> dict[str, Any]:
    found = setup.provider.admin("GET", "/clients", setup.realm, params={"clientId": client_id})
    return next(c for c in found.json() if c["clientId"] == client_id)


def test_idp_keycloak_made_a_confidential_exchange_client(exchange):
    client = _client(exchange, CLIENT)
    assert client["publicClient"] is False
    assert client["attributes"][ENABLED] == "true"
    path = f"/clients/{client['id']}/optional-client-scopes"
    optional = exchange.provider.admin("GET", path, exchange.realm).json()
    assert f"{AUDIENCE}-audience" in [s["name"] for s in optional]
    secret_file = exchange.out / SECRET_FILE
    assert secret_file.stat().st_mode & 0o777 == 0o600
    assert f"file: {secret_file.resolve()}" in (exchange.out / "gateway.yaml").read_text()


def test_a_second_run_changes_nothing(exchange, tmp_path):
    # On a copy of the output: the gateway reloads a rewritten gateway.yaml (even one written
    # the same), and a reload drops the tokens it has exchanged.
    again = tmp_path / "again"
    shutil.copytree(exchange.out, again)
    args = [str(again) if a == str(exchange.out) else a for a in exchange.args]
    second = idp_keycloak(exchange.provider, *args)
    assert second.returncode == 0, second.stderr
    for change in ("created", "added", " now "):
        assert change not in second.stderr, second.stderr
    assert f"exchange client {CLIENT!r} exists; its secret file is kept" in second.stderr
    assert (again / SECRET_FILE).read_text() == (exchange.out / SECRET_FILE).read_text()
    written = (exchange.out / "gateway.yaml").read_text()
    assert (again / "gateway.yaml").read_text() == written.replace(
        str(exchange.out.resolve()), str(again.resolve())
    )


def test_a_run_with_a_secret_keycloak_does_not_accept_stops_naming_the_file(exchange, tmp_path):
    again = tmp_path / "again"
    shutil.copytree(exchange.out, again)
    (again / SECRET_FILE).write_text("not-the-secret-keycloak-holds\n")
    args = [str(again) if a == str(exchange.out) else a for a in exchange.args]
    second = idp_keycloak(exchange.provider, *args)
    assert second.returncode != 0, second.stderr
    assert f"Keycloak does not accept the secret in {again / SECRET_FILE}" in second.stderr
    assert "not-the-secret-keycloak-holds" not in second.stdout + second.stderr


def _authorizations(backend: str) -> list[tuple[dict[str, str], str | None]]:
    """(headers, bearer token or None) of every request the backend has received."""
    seen = []
    for request in backend_requests(backend):
        headers = dict(request["headers"])
        value = headers.get("authorization")
        seen.append((headers, value.removeprefix("Bearer ") if value else None))
    return seen


@dataclass
class SignedIn:
    report: dict[str, Any]  # the TypeScript client's
    caller: str  # the access token the client signed in with
    sent: list[str | None]  # the Authorization of each request of its session at the backend
    everything: str  # every header the backend has received, as text


@pytest.fixture(scope="module")
def signed_in(exchange: Exchange) -> SignedIn:
    report = run_ts_client(f"{exchange.gateway}/mcp", "alice", USER_PASSWORD)
    assert report["ok"], report
    assert report["add"]["structuredContent"] == {"result": 5}
    seen = _authorizations(exchange.backend)
    session = [t for h, t in seen if h.get("mcp-session-id") == report["sessionId"]]
    return SignedIn(report, report["accessToken"], session, str([h for h, _ in seen]))


def test_the_backend_gets_keycloaks_exchanged_token_never_the_callers(exchange, signed_in):
    mine = unverified_claims(signed_in.caller)
    assert mine["iss"] == exchange.issuer
    assert AUDIENCE not in audiences(mine)
    assert CLIENT in audiences(mine)  # Keycloak exchanges only tokens naming the requester
    assert signed_in.caller not in signed_in.everything
    assert len(signed_in.sent) >= 3, signed_in.sent  # list, two calls, the session's end
    assert len(set(signed_in.sent)) == 1, signed_in.sent  # one exchange served the session
    token = signed_in.sent[0]
    assert token is not None
    assert token != signed_in.caller
    claims = verified_claims(exchange.provider, exchange.realm, token)  # Keycloak signed it
    assert claims["iss"] == exchange.issuer
    assert audiences(claims) == [AUDIENCE]
    assert claims["azp"] == CLIENT
    assert claims["sub"] == mine["sub"]
    assert claims["typ"] == "Bearer"


def test_the_exchanged_token_belongs_to_the_callers_session(signed_in):
    """Keycloak 26.7.3 keeps the subject token's `sid` (docs/token-exchange.md §1.3 read from
    the source that a transient session drops it): a backend can tell which of the user's
    sessions calls."""
    sent = signed_in.sent[0]
    assert sent is not None
    assert unverified_claims(sent)["sid"] == unverified_claims(signed_in.caller)["sid"]


def _refused(base: str, token: str) -> tuple[httpx.Response, str]:
    mark = uuid.uuid4().hex
    headers = mcp_headers(token, **{"Mcp-Param-Mark": mark})
    return httpx.post(f"{base}/mcp", json=INITIALIZE, headers=headers, timeout=30), mark


def _assert_refused(exchange: Exchange, base: str, token: str, reason: str) -> None:
    answer, mark = _refused(base, token)
    assert answer.status_code == 502, answer.text
    body = answer.json()
    assert body["error"] == "backend_credentials_unavailable"
    assert f"the provider refused: {reason}" in body["error_description"]
    assert token not in answer.text
    for headers, _ in _authorizations(exchange.backend):
        assert headers.get("mcp-param-mark") != mark, "a refused call reached the backend"
        assert token not in str(headers)


def test_an_audience_keycloak_will_not_exchange_for_is_a_clear_error(exchange):
    token = user_token(exchange.provider, exchange.realm, "alice")
    reason = f"invalid_request: Requested audience not available: {ELSEWHERE}"
    _assert_refused(exchange, exchange.variants["elsewhere"], token, reason)


def test_a_secret_keycloak_does_not_hold_is_a_clear_error(exchange):
    """Keycloak 26.7.3 answers a known client with a wrong secret `unauthorized_client` (401),
    not RFC 6749's `invalid_client` (which it keeps for an unknown client)."""
    token = user_token(exchange.provider, exchange.realm, "alice")
    reason = "unauthorized_client: Invalid client or Invalid client credentials"
    _assert_refused(exchange, exchange.variants["stale-secret"], token, reason)


def test_a_signed_out_users_token_is_not_exchanged(exchange):
    """The user's sessions end at Keycloak; the access token still verifies at the gateway
    (signature, expiry), but Keycloak exchanges only a token of a live session."""
    provider, realm = exchange.provider, exchange.realm
    token = user_token(provider, realm, "dave")
    signed_out = provider.admin("POST", f"/users/{user_id(provider, realm, 'dave')}/logout", realm)
    assert signed_out.status_code == 204, signed_out.text
    _assert_refused(exchange, exchange.gateway, token, "invalid_request: Invalid token")


def _client_without_the_exchange_audience(exchange: Exchange) -> str:
    """A direct-grant client whose tokens pass the gateway (the resource audience, groups) but
    do not name the exchange client: its own mappers instead of the realm's `mcp` scope."""
    provider, realm, name = exchange.provider, exchange.realm, "no-exchange-audience"
    body = {"clientId": name, "publicClient": True, "directAccessGrantsEnabled": True}
    assert provider.admin("POST", "/clients", realm, json=body).status_code == 201
    client = _client(exchange, name)["id"]
    scopes = provider.admin("GET", f"/clients/{client}/default-client-scopes", realm).json()
    mcp = next(s["id"] for s in scopes if s["name"] == "mcp")
    path = f"/clients/{client}/default-client-scopes/{mcp}"
    assert provider.admin("DELETE", path, realm).status_code == 204
    resource = f"{exchange.gateway}/mcp"  # the audience the gateway accepts
    for mapper, config in (
        ("oidc-audience-mapper", {"included.custom.audience": resource}),
        ("oidc-group-membership-mapper", {"claim.name": "groups", "full.path": "false"}),
    ):
        model = {
            "name": mapper,
            "protocol": "openid-connect",
            "protocolMapper": mapper,
            "config": {**config, "access.token.claim": "true"},
        }
        path = f"/clients/{client}/protocol-mappers/models"
        assert provider.admin("POST", path, realm, json=model).status_code == 201
    return name


# Real Keycloak only: the dev IdP's admin API has no client-level protocol mappers and cannot
# take a default scope off a client, so it cannot make such a client.
@KEYCLOAK_ONLY
def test_a_token_that_does_not_name_the_exchange_client_is_not_exchanged(exchange):
    client = _client_without_the_exchange_audience(exchange)
    token = user_token(exchange.provider, exchange.realm, "alice", client)
    claims = unverified_claims(token)
    assert CLIENT not in audiences(claims)
    assert claims["groups"] == ["users"]  # the gateway's own rules let it in
    reason = "access_denied: Client is not within the token audience"
    _assert_refused(exchange, exchange.gateway, token, reason)


def _rpc(base: str, headers: dict[str, str], body: dict[str, Any]) -> dict[str, Any]:
    """The JSON-RPC answer to `body`, read from JSON or from an event stream's data."""
    answer = httpx.post(f"{base}/mcp", json=body, headers=headers, timeout=30)
    assert answer.status_code == 200, answer.text
    if answer.headers["content-type"].startswith("text/event-stream"):
        lines = [line for line in answer.text.splitlines() if line.startswith("data: ")]
        found: dict[str, Any] = json.loads(lines[-1].removeprefix("data: "))
        return found
    parsed: dict[str, Any] = answer.json()
    return parsed


def test_each_target_gets_its_own_exchange_and_a_refusal_fails_its_target_alone(exchange):
    """Credentials per target on a federated route: Keycloak's token for `main`'s audience
    reaches the server as `main`; `elsewhere`, whose audience Keycloak refuses, is left out of
    the list and its call answered JSON-RPC -32603 with Keycloak's reason."""
    token = user_token(exchange.provider, exchange.realm, "alice")
    base = exchange.variants["per-target"]
    mark = uuid.uuid4().hex
    headers = mcp_headers(token, **{"Mcp-Param-Mark": mark})
    opened = httpx.post(f"{base}/mcp", json=INITIALIZE, headers=headers, timeout=30)
    assert opened.status_code == 200, opened.text
    headers["Mcp-Session-Id"] = opened.headers["mcp-session-id"]
    listed = _rpc(base, headers, {"jsonrpc": "2.0", "id": 2, "method": "tools/list"})
    assert sorted(t["name"] for t in listed["result"]["tools"]) == ["main_add", "main_count"]
    call = {"name": "main_add", "arguments": {"a": 2, "b": 3}}
    added = _rpc(base, headers, {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": call})
    assert added["result"]["structuredContent"] == {"result": 5}
    call = {"name": "elsewhere_add", "arguments": {"a": 2, "b": 3}}
    refused = _rpc(
        base, headers, {"jsonrpc": "2.0", "id": 4, "method": "tools/call", "params": call}
    )
    assert refused["error"]["code"] == -32603
    assert "'elsewhere'" in refused["error"]["message"]
    reason = f"invalid_request: Requested audience not available: {ELSEWHERE}"
    assert f"the provider refused: {reason}" in refused["error"]["message"]
    sent = [t for h, t in _authorizations(exchange.backend) if h.get("mcp-param-mark") == mark]
    assert len(sent) >= 3, sent  # initialize, the list and the call reached `main`
    assert token not in sent
    for exchanged in set(sent):
        assert exchanged is not None
        claims = verified_claims(exchange.provider, exchange.realm, exchanged)
        assert audiences(claims) == [AUDIENCE]
