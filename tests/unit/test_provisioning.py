"""The provisioning tools against the dev identity provider, in process: every exchange is
checked against the providers' OpenAPI documents, runs are idempotent, faults are survived or
reported with the step and the server's answer."""

from __future__ import annotations

import io
import json
import time
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from contracts import AUTHENTIK, KEYCLOAK, Recorder, validate
from mcp_oauth_gateway.devidp import DevIdpSettings, create_app
from mcp_oauth_gateway.idp import authentik, keycloak
from mcp_oauth_gateway.idp.steps import Progress, StepError

KC_URL = "http://kc.test:8180"
AK_URL = "http://ak.test:9000"
RESOURCE = "http://127.0.0.1:8080/mcp"


def client(app, recorder: Recorder, base: str) -> TestClient:
    http = TestClient(app, base_url=base, follow_redirects=False)
    http.event_hooks = recorder.hooks()
    return http


def kc_options(**overrides: object) -> keycloak.KeycloakOptions:
    base = {"url": KC_URL, "admin_user": "admin", "admin_password": "admin-pw",
            "resource": RESOURCE, "users": [("alice", "alice@example.com"), ("bob", None)],
            "user_password": "user-pw", "allow_anonymous_dcr": True}
    base.update(overrides)
    return keycloak.KeycloakOptions(**base)  # type: ignore[arg-type]


@pytest.fixture
def kc_app(tmp_path: Path):
    settings = DevIdpSettings(flavour="keycloak", admin_password="admin-pw",
                              state=tmp_path / "kc.json")
    return create_app(settings), settings


def run_kc(app, options: keycloak.KeycloakOptions, recorder: Recorder) -> tuple:
    stream = io.StringIO()
    with client(app, recorder, KC_URL) as http:
        values = keycloak.provision(options, http, Progress("keycloak", 9, stream))
    return values, stream.getvalue()


def test_keycloak_provisioning_follows_the_contract_and_is_idempotent(kc_app):
    app, settings = kc_app
    recorder = Recorder()
    values, log = run_kc(app, kc_options(), recorder)
    assert values.issuer == f"{KC_URL}/realms/master"
    assert values.jwks_path == "/realms/master/protocol/openid-connect/certs"
    assert values.audiences == (RESOURCE,)
    assert "[keycloak 9/9] discovery" in log
    admin_calls = [(q, r) for q, r in recorder.exchanges if q.url.path.startswith("/admin/")]
    assert len(admin_calls) >= 10
    problems = [p for q, r in admin_calls for p in validate(str(KEYCLOAK), q, r)]
    assert problems == []
    posted = [q for q, _ in admin_calls if q.method == "POST"]
    assert {q.url.path.rsplit("/", 1)[-1] for q in posted} == {"client-scopes", "groups", "users"}
    # secrets never in the progress output
    assert "user-pw" not in log
    assert "admin-pw" not in log

    before = settings.state.read_text()
    second = Recorder()
    _, log2 = run_kc(app, kc_options(), second)
    writes = [q for q, _ in second.exchanges
              if q.url.path.startswith("/admin/") and q.method != "GET"]
    assert writes == [], [f"{q.method} {q.url.path}" for q in writes]
    assert settings.state.read_text() == before, "a second run must change nothing"
    assert "unchanged" in log2


def test_keycloak_token_is_refreshed_after_a_401(tmp_path):
    settings = DevIdpSettings(flavour="keycloak", admin_password="admin-pw", access_token_ttl=1)
    app = create_app(settings)
    stream = io.StringIO()
    with client(app, Recorder(), KC_URL) as http:
        admin = keycloak.KeycloakAdmin(http, kc_options(), Progress("keycloak", 9, stream))
        admin.login()
        admin._refresh_at = float("inf")  # pretend the clock said the token is still fresh
        time.sleep(1.2)  # the 1 s admin token expires on the server
        response = admin.call("GET", "/groups")
    assert response.status_code == 200
    assert "was rejected (401); refreshing" in stream.getvalue()


def test_keycloak_wrong_admin_password_names_the_step(kc_app):
    app, _ = kc_app
    with pytest.raises(StepError, match=r"step 1/9 \(admin token\) failed: admin login as "
                                        r"'admin' was refused \(HTTP 401"):
        run_kc(app, kc_options(admin_password="nope"), Recorder())


def ak_options(**overrides: object) -> authentik.AuthentikOptions:
    base = {"url": AK_URL, "token": "test-token", "users": ["alice"], "wait": 20.0}
    base.update(overrides)
    return authentik.AuthentikOptions(**base)  # type: ignore[arg-type]


def ak_app(tmp_path: Path, migrations: float = 0.0, worker: float = 0.0):
    settings = DevIdpSettings(flavour="authentik", bootstrap_token="test-token",
                              seed_users=["alice", "bob"], state=tmp_path / "ak.json",
                              access_token_ttl=3600, migrations_seconds=migrations,
                              worker_seconds=worker)
    return create_app(settings), settings


def run_ak(app, options: authentik.AuthentikOptions, recorder: Recorder) -> tuple:
    stream = io.StringIO()
    progress = Progress("authentik", 6, stream)
    with client(app, recorder, AK_URL) as http:
        # Waits are real but short: Retry-After (5 s) is capped so the test stays quick.
        api = authentik.AuthentikApi(http, options, progress,
                                     sleep=lambda s: time.sleep(min(s, 0.1)))
        values = authentik.provision(options, http, progress, api=api)
    return values, stream.getvalue()


def test_authentik_waits_out_startup_then_provisions(tmp_path):
    app, settings = ak_app(tmp_path, migrations=0.5, worker=1.0)
    recorder = Recorder()
    values, log = run_ak(app, ak_options(), recorder)
    assert "authentik is starting (HTTP 503" in log
    assert "the worker has not created" in log
    assert values.issuer == f"{AK_URL}/application/o/mcp/"
    assert values.jwks_path == "/application/o/mcp/jwks/"
    assert values.client_id
    assert values.audiences == (values.client_id,)
    api_calls = [(q, r) for q, r in recorder.exchanges
                 if q.url.path.startswith("/api/v3/") and r.status_code != 503]
    problems = [p for q, r in api_calls for p in validate(str(AUTHENTIK), q, r)]
    assert problems == []
    created = next(json.loads(q.content) for q, r in api_calls
                   if q.url.path == "/api/v3/providers/oauth2/" and q.method == "POST")
    assert created["client_type"] == "public"
    assert set(created["grant_types"]) >= {"authorization_code", "refresh_token",
                                           "client_credentials"}
    assert created["sub_mode"] == "user_username"
    assert created["include_claims_in_id_token"] is True
    assert len(created["property_mappings"]) == 3
    assert all(set(u) == {"matching_mode", "url"} for u in created["redirect_uris"])

    before = settings.state.read_text()
    second = Recorder()
    _, log2 = run_ak(app, ak_options(), second)
    assert [q for q, _ in second.exchanges if q.method != "GET"] == []
    assert settings.state.read_text() == before
    assert "already in 'mcp-agent'; unchanged" in log2


def test_authentik_validation_failure_reports_field_errors(tmp_path):
    app, _ = ak_app(tmp_path)
    with pytest.raises(StepError) as failure:
        run_ak(app, ak_options(redirect_uris=(("regex", "(["),)), Recorder())
    message = str(failure.value)
    assert "step 3/6 (OAuth2 provider)" in message
    assert "Invalid Regex Pattern: ([" in message


def test_authentik_bad_token_is_reported_after_the_grace(tmp_path):
    app, _ = ak_app(tmp_path)
    with pytest.raises(StepError, match="check AUTHENTIK_TOKEN"):
        run_ak(app, ak_options(token="wrong", wait=1.0), Recorder())


def test_authentik_missing_user_is_named(tmp_path):
    app, _ = ak_app(tmp_path)
    with pytest.raises(StepError, match="user 'zoe' does not exist in authentik"):
        run_ak(app, ak_options(users=["zoe"]), Recorder())


def test_authentik_gives_up_with_bounded_wait(tmp_path):
    app, _ = ak_app(tmp_path, migrations=60)
    with pytest.raises(StepError, match=r"gave up after 1s: authentik is starting"):
        run_ak(app, ak_options(wait=1.0), Recorder())


def test_authentik_adds_missing_redirect_uris_to_an_existing_provider(tmp_path):
    app, _ = ak_app(tmp_path)
    run_ak(app, ak_options(), Recorder())
    moved = ak_options(mode="Broker",
                       redirect_uris=authentik.broker_redirects("http://127.0.0.1:9999/mcp"))
    recorder = Recorder()
    _, log = run_ak(app, moved, recorder)
    assert "added redirect URIs ['http://127.0.0.1:9999/mcp/oauth/callback']" in log
    patches = [(q, r) for q, r in recorder.exchanges if q.method == "PATCH"]
    assert len(patches) == 1
    assert [p for q, r in patches for p in validate(str(AUTHENTIK), q, r)] == []
    _, log = run_ak(app, moved, Recorder())
    assert "exists (pk 1); unchanged" in log
