"""What the admin listener shows of the configuration (issue 24, item 7): every URL without its
user information, query values or fragment (query keys kept), a URL that does not parse as
`***`, and no field that holds a secret (credentials, signing keys) at all."""

from __future__ import annotations

import json
from urllib.parse import quote, urlencode

import httpx
import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.admin import config_dump
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.options import ServeOptions
from mcp_oauth_gateway.urls import shown_url

from .resources_fixture import BASE, policy, write


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        # redis-py reads `password` (and `username`) from the query as well as the user-info.
        ("redis://host:6379/0?password=X", "redis://host:6379/0?password=***"),
        ("redis://u:X@host:6379/0?db=1&ssl=1", "redis://***@host:6379/0?db=***&ssl=***"),
        ("redis://X@host", "redis://***@host"),
        ("rediss://:X@[::1]:6380/2", "rediss://***@[::1]:6380/2"),
        ("unix:///run/redis.sock?password=X", "unix:///run/redis.sock?password=***"),
        ("https://idp/jwks?key=X#X", "https://idp/jwks?key=***"),
        ("https://idp/jwks#X", "https://idp/jwks"),
        ("https://idp/jwks?a=1;password=X", "https://idp/jwks?a=***"),
        # Nothing to hide: shown as written.
        ("https://idp.example/realms/a/", "https://idp.example/realms/a/"),
        ("http://gw.example/mcp", "http://gw.example/mcp"),
        ("unix:///run/redis.sock", "unix:///run/redis.sock"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        ("", ""),
    ],
)
def test_a_url_is_shown_without_user_info_query_values_or_fragment(url, shown):
    assert shown_url(url) == shown


@pytest.mark.parametrize(
    "url",
    [
        "redis://:pa/ss@host:6379/0",  # a password with `/` written unencoded: no port "pa"
        "redis://:12/X@host:6379/0",  # ... or one that reads as a port: X would be the path
        "redis://:12?X@host:6379/0",  # ... the same through the query
        "redis://:12#X@host",  # ... and the fragment
        "redis:X@host",  # no authority at all: X@host would be the path
        "redis://host:99999/0",  # a port out of range
        "redis://[::1/0?password=X",  # an IPv6 host not closed
        "redis://host/0?X",  # a query item that is no key=value could be the secret itself
        "redis://host/0?password=X\n",  # not printable
    ],
)
def test_a_url_that_does_not_parse_cleanly_is_shown_as_stars(url):
    assert shown_url(url) == "***"


SECRET = st.text(min_size=6)
KEYS = st.sampled_from(["password", "username", "db", "key", "token", "ssl_cert_reqs"])


@st.composite
def urls_with_secrets(draw: st.DrawFn) -> tuple[str, list[str], str]:
    """A URL, the secrets in it, and what it shows without them (public parts only)."""
    scheme = draw(st.sampled_from(["redis", "rediss", "https", "http", "unix"]))
    user, password = draw(st.one_of(st.just(""), SECRET)), draw(SECRET)
    values = draw(st.lists(st.tuples(KEYS, SECRET), min_size=0, max_size=3))
    fragment = draw(st.one_of(st.just(""), SECRET))
    port = draw(st.one_of(st.just(""), st.integers(1, 65535).map(lambda p: f":{p}")))
    # Encoded as a URL must be; `raw` writes the password as people sometimes do, unencoded.
    raw = draw(st.booleans())
    secret = password if raw else quote(password, safe="")
    url = f"{scheme}://{quote(user, safe='')}:{secret}@cache.internal{port}/0"
    public = f"{scheme}://cache.internal{port}/0" + "".join(k for k, _ in values)
    if values:
        url += "?" + urlencode(values)
    if fragment:
        url += "#" + quote(fragment, safe="")
    return url, [s for s in (user, password, fragment, *(v for _, v in values)) if s], public


@given(urls_with_secrets())
def test_no_secret_in_a_url_is_ever_shown(case: tuple[str, list[str], str]) -> None:
    url, secrets, public = case
    shown = shown_url(url)
    for secret in secrets:
        # A secret that is also a public part (a key, the host) cannot tell a leak apart.
        assume(secret not in public and secret not in "***")
        assert secret not in shown
        assert quote(secret, safe="") not in shown


def _resources(tmp_path, secret: str, credentials: str) -> object:
    text = (
        BASE
        + policy()
        .replace(
            "            remote:\n              backendRef: {name: authentik, port: 9000}\n"
            "              jwksPath: /application/o/mcp/jwks/\n",
            f"            remote: {{url: 'https://idp.internal/jwks?key={secret}'}}\n",
        )
        .replace(
            "        provider: ProviderB\n",
            "        provider: ProviderB\n        authorizationServerMode: Broker\n"
            f"        broker: {{redisUrl: 'redis://admin:{secret}@cache:6379/0'}}\n",
        )
        .replace(
            "    authorization:\n",
            "    rateLimit: {key: 'jwt.sub', requests: 5, window: 1m, "
            f"redisUrl: 'redis://cache:6379/0?password={secret}'}}\n    authorization:\n",
        )
        + "  backend:\n    credentials:\n"
        + credentials
    )
    return build_snapshot(load_paths([write(tmp_path, text)]))


@pytest.mark.parametrize(
    "credentials",
    [
        "      secretHeader:\n        header: X-Api-Key\n        value: {env: ADMIN_TEST_SECRET}\n"
        "        identity: {header: X-Identity, claims: [sub]}\n",
        "      tokenExchange:\n        clientId: gw\n"
        "        clientSecret: {env: ADMIN_TEST_SECRET}\n        audience: backend\n",
    ],
    ids=["secretHeader", "tokenExchange"],
)
async def test_no_secret_of_the_configuration_reaches_an_admin_answer(
    tmp_path, monkeypatch, credentials
):
    secret = "S3cr3t-value-42"
    monkeypatch.setenv("ADMIN_TEST_SECRET", f"env-{secret}")
    snapshot = _resources(tmp_path, secret, credentials)
    route = snapshot.listeners[8080][0]
    assert route.policy is not None
    assert route.policy.invalid is None, route.policy.invalid
    assert route.policy.credentials is not None  # the secret is loaded, and must not be shown
    dumped = config_dump(snapshot)
    policy_view = dumped["policies"]["default/auth"]  # type: ignore[index]
    assert policy_view["jwks"] == "https://idp.internal/jwks?key=***"
    assert policy_view["mcp"]["redisUrl"] == "redis://***@cache:6379/0"
    assert policy_view["rateLimit"]["redisUrl"] == "redis://cache:6379/0?password=***"
    app = GatewayApp(ControlPlane(snapshot), ServeOptions(status_port=9901))
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=app), base_url="http://127.0.0.1:9901"
    ) as client:
        answers = [(await client.get(p)).text for p in ("/config", "/status", "/readyz")]
    for text in [json.dumps(dumped), *answers]:
        assert secret not in text
