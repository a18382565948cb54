"""Configured and fetched URLs are written as `shown_url` shows them wherever a person or a
scraper reads them (issue 24, item 7): snapshot errors, policy conditions, `/status`, `/readyz`,
`/metrics`, the `check` command, log lines and answers to clients never hold a URL's user-info,
query values or fragment. Every URL here points at a closed port on 127.0.0.1."""

from __future__ import annotations

import asyncio
import json
import logging
import time
from urllib.parse import quote, quote_plus, urlencode

import aiohttp
import httpx
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from pydantic import ValidationError

from mcp_oauth_gateway.cli import main
from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot, status
from mcp_oauth_gateway.controlplane.fetch import FetchError, fetch_json
from mcp_oauth_gateway.dataplane.metrics import Metrics, keyset_labels
from mcp_oauth_gateway.dataplane.ratelimit import RedisLimiter
from mcp_oauth_gateway.redis_clients import RedisConnection
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.resources.loader import validation_problems
from mcp_oauth_gateway.resources.models import BrokerSettings, RemoteJwks
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.options import ServeOptions
from support import claims_for, free_port, unsigned

from .resources_fixture import write

SECRET = "S3cr3t-value-42"
# A port nothing listens on: every fetch fails at once, and nothing leaves the machine.
CLOSED = free_port()

ROUTE = """
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec:
  listeners: [{{name: http, port: 8080, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mcp}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /}}}}]
      filters:
        - type: CORS
          cors: {{allowOrigins: ['{origin}']}}
      backendRefs: [{{name: backend}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: backend}}
spec:
  mcp:
    targets: [{{name: t, static: {{host: 127.0.0.1, port: {port}}}}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: auth}}
spec:
  targetRefs: [{{kind: HTTPRoute, name: mcp}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: '{issuer}'
          audiences: [mcp]
          jwks:
            remote: {{url: '{jwks}'}}
      mcp:
        provider: Keycloak
        resourceMetadata: {{resource: '{resource}'}}
    rateLimit: {{key: 'jwt.sub', requests: 5, window: 1m, redisUrl: '{redis}'}}
"""


def _valid(tmp_path):
    """A policy the gateway accepts whose every URL carries the secret where it may: the JWKS
    URL's query, the Redis password (an issuer may carry none: refused, see `_rejected`)."""
    return write(
        tmp_path,
        ROUTE.format(
            origin="https://app.example",
            port=CLOSED,
            issuer=f"http://127.0.0.1:{CLOSED}/realms/a",
            jwks=f"http://127.0.0.1:{CLOSED}/jwks?key={SECRET}&v=1",
            resource="http://127.0.0.1:8080/mcp",
            redis=f"redis://:{SECRET}@127.0.0.1:{CLOSED}/0?password={SECRET}",
        ),
    )


def _rejected(tmp_path):
    """The same with every URL field refused, each quoting a secret-bearing value."""
    return write(
        tmp_path,
        ROUTE.format(
            origin=f"https://app-user:{SECRET}@app.example",
            port=CLOSED,
            issuer=f"http://idp-user:{SECRET}@127.0.0.1:{CLOSED}/realms/a?k={SECRET}",
            jwks=f"ftp://127.0.0.1:{CLOSED}/jwks?key={SECRET}#{SECRET}",
            resource=f"http://gw-user:{SECRET}@127.0.0.1:8080/mcp",
            redis=f"memcached://:{SECRET}@127.0.0.1:{CLOSED}/0?password={SECRET}",
        ),
    )


async def _until_fetches_failed(control: ControlPlane) -> None:
    holders = [*control.keysets.values(), *control.discoveries.values()]
    deadline = time.monotonic() + 10
    while not all(h.last_error for h in holders):
        assert time.monotonic() < deadline, "the fetches to a closed port did not fail"
        await asyncio.sleep(0.02)


async def _answers(app: GatewayApp) -> dict[str, str]:
    """What the admin listener and a client see: admin pages, a token refused because the
    keyset is not fetched, the authorization server metadata whose discovery failed."""
    transport = httpx.ASGITransport(app=app)
    answers: dict[str, str] = {}
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:9901") as admin:
        for path in ("/status", "/readyz", "/config", "/metrics"):
            answers[path] = (await admin.get(path)).text
    async with httpx.AsyncClient(transport=transport, base_url="http://127.0.0.1:8080") as client:
        token = unsigned(
            {"alg": "RS256", "kid": "k"}, claims_for(f"http://127.0.0.1:{CLOSED}/realms/a", "mcp")
        )
        refused = await client.post("/mcp", headers={"Authorization": f"Bearer {token}"})
        answers["token"] = f"{refused.headers} {refused.text}"
        metadata = await client.get("/.well-known/oauth-authorization-server/mcp")
        answers["metadata"] = f"{metadata.headers} {metadata.text}"
    return answers


async def test_no_secret_of_a_configured_url_is_shown_while_its_fetches_fail(tmp_path, caplog):
    caplog.set_level(logging.DEBUG, logger="mcp_oauth_gateway")
    snapshot = build_snapshot(load_paths([_valid(tmp_path)]))
    assert snapshot.errors == ()
    control = ControlPlane(snapshot)
    app = GatewayApp(control, ServeOptions(status_port=9901))
    await control.start()
    try:
        await _until_fetches_failed(control)
        conditions = [c.message for r in snapshot.policies for c in control.conditions(r)]
        answers = await _answers(app)
    finally:
        await control.stop()
    logged = [record.getMessage() for record in caplog.records]
    # Not vacuous: each place names the URL, as it may be shown.
    assert f'url="http://127.0.0.1:{CLOSED}/jwks?key=***&v=***"' in answers["/metrics"]
    assert any(f"http://127.0.0.1:{CLOSED}/realms/a" in m for m in conditions)
    assert any(f"keyset http://127.0.0.1:{CLOSED}/jwks?key=***" in m for m in conditions)
    assert any(f"GET http://127.0.0.1:{CLOSED}/realms/a/.well-known" in m for m in logged)
    assert f"http://127.0.0.1:{CLOSED}/jwks?key=***" in answers["token"]
    assert f"GET http://127.0.0.1:{CLOSED}/realms/a/" in answers["metadata"]
    for text in [*conditions, *answers.values(), *logged]:
        assert SECRET not in text


def test_a_refused_url_is_not_quoted_with_its_secret(tmp_path):
    errors = load_paths([_rejected(tmp_path)]).errors
    refused = (
        "allowOrigins[0]",
        "jwks.remote.url",
        "resourceMetadata.resource",
        "redisUrl",
        "providers[0].issuer",
    )
    for field in refused:
        assert any(field in e for e in errors), f"{field} not refused: {errors}"
    assert any(f"'ftp://127.0.0.1:{CLOSED}/jwks?key=***'" in e for e in errors), errors
    for error in errors:
        assert SECRET not in error


@pytest.fixture
def gateway_log_level():
    """`check` quiets the gateway's loggers for the rest of the process; undo it."""
    logger = logging.getLogger("mcp_oauth_gateway")
    before = logger.level
    yield
    logger.setLevel(before)


@pytest.mark.parametrize("output", ["text", "json"])
@pytest.mark.parametrize("resources", [_valid, _rejected], ids=["fetches-fail", "refused"])
def test_check_shows_no_secret(tmp_path, capsys, gateway_log_level, output, resources):
    path = resources(tmp_path)
    code = main(["check", "-f", str(path), "--timeout", "2", "--output", output])
    out, err = capsys.readouterr()
    assert code != 0
    assert "127.0.0.1" in out + err
    if output == "json":
        json.loads(out)
    assert SECRET not in out + err


@pytest.mark.parametrize(
    "url",
    [
        f"http://127.0.0.1:99999/jwks?key={SECRET}",  # a port out of range
        f"http://[::1/jwks?key={SECRET}",  # an IPv6 host not closed
        f"http://:{SECRET}@/jwks",  # no host
        f"ftp://{SECRET}@127.0.0.1/jwks",  # not http
    ],
)
async def test_a_url_aiohttp_refuses_is_not_quoted_by_the_fetch_error(url):
    # aiohttp's InvalidURL text is the URL itself, user-info and query included.
    async with aiohttp.ClientSession() as session:
        with pytest.raises(FetchError) as failed:
            await fetch_json(session, url, 2)
    assert SECRET not in str(failed.value)


def test_keysets_that_differ_only_in_secrets_keep_distinct_metric_labels():
    urls = [f"https://idp/jwks?key={SECRET}-{n}" for n in range(3)] + ["https://idp/other"]
    labels = keyset_labels(urls)
    assert labels == [
        "https://idp/jwks?key=***",
        "https://idp/jwks?key=*** (2)",
        "https://idp/jwks?key=*** (3)",
        "https://idp/other",
    ]
    metrics = Metrics()
    metrics.watch_keysets([(url, object()) for url in urls])
    rendered = metrics.render().decode()
    assert rendered.count("mcp_gateway_jwks_age_seconds{") == 4
    assert SECRET not in rendered


async def test_a_redis_failure_names_no_password():
    url = f"redis://user:{SECRET}@127.0.0.1:{CLOSED}/0?password={SECRET}"
    connection = RedisConnection(url)
    limiter = RedisLimiter(connection, "default/auth", 5, 1.0)
    with pytest.raises(Exception) as failed:  # noqa: PT011 (whatever redis-py raises)
        await limiter.take("k")
    assert SECRET not in f"{failed.value} {failed.value!r}"
    # The limiter's failure is the connection's health (/status, /readyz, metrics).
    assert connection.up is False
    assert SECRET not in str(connection.view())


# Marked so that no public part of a message (host, port, words) can hold one by chance.
SECRETS = st.text(min_size=1, max_size=12).map(lambda s: "S3" + s)
KEYS = st.sampled_from(["password", "username", "key", "token", "db"])


@st.composite
def secret_urls(draw: st.DrawFn) -> tuple[str, list[str]]:
    """An http(s) URL to the closed port with secrets (encoded, as a URL carries them) in its
    user-info, query values and fragment, and those secrets."""
    scheme = draw(st.sampled_from(["http", "https"]))
    user, password = draw(st.one_of(st.just(""), SECRETS)), draw(SECRETS)
    userinfo = draw(st.booleans())
    values = draw(st.lists(st.tuples(KEYS, SECRETS), max_size=3))
    fragment = draw(st.one_of(st.just(""), SECRETS))
    url = f"{scheme}://"
    if userinfo:
        url += f"{quote(user, safe='')}:{quote(password, safe='')}@"
    url += f"127.0.0.1:{CLOSED}/jwks" + (f"?{urlencode(values)}" if values else "")
    url += f"#{quote(fragment, safe='')}" if fragment else ""
    shown = [v for _, v in values] + [fragment] + ([user, password] if userinfo else [])
    return url, [s for s in shown if s]


async def _fetch_error(url: str) -> str:
    async with aiohttp.ClientSession() as session:
        try:
            await fetch_json(session, url, 2)
        except FetchError as exc:
            return str(exc)
    raise AssertionError(f"fetching {url} from a closed port did not fail")


def _messages(url: str) -> list[str]:
    """Every text the gateway writes about a configured URL it cannot use or fetch."""
    texts = [
        status.stale_message(url, "boom", 0.0, 0.0, 0.0, 0.0),
        *keyset_labels([url]),
        asyncio.run(_fetch_error(url)),
    ]
    for model, field in ((RemoteJwks, "url"), (BrokerSettings, "redisUrl")):
        try:
            model.model_validate({field: url})
        except ValidationError as exc:
            texts += validation_problems(exc)
    return texts


@settings(max_examples=60, deadline=None)
@given(secret_urls())
def test_no_text_about_a_url_holds_its_secrets(case: tuple[str, list[str]]) -> None:
    url, secrets = case
    for text in _messages(url):
        for secret in secrets:
            for written in (secret, quote(secret, safe=""), quote_plus(secret)):
                assert written not in text, f"{written!r} of {url!r} in {text!r}"


@pytest.mark.parametrize(
    ("issuer", "why"),
    [
        ("http://user:pw@idp.example/realms/a", "holds no user information"),
        ("http://idp.example/realms/a?tenant=1", "no query or fragment"),
        ("http://idp.example/realms/a#x", "no query or fragment"),
        ("idp.example/realms/a", r"not an absolute http\(s\) URL"),
    ],
)
def test_an_issuer_is_an_http_url_without_user_info_query_or_fragment(issuer, why):
    from mcp_oauth_gateway.resources.models import JwtProvider

    with pytest.raises(ValueError, match=why):
        JwtProvider.model_validate({"issuer": issuer, "jwks": {"inline": "{}"}})
