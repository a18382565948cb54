"""A reload builds again only the pipelines whose inputs changed (`serving/pipeline.py`): the
routes a change does not reach keep their pipeline (the same object, its token cache with it),
the route it reaches serves the new rule at once; and a pipeline is built again whenever
anything it holds changed though its route did not: a keyset holder, a discovery cache, the
other protected resources on its host. What a stage reads of the process is listed here, so a
stage that starts reading more fails this test until `pipeline_inputs` names it."""

from __future__ import annotations

import ast
from dataclasses import replace
from pathlib import Path

from mcp_oauth_gateway.asgi import Limits
from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.controlplane.discovery import DiscoveryCache
from mcp_oauth_gateway.controlplane.jwks import RemoteKeyset
from mcp_oauth_gateway.proxy.pool import RawUpstream
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving import pipeline
from mcp_oauth_gateway.serving.pipeline import Assembly
from mcp_oauth_gateway.serving.process_state import ProcessState
from support import new_key
from unit.reload_support import GATEWAY, apps_by_route, call_as, tenant, watched_app
from unit.resources_fixture import BASE, policy, write

KEYS = [new_key(f"k{i}") for i in range(3)]
BOTH = ('"a" in jwt.groups', '"b" in jwt.groups')


def tenants(rules: dict[int, tuple[str, ...]]) -> str:
    return GATEWAY + "".join(tenant(i, KEYS[i], rules.get(i, BOTH)) for i in range(3))


async def test_a_reload_builds_again_only_the_pipeline_of_the_route_it_changes(tmp_path):
    config = tmp_path / "config"
    config.mkdir()
    (config / "all.yaml").write_text(tenants({}))
    app, watcher = watched_app(config)
    before = apps_by_route(app)
    assert await call_as(app, KEYS[1], "/t1", ("b",)) == 200
    # Narrower: tenant 1 drops a rule (a reload may narrow).
    (config / "all.yaml").write_text(tenants({1: ('"a" in jwt.groups',)}))
    assert await watcher.reload(), watcher.last_error
    after = apps_by_route(app)
    assert after["default/t0"] is before["default/t0"]
    assert after["default/t2"] is before["default/t2"]
    assert after["default/t1"] is not before["default/t1"]
    assert await call_as(app, KEYS[1], "/t1", ("b",)) == 403
    assert await call_as(app, KEYS[0], "/t0", ("b",)) == 200


def assembly(control: ControlPlane) -> Assembly:
    return Assembly(control, RawUpstream(), False, ProcessState(), Limits())


def facade(tmp_path: Path, text: str = BASE + policy()) -> tuple[ControlPlane, Assembly]:
    snapshot = build_snapshot(load_paths([write(tmp_path, text)]))
    control = ControlPlane(snapshot)
    return control, assembly(control)


def app_of(parts: Assembly, control: ControlPlane, route: str = "default/mcp") -> object:
    tables = parts.tables(control.snapshot)
    return next(e.app for t in tables.values() for e in t.entries if e.route.route == route)


def test_the_same_inputs_keep_the_pipeline(tmp_path):
    control, parts = facade(tmp_path)
    first = app_of(parts, control)
    assert app_of(parts, control) is first
    # The same route compiled again (an equal object, not the same one) is built again.
    listeners = {
        port: tuple(replace(r) for r in routes)
        for port, routes in control.snapshot.listeners.items()
    }
    control.snapshot = replace(control.snapshot, listeners=listeners)  # type: ignore[arg-type]
    assert app_of(parts, control) is not first


def test_a_new_keyset_holder_builds_the_pipeline_again(tmp_path):
    control, parts = facade(tmp_path)
    first = app_of(parts, control)
    (url,) = control.keysets
    control.keysets[url] = RemoteKeyset(url, 300)
    assert app_of(parts, control) is not first


def test_a_new_discovery_cache_builds_the_pipeline_again(tmp_path):
    control, parts = facade(tmp_path)
    first = app_of(parts, control)
    (url,) = control.discoveries
    control.discoveries[url] = DiscoveryCache(url, 300)
    assert app_of(parts, control) is not first


SECOND_RESOURCE = """
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {name: other}
spec:
  parentRefs: [{name: gw}]
  rules:
    - matches: [{path: {type: PathPrefix, value: /other}}]
      backendRefs: [{name: backend}]
"""


def test_another_protected_resource_on_the_host_builds_the_pipeline_again(tmp_path):
    control, parts = facade(tmp_path)
    first = app_of(parts, control)
    kept = control.snapshot.listeners[8080][0]
    second = policy(name="other", target="other").replace("gw.example/mcp", "gw.example/other")
    shared = build_snapshot(
        load_paths([write(tmp_path, BASE + policy() + SECOND_RESOURCE + second)])
    )
    assert shared.ok, shared.errors
    # The very route object that is served, now sharing its host with another resource.
    rows = tuple(kept if r.route == kept.route else r for r in shared.listeners[8080])
    assert kept in shared.listeners[8080]
    control.snapshot = replace(shared, listeners={8080: rows})  # type: ignore[arg-type]
    assert app_of(parts, control) is not first


# What the stages read of the process, besides the compiled route: the control plane's
# holders (in `pipeline_inputs`) and session (read at request time), and the process state's
# parts, each kept by it under values of the route (the same values, the same part).
CONTROL_READS = {"keysets", "discoveries", "session"}
PROCESS_STATE_READS = {
    "documents",
    "dpop_replay",
    "federation_of",
    "limiter",
    "store",
    "user_oauth",
    "workload_keys",
}


def attributes_of(name: str) -> set[str]:
    """Every attribute the serving package reads of an object it calls `name` (`x.name.attr`
    or `name.attr`)."""
    found = set()
    for path in Path(pipeline.__file__).parent.glob("*.py"):
        if path.name in ("app.py", "admin.py", "pipeline.py"):
            continue  # not part of a route's pipeline
        for node in ast.walk(ast.parse(path.read_text())):
            if not isinstance(node, ast.Attribute):
                continue
            value = node.value
            named = value.id if isinstance(value, ast.Name) else getattr(value, "attr", None)
            if named == name:
                found.add(node.attr)
    return found


def test_the_stages_read_of_the_process_only_what_the_pipeline_inputs_cover():
    assert attributes_of("control") <= CONTROL_READS
    assert attributes_of("process_state") <= PROCESS_STATE_READS
