"""The provisioning tools' runs against the dev identity provider in process: an HTTP client that
records every exchange, the requests that changed something, and the authentik flavour on a clock
the tool's waits advance, with its API read and written as the tests' own checks."""

from __future__ import annotations

import io
from pathlib import Path

from starlette.testclient import TestClient
from starlette.types import ASGIApp

from contracts import Recorder
from mcp_oauth_gateway.devidp import DevIdpSettings, create_app
from mcp_oauth_gateway.idp import authentik
from mcp_oauth_gateway.idp.steps import Progress
from mcp_oauth_gateway.provider_kinds import ProviderKind

AK_URL = "http://127.0.0.1:9000"


def client(app: ASGIApp, recorder: Recorder, base: str) -> TestClient:
    http = TestClient(app, base_url=base, follow_redirects=False)
    http.event_hooks = recorder.hooks()
    return http


def writes(recorder: Recorder) -> list[str]:
    """The API requests that change something."""
    return [
        f"{q.method} {q.url.path}"
        for q, _ in recorder.exchanges
        if q.method not in ("GET", "HEAD") and "/token" not in q.url.path
    ]


class Clock:
    """A monotonic clock shared by the tool and the dev IdP: waiting advances it at once."""

    def __init__(self, start: float) -> None:
        self.now = start

    def monotonic(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def ak_options(**overrides: object) -> authentik.AuthentikOptions:
    base = {"url": AK_URL, "token": "test-token", "users": ["alice"], "wait": 20.0}
    base.update(overrides)
    return authentik.AuthentikOptions(**base)  # type: ignore[arg-type]


def ak_app(tmp_path: Path, migrations: float = 0.0, worker: float = 0.0) -> tuple:
    """The dev IdP's authentik flavour on a clock the tool's waits advance."""
    settings = DevIdpSettings(
        kind=ProviderKind.AUTHENTIK,
        bootstrap_token="test-token",
        seed_users=["alice", "bob"],
        state=tmp_path / "ak.json",
        access_token_ttl=3600,
        migrations_seconds=migrations,
        worker_seconds=worker,
    )
    app = create_app(settings)
    clock = Clock(app.flavour.started)
    app.flavour.clock = clock.monotonic
    return app, settings, clock


def run_ak(app, clock: Clock, options: authentik.AuthentikOptions, recorder: Recorder) -> tuple:
    stream = io.StringIO()
    progress = Progress("authentik", len(authentik.STEPS), stream)
    with client(app, recorder, AK_URL) as http:
        api = authentik.AuthentikApi(
            http, options, progress, clock=clock.monotonic, sleep=clock.sleep
        )
        values = authentik.provision(options, http, progress, api=api)
    return values, stream.getvalue()


def api_get(app, path: str, **params: str) -> dict:
    with TestClient(app, base_url=AK_URL) as http:
        response = http.get(
            f"/api/v3{path}", params=params, headers={"Authorization": "Bearer test-token"}
        )
    assert response.status_code == 200, response.text
    return response.json()


def api_post(app, path: str, body: dict) -> dict:
    with TestClient(app, base_url=AK_URL) as http:
        response = http.post(
            f"/api/v3{path}", json=body, headers={"Authorization": "Bearer test-token"}
        )
    assert response.status_code == 201, response.text
    return response.json()
