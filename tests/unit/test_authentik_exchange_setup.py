"""`idp authentik --token-exchange-client … --token-exchange-audience …` against the dev IdP's
authentik flavour, in process: what it creates (a confidential provider allowed the grant and
trusting the users' provider, a backend provider trusting it, both bound to applications), the
secret only in a 0600 file, a second run that writes nothing, refusals before anything is made,
and an exchange with what it wrote. The contracts test checks the calls against authentik's
OpenAPI document."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from contracts import AUTHENTIK, Recorder, validate
from mcp_oauth_gateway.idp import resources
from mcp_oauth_gateway.idp.exchange import SECRET_FILE, ExchangeOptions
from mcp_oauth_gateway.idp.steps import StepError

from .provisioning_support import AK_URL, ak_app, ak_options, api_get, run_ak, writes

GRANT = "urn:ietf:params:oauth:grant-type:token-exchange"


def exchange_options(
    tmp_path: Path, client: str = "gateway-exchange", audience: str = "mcp-backend"
):
    return ak_options(exchange=ExchangeOptions(client, audience, tmp_path / "out" / SECRET_FILE))


def providers(app) -> dict[str, dict]:
    return {p["name"]: p for p in api_get(app, "/providers/oauth2/")["results"]}


def test_creates_the_exchange_and_backend_providers_and_writes_the_secret_only_to_a_file(tmp_path):
    app, _, clock = ak_app(tmp_path)
    options = exchange_options(tmp_path)
    values, log = run_ak(app, clock, options, Recorder())
    made = providers(app)
    users, requester, backend = made["mcp"], made["gateway-exchange"], made["mcp-backend"]
    assert requester["client_type"] == "confidential"
    assert requester["grant_types"] == [GRANT]
    assert requester["jwt_federation_providers"] == [users["pk"]]
    assert requester["assigned_application_slug"] == "gateway-exchange"
    assert backend["client_id"] == "mcp-backend"
    assert backend["jwt_federation_providers"] == [requester["pk"]]
    assert backend["assigned_application_slug"] == "mcp-backend"
    assert backend["sub_mode"] == users["sub_mode"], "the exchanged token names the same sub"

    secret_file = options.exchange.secret_file
    assert secret_file.stat().st_mode & 0o777 == 0o600
    secret = secret_file.read_text().strip()
    assert secret == requester["client_secret"]
    assert secret not in log
    assert "[authentik 7/7] token exchange:" in log
    assert f"iss {AK_URL}/application/o/mcp-backend/" in log

    assert values.exchange == resources.TokenExchangeValues(
        requester["client_id"], "mcp-backend", "openid profile", str(secret_file.resolve())
    )
    policy = next(d for d in resources.render(values) if d["kind"] == "GatewayPolicy")
    assert policy["spec"]["backend"]["credentials"]["tokenExchange"] == {
        "clientId": requester["client_id"],
        "clientSecret": {"file": str(secret_file.resolve())},
        "audience": "mcp-backend",
        "scope": "openid profile",
    }

    again = Recorder()
    _, log2 = run_ak(app, clock, options, again)
    assert writes(again) == []
    assert "already set up for exchange; unchanged" in log2
    assert secret_file.read_text().strip() == secret


def user_token(app, password: str, client_id: str) -> str:
    with TestClient(app, base_url=AK_URL) as http:
        answer = http.post(
            "/application/o/token/",
            data={
                "grant_type": "password",
                "client_id": client_id,
                "username": "alice",
                "password": password,
                "scope": "openid profile",
            },
        )
    assert answer.status_code == 200, answer.text
    return answer.json()["access_token"]


def test_the_exchange_it_sets_up_works(tmp_path):
    app, settings, clock = ak_app(tmp_path)
    options = exchange_options(tmp_path)
    values, _ = run_ak(app, clock, options, Recorder())
    users = providers(app)["mcp"]
    with TestClient(app, base_url=AK_URL) as http:
        # The test signs in headlessly: the users' provider also gets the password grant.
        patched = http.patch(
            f"/api/v3/providers/oauth2/{users['pk']}/",
            json={"grant_types": [*users["grant_types"], "password"]},
            headers={"Authorization": "Bearer test-token"},
        )
        assert patched.status_code == 200, patched.text
    token = user_token(app, settings.seed_password, users["client_id"])
    exchange = values.exchange
    with TestClient(app, base_url=AK_URL) as http:
        exchanged = http.post(
            "/application/o/token/",
            data={
                "grant_type": GRANT,
                "subject_token": token,
                "subject_token_type": "urn:ietf:params:oauth:token-type:access_token",
                "audience": exchange.audience,
                "scope": exchange.scope,
            },
            auth=(exchange.client, Path(exchange.secret_file).read_text().strip()),
        )
    assert exchanged.status_code == 200, exchanged.text
    payload = exchanged.json()["access_token"].split(".")[1]
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    assert claims["aud"] == "mcp-backend"
    assert claims["iss"] == f"{AK_URL}/application/o/mcp-backend/"
    assert claims["sub"] == "alice"


def test_existing_providers_gain_what_they_lack_and_keep_what_they_have(tmp_path):
    app, _, clock = ak_app(tmp_path)
    run_ak(app, clock, exchange_options(tmp_path), Recorder())
    made = providers(app)
    with TestClient(app, base_url=AK_URL) as http:
        headers = {"Authorization": "Bearer test-token"}
        for name, body in (
            ("gateway-exchange", {"grant_types": ["client_credentials"]}),
            ("mcp-backend", {"jwt_federation_providers": [made["mcp"]["pk"]]}),
        ):
            reply = http.patch(
                f"/api/v3/providers/oauth2/{made[name]['pk']}/", json=body, headers=headers
            )
            assert reply.status_code == 200, reply.text
    recorder = Recorder()
    _, log = run_ak(app, clock, exchange_options(tmp_path), recorder)
    assert sorted(writes(recorder)) == sorted(
        f"PATCH /api/v3/providers/oauth2/{made[n]['pk']}/"
        for n in ("gateway-exchange", "mcp-backend")
    )
    after = providers(app)
    assert after["gateway-exchange"]["grant_types"] == ["client_credentials", GRANT]
    assert after["mcp-backend"]["jwt_federation_providers"] == [
        made["mcp"]["pk"],
        made["gateway-exchange"]["pk"],
    ]
    assert "added grant_types" in log


@pytest.mark.parametrize(
    ("client", "audience", "message"),
    [
        (
            "gateway exchange",
            "mcp-backend",
            "--token-exchange-client 'gateway exchange' is not one authentik accepts",
        ),
        ("gateway-exchange", "token", "--token-exchange-audience 'token' is reserved"),
        (
            "mcp",
            "mcp-backend",
            "--slug, --token-exchange-client and --token-exchange-audience must differ",
        ),
        ("same", "same", "must differ"),
    ],
)
def test_names_authentik_would_refuse_stop_before_anything_is_made(
    tmp_path, client, audience, message
):
    app, _, clock = ak_app(tmp_path)
    recorder = Recorder()
    with pytest.raises(StepError, match=message) as failure:
        run_ak(app, clock, exchange_options(tmp_path, client, audience), recorder)
    assert "nothing was created" in str(failure.value)
    assert writes(recorder) == []


def test_an_existing_exchange_provider_without_its_secret_file_is_refused(tmp_path):
    app, _, clock = ak_app(tmp_path)
    options = exchange_options(tmp_path)
    run_ak(app, clock, options, Recorder())
    options.exchange.secret_file.unlink()
    with pytest.raises(StepError) as failure:
        run_ak(app, clock, options, Recorder())
    assert "provider 'gateway-exchange' exists but its client secret is not in" in str(
        failure.value
    )
    assert "write it there, or choose another --token-exchange-client" in str(failure.value)


@pytest.mark.contracts
def test_exchange_setup_calls_follow_the_contract(tmp_path):
    app, _, clock = ak_app(tmp_path)
    recorder = Recorder()
    run_ak(app, clock, exchange_options(tmp_path), recorder)
    run_ak(app, clock, exchange_options(tmp_path), recorder)
    calls = [(q, r) for q, r in recorder.exchanges if q.url.path.startswith("/api/v3/")]
    assert any(q.method == "POST" and b"jwt_federation_providers" in q.content for q, _ in calls)
    assert [p for q, r in calls for p in validate(str(AUTHENTIK), q, r, token_exchange=True)] == []
