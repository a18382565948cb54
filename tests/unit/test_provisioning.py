"""The provisioning tools against the dev identity provider, in process: runs are idempotent,
faults are survived or reported with the step, the server's answer and what the run left behind,
secrets are never printed. The tests marked `contracts` check the same exchanges against the
providers' OpenAPI documents (kept outside the repository)."""

from __future__ import annotations

import io
import json
import re
from pathlib import Path

import pytest
from starlette.responses import PlainTextResponse
from starlette.testclient import TestClient
from starlette.types import ASGIApp, Receive, Scope, Send

from contracts import AUTHENTIK, KEYCLOAK, Recorder, validate
from mcp_oauth_gateway.authorization_server_modes import AuthorizationServerMode
from mcp_oauth_gateway.devidp import DevIdpSettings, create_app
from mcp_oauth_gateway.idp import authentik, keycloak
from mcp_oauth_gateway.idp.exchange import ExchangeOptions
from mcp_oauth_gateway.idp.steps import Progress, StepError
from mcp_oauth_gateway.provider_kinds import ProviderKind

from .provisioning_support import (
    AK_URL,
    ak_app,
    ak_options,
    api_get,
    api_post,
    client,
    run_ak,
    writes,
)

KC_URL = "http://127.0.0.1:8180"
RESOURCE = "http://127.0.0.1:8080/mcp"


def step_names(log: str, tool: str) -> list[str]:
    """The step names of the progress lines, in order, each once."""
    seen: list[str] = []
    for name in re.findall(rf"^\[{tool} \d+/\d+\] ([^:]+):", log, re.MULTILINE):
        if name not in seen:
            seen.append(name)
    return seen


# --- Keycloak -------------------------------------------------------------------------------


def kc_options(**overrides: object) -> keycloak.KeycloakOptions:
    base = {
        "url": KC_URL,
        "admin_user": "admin",
        "admin_password": "admin-pw",
        "resource": RESOURCE,
        "users": [("alice", "alice@example.com"), ("bob", None)],
        "user_password": "user-pw",
        "allow_anonymous_dcr": True,
    }
    base.update(overrides)
    return keycloak.KeycloakOptions(**base)  # type: ignore[arg-type]


@pytest.fixture
def kc_app(tmp_path: Path):
    settings = DevIdpSettings(
        kind=ProviderKind.KEYCLOAK, admin_password="admin-pw", state=tmp_path / "kc.json"
    )
    return create_app(settings), settings


def run_kc(app, options: keycloak.KeycloakOptions, recorder: Recorder) -> tuple:
    stream = io.StringIO()
    with client(app, recorder, KC_URL) as http:
        values = keycloak.provision(
            options, http, Progress("keycloak", len(keycloak.STEPS), stream)
        )
    return values, stream.getvalue()


def test_keycloak_provisioning_is_idempotent_and_prints_no_secret(kc_app):
    app, settings = kc_app
    recorder = Recorder()
    values, log = run_kc(app, kc_options(), recorder)
    assert values.issuer == f"{KC_URL}/realms/master"
    assert values.jwks_path == "/realms/master/protocol/openid-connect/certs"
    assert values.audiences == (RESOURCE,)
    assert values.client_id is None
    assert step_names(log, "keycloak") == list(keycloak.STEPS)
    assert "[keycloak 11/11] discovery" in log
    assert "created 'mcp'" in log
    assert "created 'users'" in log
    assert "added 'alice' to 'users'" in log
    assert "deleted 'Trusted Hosts' (trusted-hosts, anonymous)" in log
    posted = [w.rsplit("/", 1)[-1] for w in writes(recorder) if w.startswith("POST")]
    assert set(posted) == {"client-scopes", "groups", "users"}
    assert "user-pw" not in log
    assert "admin-pw" not in log

    before = settings.state.read_text()
    second = Recorder()
    _, log2 = run_kc(app, kc_options(), second)
    assert writes(second) == []
    assert settings.state.read_text() == before, "a second run must change nothing"
    assert "created" not in log2
    assert "'alice' is already in 'users'; unchanged" in log2


def test_keycloak_broker_client_is_created_once(kc_app):
    app, _ = kc_app
    values, log = run_kc(app, kc_options(mode=AuthorizationServerMode.BROKER), Recorder())
    assert values.client_id == "mcp-gateway"
    assert "created public client 'mcp-gateway'" in log
    second = Recorder()
    _, log2 = run_kc(app, kc_options(mode=AuthorizationServerMode.BROKER), second)
    assert "public client 'mcp-gateway' exists; unchanged" in log2
    assert writes(second) == []


def kc_redirect_uris(app) -> list[str]:
    """The redirect URIs of the Broker client, as the admin API shows them."""
    with TestClient(app, base_url=KC_URL) as http:
        token = http.post(
            "/realms/master/protocol/openid-connect/token",
            data={
                "client_id": "admin-cli",
                "grant_type": "password",
                "username": "admin",
                "password": "admin-pw",
            },
        ).json()["access_token"]
        clients = http.get(
            "/admin/realms/master/clients",
            params={"clientId": "mcp-gateway"},
            headers={"Authorization": f"Bearer {token}"},
        ).json()
    uris: list[str] = clients[0]["redirectUris"]
    return uris


def test_keycloak_broker_client_gets_the_extra_redirect_uris_asked_for(kc_app):
    app, _ = kc_app
    run_kc(app, kc_options(mode=AuthorizationServerMode.BROKER), Recorder())
    extra = (f"{RESOURCE}/connect/signed-in", "http://127.0.0.1:8080/notes/mcp/oauth/callback")
    _, log = run_kc(
        app, kc_options(mode=AuthorizationServerMode.BROKER, extra_redirect_uris=extra), Recorder()
    )
    assert "public client 'mcp-gateway' exists; added redirect URIs" in log
    assert kc_redirect_uris(app) == [f"{RESOURCE}/oauth/callback", *extra]
    again = Recorder()
    _, log2 = run_kc(
        app, kc_options(mode=AuthorizationServerMode.BROKER, extra_redirect_uris=extra), again
    )
    assert "public client 'mcp-gateway' exists; unchanged" in log2
    assert writes(again) == []


def test_keycloak_broker_client_is_created_with_the_extra_redirect_uris(tmp_path):
    app = create_app(DevIdpSettings(kind=ProviderKind.KEYCLOAK, admin_password="admin-pw"))
    extra = (f"{RESOURCE}/connect/signed-in",)
    _, log = run_kc(
        app, kc_options(mode=AuthorizationServerMode.BROKER, extra_redirect_uris=extra), Recorder()
    )
    assert "created public client 'mcp-gateway' for the gateway, redirect URIs" in log
    assert kc_redirect_uris(app) == [f"{RESOURCE}/oauth/callback", *extra]


def test_keycloak_token_is_refreshed_after_a_401(server_time):
    app = create_app(DevIdpSettings(kind=ProviderKind.KEYCLOAK, admin_password="admin-pw"))
    stream = io.StringIO()
    with client(app, Recorder(), KC_URL) as http:
        admin = keycloak.KeycloakAdmin(http, kc_options(), Progress("keycloak", 9, stream))
        lifetime = admin.login()
        admin._refresh_at = float("inf")  # pretend the tool's clock says the token is fresh
        server_time.offset = lifetime + 1  # while on the server it has expired
        response = admin.call("GET", "/groups")
    assert response.status_code == 200
    assert "was rejected (401); refreshing" in stream.getvalue()


def test_keycloak_wrong_admin_password_names_the_step(kc_app):
    app, _ = kc_app
    with pytest.raises(
        StepError,
        match=r"step 1/11 \(admin token\) failed: admin login as "
        r"'admin' was refused \(HTTP 400",
    ):
        run_kc(app, kc_options(admin_password="nope"), Recorder())


@pytest.mark.contracts
def test_keycloak_provisioning_exchanges_follow_the_contract(kc_app, tmp_path):
    app, _ = kc_app
    recorder = Recorder()
    run_kc(app, kc_options(), recorder)
    run_kc(app, kc_options(mode=AuthorizationServerMode.BROKER), recorder)
    exchange = ExchangeOptions("gateway-exchange", "mcp-backend", tmp_path / "secret")
    for _ in range(2):  # creates, then finds everything in place
        run_kc(app, kc_options(exchange=exchange), recorder)
    paths = {(q.method, q.url.path.rsplit("/", 1)[-1]) for q, _ in recorder.exchanges}
    assert ("GET", "optional-client-scopes") in paths
    admin_calls = [(q, r) for q, r in recorder.exchanges if q.url.path.startswith("/admin/")]
    assert len(admin_calls) >= 20
    assert [p for q, r in admin_calls for p in validate(str(KEYCLOAK), q, r)] == []


# --- authentik ------------------------------------------------------------------------------


def test_authentik_waits_out_startup_then_provisions(tmp_path):
    app, settings, clock = ak_app(tmp_path, migrations=5, worker=10)
    recorder = Recorder()
    values, log = run_ak(app, clock, ak_options(), recorder)
    assert "authentik is starting (HTTP 503" in log
    assert "the worker has not created" in log
    assert "found ['openid']" in log, "partial blueprints are waited out"
    assert step_names(log, "authentik") == list(authentik.STEPS)
    assert values.issuer == f"{AK_URL}/application/o/mcp/"
    assert values.jwks_path == "/application/o/mcp/jwks/"
    assert values.client_id
    assert values.audiences == (values.client_id,)
    assert "test-token" not in log
    created = next(
        json.loads(q.content)
        for q, r in recorder.exchanges
        if q.url.path == "/api/v3/providers/oauth2/" and q.method == "POST"
    )
    assert created["client_type"] == "public"
    assert set(created["grant_types"]) >= {
        "authorization_code",
        "refresh_token",
        "client_credentials",
    }
    assert created["sub_mode"] == "user_username"
    assert created["include_claims_in_id_token"] is True
    assert len(created["property_mappings"]) == 3
    assert all(set(u) == {"matching_mode", "url"} for u in created["redirect_uris"])
    secret = api_get(app, "/providers/oauth2/", name="mcp")["results"][0]["client_secret"]
    assert secret not in log

    before = settings.state.read_text()
    second = Recorder()
    _, log2 = run_ak(app, clock, ak_options(), second)
    assert writes(second) == []
    assert settings.state.read_text() == before
    assert "created" not in log2
    assert "already in 'mcp-agent'; unchanged" in log2


def test_authentik_looks_applications_up_by_their_detail_url(tmp_path):
    app, _, clock = ak_app(tmp_path)
    recorder = Recorder()
    run_ak(app, clock, ak_options(), recorder)
    run_ak(app, clock, ak_options(), recorder)
    lookups = [
        (q.url.path, q.url.query.decode())
        for q, _ in recorder.exchanges
        if q.method == "GET" and q.url.path.startswith("/api/v3/core/applications/")
    ]
    assert lookups == [("/api/v3/core/applications/mcp/", "")] * 2


def test_authentik_second_slug_after_an_application_list_read(tmp_path):
    """The defect seen on authentik 2025.12.4: after any list read, `?slug=<new>` returned the
    cached page with another application, and provisioning a second slug failed after creating
    its provider."""
    app, settings, clock = ak_app(tmp_path)
    first, _ = run_ak(app, clock, ak_options(slug="mcp-a", name="mcp-a"), Recorder())
    # what the admin UI's application page does
    assert [a["slug"] for a in api_get(app, "/core/applications/")["results"]] == ["mcp-a"]
    stale = api_get(app, "/core/applications/", slug="mcp-b")
    assert [a["slug"] for a in stale["results"]] == ["mcp-a"], "the emulated cache is in place"

    second, log = run_ak(app, clock, ak_options(slug="mcp-b", name="mcp-b"), Recorder())
    assert "[authentik 3/7] OAuth2 provider: created 'mcp-b' (pk 2)" in log
    assert "[authentik 4/7] application: created 'mcp-b'" in log
    assert second.issuer == f"{AK_URL}/application/o/mcp-b/"
    assert second.client_id != first.client_id
    apps = api_get(app, "/core/applications/", superuser_full_list="true")["results"]
    assert {(a["slug"], a["provider"]) for a in apps} == {("mcp-a", 1), ("mcp-b", 2)}

    before = settings.state.read_text()
    for slug in ("mcp-a", "mcp-b"):
        api_get(app, "/core/applications/")
        again = Recorder()
        values, log = run_ak(app, clock, ak_options(slug=slug, name=slug), again)
        assert writes(again) == [], slug
        assert f"'{slug}' exists; unchanged" in log
        assert values.client_id == (first if slug == "mcp-a" else second).client_id
    assert settings.state.read_text() == before


def test_authentik_application_of_another_provider_stops_before_anything_is_made(tmp_path):
    app, settings, clock = ak_app(tmp_path)
    run_ak(app, clock, ak_options(slug="mcp-a", name="mcp-a"), Recorder())
    api_post(app, "/core/applications/", {"name": "taken", "slug": "taken"})
    before = settings.state.read_text()
    recorder = Recorder()
    with pytest.raises(StepError) as failure:
        run_ak(app, clock, ak_options(slug="taken", name="mcp-t"), recorder)
    assert str(failure.value).startswith(
        "authentik step 3/7 (OAuth2 provider) failed: application 'taken' exists but uses "
        "provider None, not a provider named 'mcp-t'; nothing was created"
    )
    with pytest.raises(
        StepError,
        match="application 'mcp-a' exists but uses provider 1, not "
        "a provider named 'other'; nothing was created",
    ):
        run_ak(app, clock, ak_options(slug="mcp-a", name="other"), recorder)
    with pytest.raises(
        StepError,
        match=r"provider 'mcp-a' \(pk 1\) is already used by "
        "application 'mcp-a'; nothing was created",
    ):
        run_ak(app, clock, ak_options(slug="mcp-c", name="mcp-a"), recorder)
    assert writes(recorder) == []
    assert settings.state.read_text() == before


@pytest.mark.parametrize(
    ("slug", "why"),
    [("token", "is reserved by authentik"), ("a/b", "is not one authentik accepts")],
)
def test_authentik_refused_slug_stops_before_anything_is_made(tmp_path, slug, why):
    app, _, clock = ak_app(tmp_path)
    recorder = Recorder()
    with pytest.raises(StepError, match=f"the slug '{slug}' {why}.*; nothing was created$"):
        run_ak(app, clock, ak_options(slug=slug, name="mcp"), recorder)
    assert writes(recorder) == []


def refusing(app: ASGIApp, method: str, path: str) -> ASGIApp:
    """The dev IdP, except that it fails one kind of request with a server error."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == method and scope["path"] == path:
            await PlainTextResponse("Internal Server Error", 500)(scope, receive, send)
            return
        await app(scope, receive, send)

    return wrapped


def test_authentik_failed_application_says_what_it_left_and_a_rerun_finishes(tmp_path):
    app, _, clock = ak_app(tmp_path)
    run_ak(app, clock, ak_options(slug="mcp-a", name="mcp-a"), Recorder())
    broken = refusing(app, "POST", "/api/v3/core/applications/")
    with pytest.raises(StepError) as failure:
        run_ak(broken, clock, ak_options(slug="mcp-b", name="mcp-b"), Recorder())
    assert str(failure.value) == (
        "authentik step 4/7 (application) failed: POST /api/v3/core/applications/ answered "
        "HTTP 500: Internal Server Error; this run already created provider 2 ('mcp-b'): "
        "delete it or re-run (a re-run reuses it)"
    )
    names = [p["name"] for p in api_get(app, "/providers/oauth2/")["results"]]
    assert names == ["mcp-a", "mcp-b"]

    values, log = run_ak(app, clock, ak_options(slug="mcp-b", name="mcp-b"), Recorder())
    assert "'mcp-b' exists (pk 2); unchanged" in log
    assert "[authentik 4/7] application: created 'mcp-b'" in log
    assert values.issuer.endswith("/application/o/mcp-b/")


def ignoring_filters(app: ASGIApp) -> ASGIApp:
    """The dev IdP, except that its lists ignore every filter (only the paging stays)."""

    async def wrapped(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "GET":
            kept = [
                p
                for p in scope["query_string"].split(b"&")
                if p.startswith((b"page=", b"page_size="))
            ]
            scope = {**scope, "query_string": b"&".join(kept)}
        await app(scope, receive, send)

    return wrapped


def test_authentik_lists_that_ignore_their_filters_yield_no_other_object(tmp_path):
    """The lookups authentik's source shows it filters are checked again by the tool, so a
    list that ignored its filter (as the application list does) cannot pick another object."""
    app, _, clock = ak_app(tmp_path)
    first, _ = run_ak(app, clock, ak_options(slug="mcp-a", name="mcp-a"), Recorder())
    lax = ignoring_filters(app)
    second, log = run_ak(
        lax, clock, ak_options(slug="mcp-b", name="mcp-b", users=["alice", "bob"]), Recorder()
    )
    assert "[authentik 3/7] OAuth2 provider: created 'mcp-b' (pk 2)" in log
    assert "'alice' is already in 'mcp-agent'; unchanged" in log
    assert "added 'bob' to 'mcp-agent'" in log
    assert second.client_id != first.client_id


def test_authentik_missing_user_is_named_with_what_the_run_made(tmp_path):
    app, _, clock = ak_app(tmp_path)
    with pytest.raises(StepError) as failure:
        run_ak(app, clock, ak_options(users=["alice", "zoe"]), Recorder())
    assert str(failure.value) == (
        "authentik step 6/7 (users) failed: user 'zoe' does not exist in authentik; create it "
        "first (Directory → Users) or drop --user; this run already created provider 1 "
        "('mcp'), created application 'mcp', created group 'mcp-agent' and added 'alice' to "
        "'mcp-agent': delete them or re-run (a re-run reuses them)"
    )


def test_authentik_validation_failure_reports_field_errors(tmp_path):
    app, _, clock = ak_app(tmp_path)
    with pytest.raises(StepError) as failure:
        run_ak(app, clock, ak_options(redirect_uris=(("regex", "(["),)), Recorder())
    message = str(failure.value)
    assert "step 3/7 (OAuth2 provider)" in message
    assert "Invalid Regex Pattern: ([" in message
    assert "this run already" not in message, "nothing was made before the provider"


def test_authentik_bad_token_is_reported_after_the_grace(tmp_path):
    app, _, clock = ak_app(tmp_path)
    with pytest.raises(StepError, match="check AUTHENTIK_TOKEN"):
        run_ak(app, clock, ak_options(token="wrong", wait=1.0), Recorder())


def test_authentik_gives_up_with_bounded_wait(tmp_path):
    app, _, clock = ak_app(tmp_path, migrations=60)
    with pytest.raises(StepError, match=r"gave up after 1s: authentik is starting"):
        run_ak(app, clock, ak_options(wait=1.0), Recorder())


def test_authentik_adds_missing_redirect_uris_to_an_existing_provider(tmp_path):
    app, _, clock = ak_app(tmp_path)
    run_ak(app, clock, ak_options(), Recorder())
    moved = ak_options(
        mode=AuthorizationServerMode.BROKER,
        redirect_uris=authentik.broker_redirects("http://127.0.0.1:9999/mcp"),
    )
    recorder = Recorder()
    _, log = run_ak(app, clock, moved, recorder)
    assert "added redirect URIs ['http://127.0.0.1:9999/mcp/oauth/callback']" in log
    assert writes(recorder) == ["PATCH /api/v3/providers/oauth2/1/"]
    _, log = run_ak(app, clock, moved, Recorder())
    assert "exists (pk 1); unchanged" in log


@pytest.mark.contracts
def test_authentik_provisioning_exchanges_follow_the_contract(tmp_path):
    app, _, clock = ak_app(tmp_path, migrations=5, worker=10)
    recorder = Recorder()
    run_ak(app, clock, ak_options(slug="mcp-a", name="mcp-a"), recorder)
    run_ak(app, clock, ak_options(slug="mcp-a", name="mcp-a"), recorder)
    run_ak(
        app,
        clock,
        ak_options(
            slug="mcp-b",
            name="mcp-b",
            mode=AuthorizationServerMode.BROKER,
            redirect_uris=authentik.broker_redirects(RESOURCE),
        ),
        recorder,
    )
    run_ak(app, clock, ak_options(slug="mcp-b", name="mcp-b"), recorder)  # adds a redirect URI
    api_calls = [
        (q, r)
        for q, r in recorder.exchanges
        if q.url.path.startswith("/api/v3/") and r.status_code != 503
    ]
    statuses = {(q.method, r.status_code) for q, r in api_calls}
    assert {("GET", 200), ("GET", 404), ("POST", 201), ("POST", 204), ("PATCH", 200)} <= statuses
    assert [p for q, r in api_calls for p in validate(str(AUTHENTIK), q, r)] == []


def test_step_names_come_from_one_list():
    """No step is named twice, and the tools' totals are their lists' lengths."""
    for steps in (keycloak.STEPS, authentik.STEPS):
        assert len(set(steps)) == len(steps)
    assert (len(keycloak.STEPS), len(authentik.STEPS)) == (11, 7)


def test_keycloak_tool_never_prints_the_user_info_of_its_url(kc_app):
    # httpx sends user-info as Basic credentials; the tool's lines show the URL without it.
    app, _ = kc_app
    secret = "S3cr3t-in-url"
    stream = io.StringIO()
    options = kc_options(url=f"http://kc-user:{secret}@127.0.0.1:8180")
    with client(app, Recorder(), KC_URL) as http:
        try:
            keycloak.provision(options, http, Progress("keycloak", len(keycloak.STEPS), stream))
        except StepError as exc:
            stream.write(str(exc))
    log = stream.getvalue()
    assert "via admin-cli at http://***@127.0.0.1:8180" in log
    assert secret not in log
