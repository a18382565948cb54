"""Token exchange at the dev IdP's authentik flavour (authentik 2026.8's rules): the gateway
exchanges a user's token at the provider that issued it for one issued by the backend's own
provider (its issuer and key, `aud` = the backend's client id); an MCP server that validates its
own audience accepts it and never sees the caller's token. The refusals are authentik's: all
400, a fixed description per code."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from exchange_support import ExchangeConfig, call_whoami, resources
from idp_support import BOOTSTRAP_TOKEN, USER_PASSWORD, cli, start_dev_idp
from support import (
    PEERS,
    Process,
    free_port,
    gateway_cmd,
    unverified_claims,
    wait_for_keyset,
    wait_for_port,
)

GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"


@dataclass
class Realm:
    url: str
    user_client: str  # the provider users sign in at
    exchange_client: str
    backend_client: str
    exchange_secret: str

    def issuer(self, slug: str) -> str:
        return f"{self.url}/application/o/{slug}/"


def _api(url: str) -> httpx.Client:
    return httpx.Client(
        base_url=f"{url}/api/v3", headers={"Authorization": f"Bearer {BOOTSTRAP_TOKEN}"}
    )


def provision(url: str, tmp: Path, gateway_port: int, backend: str) -> Realm:
    """`idp authentik` with the token-exchange flags sets everything up; the test then lets
    the users' provider take the password grant, to sign in without a browser."""
    out = tmp / "provisioned"
    done = cli(
        *("idp", "authentik", "--url", url, "--user", "alice", "--mode", "Facade"),
        *("--redirect-uri", r"regex:http://127\.0\.0\.1:[0-9]+/.*"),
        *(
            "--resource",
            f"http://127.0.0.1:{gateway_port}/mcp",
            "--backend",
            f"http://{backend}/mcp",
        ),
        *(
            "--token-exchange-client",
            "gateway-exchange",
            "--token-exchange-audience",
            "mcp-backend",
        ),
        *("--output-dir", str(out)),
        env={"AUTHENTIK_TOKEN": BOOTSTRAP_TOKEN},
    )
    assert done.returncode == 0, done.stderr
    secret = (out / "token-exchange-client-secret").read_text().strip()
    assert secret not in done.stdout + done.stderr
    with _api(url) as api:
        made = {p["name"]: p for p in api.get("/providers/oauth2/").json()["results"]}
        users = made["mcp"]
        patched = api.patch(
            f"/providers/oauth2/{users['pk']}/",
            json={"grant_types": [*users["grant_types"], "password"]},
        )
        assert patched.status_code == 200, patched.text
    return Realm(
        url, users["client_id"], made["gateway-exchange"]["client_id"], "mcp-backend", secret
    )


@pytest.fixture(scope="module")
def realm(logs: Path, tmp_path_factory, backend: str) -> Iterator[tuple[Realm, str, str]]:
    tmp = tmp_path_factory.mktemp("exchange-authentik")
    idp, url = start_dev_idp("authentik", logs, tmp / "state.json", "--user", "alice")
    started = [idp]
    try:
        gateway_port = free_port()
        r = provision(url, tmp, gateway_port, backend)
        backend_port = free_port()
        backend_issuer = r.issuer("mcp-backend")
        checker = Process(
            "mcp-backend-auth-ak",
            [
                sys.executable,
                str(PEERS / "mcp_backend_auth.py"),
                str(backend_port),
                backend_issuer,
                f"{backend_issuer}jwks/",
                r.backend_client,
            ],
            logs,
        )
        started.append(checker)
        wait_for_port(backend_port, checker)
        config = tmp / "gateway"
        config.mkdir()
        user_issuer = unverified_claims(user_token(r))["iss"]
        (config / "resources.yaml").write_text(
            resources(
                gateway_port,
                backend_port,
                ExchangeConfig(
                    str(user_issuer),
                    "Authentik",
                    r.user_client,
                    f"{user_issuer}jwks/",
                    r.exchange_client,
                    r.backend_client,
                ),
            )
        )
        gateway = Process(
            "gateway-exchange-ak",
            gateway_cmd(config),
            logs,
            env={"EXCHANGE_SECRET": r.exchange_secret},
        )
        started.append(gateway)
        wait_for_port(gateway_port, gateway)
        yield r, f"http://127.0.0.1:{gateway_port}", f"http://127.0.0.1:{backend_port}"
    finally:
        for process in reversed(started):
            process.stop()


def user_token(r: Realm) -> str:
    answer = httpx.post(
        f"{r.url}/application/o/token/",
        data={
            "grant_type": "password",
            "client_id": r.user_client,
            "username": "alice",
            "password": USER_PASSWORD,
            "scope": "openid profile",
        },
    )
    assert answer.status_code == 200, answer.text
    return answer.json()["access_token"]


async def test_the_backend_gets_a_token_from_its_own_provider_naming_the_user(realm):
    r, gateway, backend = realm
    token = user_token(r)
    wait_for_keyset(gateway, token)
    before = len(httpx.get(f"{backend}/debug/tokens").json())
    seen = await call_whoami(gateway, token)
    assert seen["aud"] == r.backend_client
    assert seen["sub"] == unverified_claims(token)["sub"]
    received = httpx.get(f"{backend}/debug/tokens").json()[before:]
    assert received
    assert token not in received
    assert unverified_claims(received[0])["iss"] == r.issuer("mcp-backend")


@pytest.mark.parametrize(
    ("extra", "error"),
    [
        ({"resource": "http://127.0.0.1/mcp"}, "invalid_target"),
        ({"audience": "no-such-provider"}, "invalid_target"),
        ({"subject_token": "not-a-token"}, "invalid_grant"),
        ({"subject_token_type": "urn:ietf:params:oauth:token-type:id_token"}, "invalid_request"),
    ],
)
def test_refusals_are_authentiks(realm, extra, error):
    r, _, _ = realm
    data = {
        "grant_type": GRANT,
        "subject_token": user_token(r),
        "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
        "audience": r.backend_client,
        **extra,
    }
    answer = httpx.post(
        f"{r.url}/application/o/token/", data=data, auth=(r.exchange_client, r.exchange_secret)
    )
    assert answer.status_code == 400, answer.text
    assert answer.json()["error"] == error
    assert answer.json()["error_description"]
