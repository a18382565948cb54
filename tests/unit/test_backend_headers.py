"""What the backend receives of the headers the gateway sets, through a whole pipeline (entry
checks, every stage, the proxy) in front of an in-memory backend: a secret header, a signed
identity, a transformation header, the request id and the list filter's Accept-Encoding.

One rule holds for all of them, whatever the request looks like: the backend gets exactly the
gateway's value, once, under its own name; a client copy, an underscore alias (read as the same
variable by CGI-style servers) and a `Connection` header naming one are refused or never reach
the backend."""

from __future__ import annotations

import json

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st

from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp
from support import claims_for, jwks_of, mint, new_key
from unit.fuzz_settings import FUZZ
from unit.resources_fixture import BASE, policy, write
from unit.stages.harness import MemoryUpstream

ISSUER = "http://idp/application/o/mcp/"
KEY = new_key("k1")
SECRET = "s3cret-value"
# Headers the gateway sets on this route, and the value each must reach the backend with.
SET_BY_GATEWAY = ("x-api-key", "x-mcp-identity", "x-user")
EXTRA = """\
    transformation:
      request:
        set:
          - name: X-User
            value: jwt.sub
  backend:
    credentials:
      secretHeader:
        header: X-Api-Key
        value: {env: TEST_BACKEND_SECRET}
        identity:
          header: X-Mcp-Identity
    mcp:
      authorization:
        action: Allow
        policy:
          matchExpressions: ['mcp.tool.name == "echo"']
"""
REMOTE = (
    "          jwks:\n            remote:\n              backendRef: {name: authentik, port: 9000}"
    "\n              jwksPath: /application/o/mcp/jwks/"
)


@pytest.fixture(scope="module")
def app(tmp_path_factory, monkeypatch_module):
    monkeypatch_module.setenv("TEST_BACKEND_SECRET", SECRET)
    inline = f"          jwks:\n            inline: '{json.dumps(jwks_of(KEY))}'"
    text = (BASE + policy() + EXTRA).replace(REMOTE, inline)
    snapshot = build_snapshot(load_paths([write(tmp_path_factory.mktemp("r"), text)]))
    route = snapshot.listeners[8080][0]
    assert route.policy is not None
    assert route.policy.invalid is None, route.policy.invalid
    upstream = MemoryUpstream()
    return GatewayApp(ControlPlane(snapshot), upstream=upstream), upstream


@pytest.fixture(scope="module")
def monkeypatch_module():
    with pytest.MonkeyPatch.context() as patch:
        yield patch


TOKEN = mint(KEY, claims_for(ISSUER, "mcp-public", sub="alice"))
CALL = b'{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"echo"}}'


async def send(app, extra: list[tuple[str, str]]) -> httpx.Response:
    gateway, _ = app
    headers = [
        ("authorization", f"Bearer {TOKEN}"),
        ("content-type", "application/json"),
        *extra,
    ]
    async with httpx.AsyncClient(
        transport=httpx.ASGITransport(app=gateway), base_url="http://gw.example:8080"
    ) as client:
        return await client.post("/mcp", content=CALL, headers=httpx.Headers(headers))


def forwarded(app) -> list[tuple[bytes, bytes]]:
    _, upstream = app
    return upstream.sent[-1].headers


def gateway_values(headers: list[tuple[bytes, bytes]]) -> dict[bytes, list[bytes]]:
    out: dict[bytes, list[bytes]] = {}
    for name, value in headers:
        canonical = name.lower().replace(b"_", b"-")
        if canonical.decode() in SET_BY_GATEWAY:
            out.setdefault(canonical, []).append(value)
    return out


def assert_the_gateways_own(headers: list[tuple[bytes, bytes]]) -> None:
    seen = gateway_values(headers)
    assert seen[b"x-api-key"] == [SECRET.encode()]
    assert seen[b"x-user"] == [b"alice"]
    identity = json.loads(seen[b"x-mcp-identity"][0])
    assert (identity.get("sub"), len(seen[b"x-mcp-identity"])) == ("alice", 1)
    # No other spelling of those names reaches the backend.
    names = [
        name for name, _ in headers if name.lower().replace(b"_", b"-").decode() in SET_BY_GATEWAY
    ]
    assert sorted(names) == sorted(n.encode() for n in SET_BY_GATEWAY)


@pytest.mark.parametrize(
    "extra",
    [
        [("Connection", "X-Mcp-Identity"), ("X_Mcp_Identity", '{"sub":"root"}')],
        [("Connection", "X-Api-Key")],
        [("Connection", "keep-alive, x-user")],
        [("X_Api_Key", "forged")],
        [("x_mcp_identity", '{"sub":"root"}')],
        [("X-Mcp-Identity", '{"sub":"root"}'), ("X-Mcp-Identity", '{"sub":"root"}')],
    ],
    ids=["identity named and aliased", "key named", "user named", "key alias", "id alias", "twice"],
)
async def test_a_header_the_gateway_sets_cannot_be_removed_or_shadowed(app, extra):
    before = len(app[1].sent)
    response = await send(app, extra)
    assert response.status_code == 400, response.text
    assert response.json()["error"] == "invalid_request"
    assert len(app[1].sent) == before  # nothing reached the backend


async def test_a_client_copy_is_replaced_by_the_gateways_value(app):
    response = await send(app, [("X-Api-Key", "forged"), ("X-Mcp-Identity", '{"sub":"root"}')])
    assert response.status_code == 200, response.text
    assert_the_gateways_own(forwarded(app))


NAMES = st.sampled_from(["X-Api-Key", "X-Mcp-Identity", "X-User", "X-Other", "Accept-Encoding"])


@st.composite
def spellings(draw: st.DrawFn) -> str:
    name = draw(NAMES)
    name = "".join(c.upper() if draw(st.booleans()) else c.lower() for c in name)
    return name.replace("-", "_") if draw(st.booleans()) else name


@FUZZ
@given(
    st.lists(
        st.one_of(
            st.tuples(spellings(), st.sampled_from(["forged", '{"sub":"root"}'])),
            st.tuples(st.just("Connection"), st.lists(spellings(), min_size=1).map(", ".join)),
        ),
        max_size=4,
    )
)
async def test_whatever_the_client_sends_the_backend_gets_only_the_gateways_values(app, extra):
    before = len(app[1].sent)
    response = await send(app, extra)
    if response.status_code == 400:
        assert len(app[1].sent) == before
        return
    assert response.status_code == 200, response.text
    assert_the_gateways_own(forwarded(app))
