"""Credentials per target on a federated route, built as the gateway builds the route
(`RouteContext`, `stage_builders`) over in-memory targets and a token endpoint on loopback: each
target gets its own credential, never the caller's token nor a client's copy of any target's
header; a token is exchanged only for the targets a request reaches; a target whose exchange the
provider refuses is unavailable for that request alone (its items drop out of lists, its calls
get JSON-RPC -32603 naming it and the refusal), without being marked down."""

from __future__ import annotations

from types import MappingProxyType
from typing import Any
from urllib.parse import parse_qs

import aiohttp
import pytest
from aiohttp import web

from mcp_oauth_gateway.asgi import AUDIT_KEY, CLAIMS_KEY, TOKEN_KEY, Limits
from mcp_oauth_gateway.audit import AuditRecord
from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.controlplane.snapshot import CompiledRoute, Snapshot
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving import stage_builders
from mcp_oauth_gateway.serving.admin import config_dump
from mcp_oauth_gateway.serving.process_state import ProcessState
from mcp_oauth_gateway.serving.route_context import RouteContext, Shared
from unit.resources_fixture import BASE, policy, write

from . import federation_targets
from .federation_targets import INIT, Targets, rpc
from .harness import drive

ONE = "    targets: [{name: t, static: {host: 127.0.0.1, port: 9}}]\n"
TARGETS = (
    "    targets: [{name: a, static: {host: 127.0.0.1, port: 9001}},"
    " {name: b, static: {host: 127.0.0.1, port: 9002}},"
    " {name: c, static: {host: 127.0.0.1, port: 9003}}]\n"
)
ISSUER = "http://idp/application/o/mcp/"
EXCHANGE = "{clientId: gw, clientSecret: {env: FED_SECRET}, audience: %s}"
# a and b exchange for audiences of their own; c gets the default, a secret header.
CREDENTIALS = f"""  backend:
    credentials:
      secretHeader: {{header: X-Api-Key, value: {{env: FED_KEY}}}}
      targets:
        - {{name: a, tokenExchange: {EXCHANGE % "a-aud"}}}
        - {{name: b, tokenExchange: {EXCHANGE % "b-aud"}}}
"""
REFUSAL = {"error": "invalid_client", "error_description": "Audience not found"}


def caller(token: str = "caller-1") -> dict[str, object]:
    return {CLAIMS_KEY: {"iss": ISSUER, "sub": "alice"}, TOKEN_KEY: token}


@pytest.fixture
async def provider():
    """A token endpoint: `<audience>:<caller token>` for each exchange, a refusal for the
    audiences in `refused`; `seen` holds each exchange's form."""
    seen: list[dict[str, str]] = []
    refused: set[str] = set()

    async def token(request: web.Request) -> web.Response:
        form = {k: v[0] for k, v in parse_qs(await request.text()).items()}
        seen.append(form)
        if form["audience"] in refused:
            return web.json_response(REFUSAL, status=400)
        issued = f"{form['audience']}:{form['subject_token']}"
        return web.json_response({"access_token": issued, "expires_in": 300})

    app = web.Application()
    app.router.add_post("/token", token)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    session = aiohttp.ClientSession()
    endpoint = f"http://127.0.0.1:{runner.addresses[0][1]}/token"
    yield endpoint, session, seen, refused
    await session.close()
    await runner.cleanup()


class Discovery:
    def __init__(self, endpoint: str):
        self.document = {"token_endpoint": endpoint}

    async def get(self) -> dict[str, object]:
        return self.document


def route_of(tmp_path, monkeypatch, targets: str = TARGETS) -> CompiledRoute:
    # A third in-memory target, c, with one tool.
    monkeypatch.setitem(federation_targets.PORTS, 9003, "c")
    monkeypatch.setitem(federation_targets.TOOLS, "c", ["v1"])
    monkeypatch.setenv("FED_SECRET", "s3cret")
    monkeypatch.setenv("FED_KEY", "k-123")
    text = BASE.replace(ONE, targets) + policy() + CREDENTIALS
    snapshot = build_snapshot(load_paths([write(tmp_path, text)]))
    route = snapshot.listeners[8080][0]
    assert route.policy is not None
    assert route.policy.invalid is None, route.policy.invalid
    return route


def context(route: CompiledRoute, provider, targets: Targets) -> RouteContext:
    endpoint, session, _, _ = provider
    control = ControlPlane(build_snapshot(load_paths([])))
    control.session = session
    assert route.policy is not None
    for p in route.policy.providers:
        control.discoveries[p.discovery_url] = Discovery(endpoint)  # type: ignore[assignment]
    return RouteContext(route, Shared(control, targets, False, ProcessState(), Limits()))


@pytest.fixture
def built(tmp_path, monkeypatch, provider):
    """The route's backend-credentials and federation stages, over in-memory targets."""
    targets = Targets()
    ctx = context(route_of(tmp_path, monkeypatch), provider, targets)
    app = stage_builders.backend_credentials(ctx, stage_builders.federation(ctx))
    return app, targets, ctx


async def open_session(app, token: str = "caller-1") -> bytes:
    spoofed = [(b"authorization", b"Bearer client-made"), (b"x-api-key", b"client-made")]
    response = await drive(app, "POST", headers=spoofed, body=INIT, scope=caller(token))
    assert response.status == 200, response.body
    session = response.header(b"mcp-session-id")
    assert session is not None
    return session


def sent(targets: Targets, name: str) -> list[dict[bytes, list[bytes]]]:
    """The headers of each request target `name` got."""
    out = []
    for target, headers, _ in targets.seen:
        if target == name:
            by_name: dict[bytes, list[bytes]] = {}
            for key, value in headers:
                by_name.setdefault(key, []).append(value)
            out.append(by_name)
    return out


async def test_each_target_gets_its_own_credential_and_no_clients_copy(built, provider):
    app, targets, _ = built
    await open_session(app)
    for name in ("a", "b"):
        [initialize] = sent(targets, name)
        assert initialize[b"authorization"] == [f"Bearer {name}-aud:caller-1".encode()]
        assert b"x-api-key" not in initialize  # the default's header, a client's copy
    [initialize] = sent(targets, "c")
    assert initialize[b"x-api-key"] == [b"k-123"]
    assert b"authorization" not in initialize  # neither the client's nor the caller's token
    audiences = sorted(form["audience"] for form in provider[2])
    assert audiences == ["a-aud", "b-aud"]
    assert {form["subject_token"] for form in provider[2]} == {"caller-1"}


async def test_a_call_exchanges_for_its_own_target_only(built, provider):
    app, targets, _ = built
    session = await open_session(app)
    seen = provider[2]
    assert len(seen) == 2  # initialize reached a and b
    # The client's token was renewed: the call to a exchanges the new one for a, not for b.
    headers = [(b"mcp-session-id", session)]
    call = rpc("tools/call", 7, name="a_t1", arguments={})
    response = await drive(app, "POST", headers=headers, body=call, scope=caller("caller-2"))
    assert response.status == 200
    assert b'"by":"a"' in response.body
    assert [(f["audience"], f["subject_token"]) for f in seen[2:]] == [("a-aud", "caller-2")]
    assert sent(targets, "a")[-1][b"authorization"] == [b"Bearer a-aud:caller-2"]


async def test_a_refused_exchange_leaves_that_target_out_and_fails_its_calls(built, provider):
    app, targets, _ = built
    provider[3].add("b-aud")
    session = await open_session(app)
    headers = [(b"mcp-session-id", session)]
    record = AuditRecord()
    listed = await drive(
        app,
        "POST",
        headers=headers,
        body=rpc("tools/list"),
        scope={**caller(), AUDIT_KEY: record},
    )
    assert listed.status == 200
    assert [t["name"] for t in listed.json()["result"]["tools"]] == ["a_t1", "a_t2", "c_v1"]
    assert record.decision != "deny"  # the list was answered: b's absence is a note
    assert record.notes is not None
    assert any("target 'b'" in note and "Audience not found" in note for note in record.notes)
    record = AuditRecord()
    call = rpc("tools/call", 9, name="b_u1", arguments={})
    response = await drive(
        app, "POST", headers=headers, body=call, scope={**caller(), AUDIT_KEY: record}
    )
    assert response.status == 200
    error = response.json()["error"]
    assert error["code"] == -32603
    assert "'b'" in error["message"]
    assert "the provider refused: invalid_client: Audience not found" in error["message"]
    assert (record.decision, record.stage) == ("deny", "federation")
    assert sent(targets, "b") == []  # nothing reached b, least of all the caller's token


async def test_a_refused_exchange_is_counted_but_does_not_mark_the_target_down(
    tmp_path, monkeypatch, provider
):
    targets = Targets()
    ctx = context(route_of(tmp_path, monkeypatch), provider, targets)
    federation = stage_builders.federation(ctx)
    app = stage_builders.backend_credentials(ctx, federation)
    await open_session(app)  # b answers: up
    provider[3].add("b-aud")
    session = await open_session(app, "caller-2")  # a new token: b's exchange is refused
    await drive(
        app, "POST", headers=[(b"mcp-session-id", session)], body=rpc("tools/list"), scope=caller()
    )
    health = federation.health.of("b")  # type: ignore[attr-defined]
    assert health.up is True
    assert health.failures.get("no_credential", 0) >= 1
    assert "no credential for it: the provider refused" in (health.last_error or "")


def test_targets_not_listed_get_the_default_and_alike_exchanges_share_a_cache(
    tmp_path, monkeypatch, provider
):
    route = route_of(tmp_path, monkeypatch)
    ctx = context(route, provider, Targets())
    per_target = ctx.target_credentials
    assert per_target is not None
    modes = {n: c.credentials.mode if c else None for n, c in per_target.by_target.items()}
    assert modes == {"a": "TokenExchange", "b": "TokenExchange", "c": "SecretHeader"}
    assert per_target.owned == {b"authorization", b"x-api-key"}
    a, b = per_target.by_target["a"], per_target.by_target["b"]
    assert a is not None
    assert b is not None
    assert a.exchanger is not b.exchanger  # two audiences, two caches
    assert route.policy is not None
    assert route.policy.target_credentials[0][1].token_exchange is not None
    same = ctx.exchanger_for(route.policy, route.policy.target_credentials[0][1].token_exchange)
    assert same is a.exchanger


def test_config_shows_each_targets_credential_and_no_secret(tmp_path, monkeypatch, provider):
    route = route_of(tmp_path, monkeypatch)
    empty: MappingProxyType[str, Any] = MappingProxyType({})
    dump = config_dump(Snapshot(MappingProxyType({8080: (route,)}), (), (), empty, empty))
    shown = dump["policies"]["default/auth"]["credentials"]  # type: ignore[index]
    assert shown["mode"] == "SecretHeader"
    assert shown["secretHeader"]["header"] == "x-api-key"
    assert shown["targets"]["a"]["tokenExchange"]["audience"] == "a-aud"
    assert shown["targets"]["b"]["tokenExchange"]["audience"] == "b-aud"
    assert "s3cret" not in repr(dump)
    assert "k-123" not in repr(dump)
