"""The way declared once (issues 27, 40): `stages.ENTRY` then `stages.PIPELINE` are the request's
way, the gateway and the assembly build exactly the steps they declare in that order, every name
the audit trail writes is declared, and `/config` shows what every stage reads of a policy, so a
policy field no stage shows cannot be added unnoticed."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path
from types import MappingProxyType
from typing import Any

import pytest

import mcp_oauth_gateway
from mcp_oauth_gateway import audit
from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.controlplane.snapshot import CompiledPolicy, CompiledRoute, Snapshot
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.admin import config_dump
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.options import ServeOptions
from mcp_oauth_gateway.serving.stages import ENTRY, PIPELINE, Stage, passed, stages_for

from .resources_fixture import BASE, policy, write

# Everything a policy can turn on, on the provider-B layout.
FULL = (
    policy()
    .replace(
        "        provider: ProviderB\n",
        "        provider: ProviderB\n        authorizationServerMode: Broker\n",
    )
    .replace(
        "    authorization:\n",
        "    scopes: {required: [mcp:tools], implies: {'mcp:admin': [mcp:tools]}}\n"
        "    rateLimit: {key: 'jwt.sub', requests: 5, window: 1m}\n"
        "    transformation:\n      request:\n"
        "        set: [{name: X-User, value: 'jwt.sub'}]\n        remove: [X-Debug]\n"
        "    authorization:\n",
    )
    + "  backend:\n"
    "    mcp:\n"
    "      authorization: {action: Allow, policy: {matchExpressions: ['true']}}\n"
    "      scopes: [{match: 'mcp.tool.name == \"x\"', required: [mcp:admin]}]\n"
    "    credentials:\n"
    "      secretHeader: {header: X-Api-Key, value: {env: STAGES_TEST_SECRET}}\n"
)
POLICY_STAGES = [
    "owned-headers",
    "oauth-endpoints",
    "jwt-authentication",
    "required-scopes",
    "cel-authorization",
    "rate-limit",
    "header-transformation",
    "mcp-authorization",
    "backend-credentials",
]


def _snapshot(tmp_path, text: str) -> Snapshot:
    snapshot = build_snapshot(load_paths([write(tmp_path, text)]))
    assert snapshot.errors == (), snapshot.errors
    return snapshot


def _route(snapshot: Snapshot) -> CompiledRoute:
    [route, *_] = next(iter(snapshot.listeners.values()))
    return route


@pytest.fixture
def full(tmp_path, monkeypatch) -> Snapshot:
    monkeypatch.setenv("STAGES_TEST_SECRET", "s3cret-value")
    return _snapshot(tmp_path, BASE + FULL)


@pytest.fixture
def full_route(full) -> CompiledRoute:
    route = _route(full)
    assert route.policy is not None
    assert route.policy.invalid is None, route.policy.invalid
    return route


def test_the_pipeline_is_one_list_in_the_request_order():
    names = [stage.name for stage in PIPELINE]
    assert names == [
        "broker-pages",
        "connect-pages",
        "cors",
        "fail-closed",
        *POLICY_STAGES,
        "federation",
        "reverse-proxy",
    ]
    assert PIPELINE[-1].answer is not None
    assert all(stage.does and stage.when for stage in PIPELINE)


def test_a_stage_is_built_one_way_only():
    with pytest.raises(TypeError, match="exactly one of wrap and answer"):
        Stage("x", "does nothing", "always", lambda route: True, None)
    with pytest.raises(TypeError, match="exactly one of wrap and answer"):
        Stage(
            "x", "both", "always", lambda route: True, None, wrap=lambda c, a: a, answer=lambda c: c
        )


def test_a_full_policy_runs_every_stage_in_order(full_route):
    names = [stage.name for stage in stages_for(full_route)]
    assert names == ["broker-pages", "cors", *POLICY_STAGES, "reverse-proxy"]


def test_a_route_that_cannot_be_served_stops_at_fail_closed(tmp_path, full_route):
    assert full_route.policy is not None
    broken = dataclasses.replace(full_route, target=None)
    invalid = dataclasses.replace(
        full_route, policy=dataclasses.replace(full_route.policy, invalid="bad")
    )
    for route in (broken, invalid):
        # No Broker pages either: nothing of the policy is served.
        assert [s.name for s in stages_for(route)] == ["cors", "fail-closed"]


def test_a_route_without_a_policy_is_only_proxied(tmp_path):
    route = dataclasses.replace(_route(_snapshot(tmp_path, BASE)), cors=None)
    assert [s.name for s in stages_for(route)] == ["reverse-proxy"]


def test_a_backend_with_several_targets_is_federated_instead_of_proxied(full_route):
    second = dataclasses.replace(full_route.targets[0], name="second")
    route = dataclasses.replace(full_route, targets=(*full_route.targets, second))
    names = [stage.name for stage in stages_for(route)]
    assert names == ["broker-pages", "cors", *POLICY_STAGES, "federation"]


def _chain(app: object) -> list[str]:
    """The class names from the outermost app inwards, following each stage's `app`."""
    out = []
    while app is not None:
        app = getattr(app, "__self__", app)  # a bound `__call__`: its step
        out.append(type(app).__name__)
        app = getattr(app, "app", None)
    return out


async def test_the_assembly_nests_the_declared_stages_in_order(full, full_route):
    gateway = GatewayApp(ControlPlane(full))
    try:
        app = gateway.assembly.route_app(full_route)
    finally:
        await gateway.process_state.close()
    assert _chain(app) == [
        "PathDispatch",
        "CorsFilter",
        "OwnedHeaders",
        "OAuthEndpoints",
        "JwtAuthentication",
        "RequiredScopes",
        "CelAuthorization",
        "RateLimit",
        "HeaderTransformation",
        "McpAuthorization",
        "BackendCredentials",
        # The audit trail's mark: the request reached the answering stage.
        "Answering",
        "ReverseProxy",
    ]


def test_config_names_each_routes_stages(full_route):
    dump = config_dump(_snapshot_of(full_route))
    [entry] = dump["listeners"]["8080"]  # type: ignore[index]
    assert entry["stages"] == [s.name for s in stages_for(full_route)]


def test_config_names_a_federated_routes_targets(full_route):
    second = dataclasses.replace(full_route.targets[0], name="second", port=9)
    route = dataclasses.replace(full_route, targets=(*full_route.targets, second))
    [entry] = config_dump(_snapshot_of(route))["listeners"]["8080"]  # type: ignore[index]
    first = full_route.targets[0]
    assert entry["targets"] == {
        first.name: f"http://{first.authority}{first.path}",
        "second": f"http://{first.host}:9{first.path}",
    }
    [single] = config_dump(_snapshot_of(full_route))["listeners"]["8080"]  # type: ignore[index]
    assert "targets" not in single


def _snapshot_of(route: CompiledRoute) -> Snapshot:
    empty: MappingProxyType[str, Any] = MappingProxyType({})
    return Snapshot(MappingProxyType({8080: (route,)}), (), (), empty, empty)


def _shown(route: CompiledRoute, policy: CompiledPolicy) -> object:
    return config_dump(_snapshot_of(dataclasses.replace(route, policy=policy)))["policies"]


# What turning a field off looks like, for the fields whose "off" is not None.
_OFF = {"providers": (), "forward_token": True, "jwt_mode": "Optional", "target_credentials": ()}


@pytest.mark.parametrize(
    "name",
    [f.name for f in dataclasses.fields(CompiledPolicy) if f.name not in ("key", "invalid")],
)
def test_config_shows_every_policy_field(full_route, name):
    """A policy field that no stage's view shows would be invisible in /config: changing any
    field of a full policy must change what /config shows."""
    policy = full_route.policy
    assert policy is not None
    # Credentials per target are resolved at load on a single-target route: given one here.
    policy = dataclasses.replace(policy, target_credentials=(("other", policy.credentials),))
    changed = dataclasses.replace(policy, **{name: _OFF.get(name)})
    assert _shown(full_route, changed) != _shown(full_route, policy), f"/config hides {name}"


def test_config_shows_no_secret(full_route):
    assert "s3cret-value" not in repr(config_dump(_snapshot_of(full_route)))


# The whole way declared once (issue 40): the gateway's own steps before the route's.
ENTRY_STEPS = [
    "access-line",
    "request-id",
    "own-listeners",
    "tracing",
    "server-error",
    "audit",
    "entry-rules",
    "routing",
]


def test_the_gateways_own_steps_are_one_list_ending_in_routing():
    assert [stage.name for stage in ENTRY] == ENTRY_STEPS
    assert ENTRY[-1].answer is not None
    assert all(stage.answer is None for stage in ENTRY[:-1])
    assert all(stage.does and stage.when for stage in ENTRY)
    # One name, one stage: no step of the gateway's shares a name with a route's stage.
    names = [stage.name for stage in (*ENTRY, *PIPELINE)]
    assert len(names) == len(set(names))


async def _entry_chain(tmp_path, full, **flags: Any) -> tuple[list[str], dict[str, object]]:
    """The entry's app from the outside in, and /config, for a gateway with `flags`."""
    gateway = GatewayApp(ControlPlane(full), ServeOptions(**flags))
    try:
        chain = _chain(gateway.entry)
        return chain, config_dump(full, gateway.admin.entry)
    finally:
        await gateway.process_state.close()


async def test_the_gateway_runs_the_steps_its_options_turn_on_in_order(tmp_path, full):
    plain, config = await _entry_chain(tmp_path, full)
    assert plain == ["AccessLine", "ServerError", "EntryRules", "Routing"]
    assert config["entry"] == ["access-line", "server-error", "entry-rules", "routing"]
    audited, config = await _entry_chain(
        tmp_path, full, audit_log=str(tmp_path / "audit.log"), status_port=9901
    )
    assert audited == [
        "AccessLine",
        "RequestId",
        "OwnListeners",
        "ServerError",
        "Audit",
        "EntryRules",
        "Routing",
    ]
    assert config["entry"] == [n for n in ENTRY_STEPS if n != "tracing"]


def test_every_stage_name_an_audit_line_can_carry_is_declared():
    """Stages name themselves in the audit trail by a constant of their module or a literal:
    each must be a name of ENTRY or PIPELINE (or the two lines no stage decided)."""
    declared = {stage.name for stage in (*ENTRY, *PIPELINE)} | {audit.GATEWAY, audit.CONNECTION}
    named: set[str] = set()
    for path in Path(mcp_oauth_gateway.__file__).parent.rglob("*.py"):
        text = path.read_text(encoding="utf-8")
        named |= set(re.findall(r'^(?:STAGE|AUDIT|ENTRY_RULES|ROUTING) = "([^"]+)"', text, re.M))
        named |= set(re.findall(r'audit\.(?:deny|allow)\(\s*scope,\s*"([^"]+)"', text))
        for chosen in re.findall(r"^\s*stage = (.+)$", text, re.M):  # one of two, say
            named |= set(re.findall(r'"([^"]+)"', chosen))
    assert {"entry-rules", "routing", "audit", "fail-closed", "broker-pages"} <= named
    assert named <= declared, named - declared


def test_the_audit_pages_stage_table_names_every_stage_that_decides():
    page = (Path(__file__).parents[2] / "docs" / "operations" / "audit.md").read_text()
    section = page[page.index("### Stages") : page.index("## Examples")]
    rows = section[section.index("|---") :]  # the rows below the table's head
    cells = re.findall(r"^\| (`[^|]+) \|", rows, re.M)
    shown = {name for cell in cells for name in re.findall(r"`([a-z-]+)`", cell)}
    declared = {stage.name for stage in (*ENTRY, *PIPELINE)} | {audit.GATEWAY, audit.CONNECTION}
    assert shown <= declared, shown - declared
    deciding = {s.name for s in PIPELINE} | {"entry-rules", "routing", "audit"}
    assert deciding <= shown, deciding - shown


def test_an_allowed_request_names_the_checks_it_passed(full_route):
    answering, reason = passed(full_route)
    assert answering == "reverse-proxy"
    # The stages that only answer requests of their own are not checks it passed.
    assert reason == "passed " + ", ".join(POLICY_STAGES[:1] + POLICY_STAGES[2:])
    assert [s.name for s in PIPELINE if not s.check] == ["broker-pages", "cors", "oauth-endpoints"]
