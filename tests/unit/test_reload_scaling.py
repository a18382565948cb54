"""Reloads parse only the files that changed and compile each CEL source once, yet build the
same snapshot as a load from scratch; an old configuration leaves nothing reachable behind."""

from __future__ import annotations

import dataclasses
import gc
import tracemalloc
import weakref
from pathlib import Path

import pytest

from mcp_oauth_gateway.asgi import Limits
from mcp_oauth_gateway.controlplane import build_from_objects, build_snapshot
from mcp_oauth_gateway.controlplane.cel import CelCompileError, compile_expression
from mcp_oauth_gateway.controlplane.control import ControlPlane
from mcp_oauth_gateway.controlplane.snapshot import (
    CompiledPolicy,
    CompiledRoute,
    PolicyReport,
    Snapshot,
)
from mcp_oauth_gateway.proxy.pool import RawUpstream
from mcp_oauth_gateway.resources.loader import FileCache, load_paths
from mcp_oauth_gateway.serving.pipeline import Assembly
from mcp_oauth_gateway.serving.process_state import ProcessState

from .resources_fixture import policy

GATEWAY = """apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {name: gw}
spec: {listeners: [{name: http, port: 8080}]}
"""

ROUTE = """apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: r{i}}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches: [{{path: {{type: {kind}, value: /r{path}}}}}]
      backendRefs: [{{name: b{i}}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: b{i}}}
spec: {{mcp: {{targets: [{{name: t, static: {{host: 127.0.0.1, port: 9}}}}]}}}}
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: p{i}}}
spec:
  targetRefs: [{{kind: HTTPRoute, name: r{i}}}]
  traffic:
    jwtAuthentication:
      providers:
        - issuer: https://idp.example/realms/staff
          audiences: [mcp]
          jwks: {{remote: {{url: "https://idp.example/realms/staff/certs"}}}}
    authorization:
      action: Allow
      policy: {{matchExpressions: ['{rule}']}}
"""


def write_routes(directory: Path, count: int, rule: str = '"team" in jwt.groups') -> None:
    """A Gateway and `count` routes, one file each; some share a path, some rules are bad."""
    directory.mkdir(exist_ok=True)
    (directory / "gateway.yaml").write_text(GATEWAY)
    for i in range(count):
        text = ROUTE.format(
            i=i,
            kind="Exact" if i % 3 == 0 else "PathPrefix",
            path=i % 7,
            rule=rule if i % 4 else f'"team-{i}" in jwt.groups',
        )
        (directory / f"route-{i:03d}.yaml").write_text(text)


def assembly(snapshot: Snapshot) -> Assembly:
    return Assembly(ControlPlane(snapshot), RawUpstream(), False, ProcessState(), Limits())


def test_a_cached_load_equals_a_load_from_scratch(tmp_path):
    write_routes(tmp_path / "cfg", 40)
    cache = FileCache()
    assert load_paths([tmp_path / "cfg"], cache).resources  # fills the cache
    (tmp_path / "cfg" / "route-005.yaml").write_text(
        ROUTE.format(i=5, kind="Exact", path=5, rule='jwt.sub == "x"')
    )
    (tmp_path / "cfg" / "route-006.yaml").unlink()
    (tmp_path / "cfg" / "bad.yaml").write_text("a: [1\n")
    cached = load_paths([tmp_path / "cfg"], cache)
    plain = load_paths([tmp_path / "cfg"])
    assert cached.errors == plain.errors
    assert cached.errors[0].startswith(f"{tmp_path / 'cfg' / 'bad.yaml'}:2:1: invalid YAML")
    assert cached.resources == plain.resources
    first = build_from_objects(cached.resources, at="T")
    second = build_from_objects(plain.resources, at="T")
    assert first == second
    changed = next(
        item for item in cached.resources if item.resource.metadata.name == "p5"
    ).resource
    assert changed.spec.traffic.authorization.policy.match_expressions == ['jwt.sub == "x"']


def test_unchanged_files_are_not_parsed_again_and_only_the_last_load_is_kept(tmp_path):
    write_routes(tmp_path / "cfg", 5)
    cache = FileCache()
    before = load_paths([tmp_path / "cfg"], cache).resources
    (tmp_path / "cfg" / "route-001.yaml").write_text(
        ROUTE.format(i=1, kind="Exact", path=1, rule="true")
    )
    (tmp_path / "cfg" / "route-004.yaml").unlink()
    after = load_paths([tmp_path / "cfg"], cache).resources
    by_name = {item.resource.metadata.name: item for item in before}
    for item in after:
        name = item.resource.metadata.name
        # In the changed file, the documents that changed (its backend, b1, did not).
        if name in ("r1", "p1"):
            assert item is not by_name[name]
        else:
            assert item is by_name[name]
    assert len(cache) == 5  # the gateway and four routes: the removed file is forgotten
    # The same bytes under another path are parsed for that path: sources name the file.
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "gateway.yaml").write_text(GATEWAY)
    moved = load_paths([tmp_path / "other"], cache)
    assert moved.resources[0].source.path == str(tmp_path / "other" / "gateway.yaml")
    assert len(cache) == 1


def test_a_cel_source_compiles_once_per_environment():
    first = compile_expression('"a" in jwt.groups')
    assert compile_expression('"a" in jwt.groups') is first
    assert compile_expression('"a" in jwt.groups', mcp=True) is not first
    # The tool-level environment knows `mcp`; the route-level one does not.
    assert compile_expression("mcp.name == 'x'", mcp=True).source == "mcp.name == 'x'"
    for _ in range(2):  # a failure is not remembered as a success
        with pytest.raises(CelCompileError):
            compile_expression("mcp.name == 'x'")


def test_the_cached_build_serves_the_same_as_the_plain_one(tmp_path):
    write_routes(tmp_path / "cfg", 30)
    # A policy with problems (its route and Service missing) and a conflict on route r1.
    (tmp_path / "cfg" / "extra.yaml").write_text(policy(name="extra", target="r1"))
    cache = FileCache()
    load_paths([tmp_path / "cfg"], cache)
    cached = build_snapshot(load_paths([tmp_path / "cfg"], cache))
    plain = build_snapshot(load_paths([tmp_path / "cfg"]))
    assert (cached.listeners, _timeless(cached.policies), cached.errors) == (
        plain.listeners,
        _timeless(plain.policies),
        plain.errors,
    )


def _timeless(reports: tuple[PolicyReport, ...]) -> tuple[PolicyReport, ...]:
    """The reports with their conditions' transition times left out (two builds may straddle a
    second)."""
    return tuple(
        dataclasses.replace(
            report,
            conditions=tuple(
                dataclasses.replace(c, last_transition_time="") for c in report.conditions
            ),
        )
        for report in reports
    )


def _one_generation(
    directory: Path, cache: FileCache, parts: Assembly, serving: dict[str, object]
) -> list[weakref.ref]:
    """Load, build and install once, as a reload does (`serving` holds the route tables, as the
    app does); weak references to what that generation made."""
    snapshot = build_snapshot(load_paths([directory], cache))
    assert snapshot.ok, snapshot.errors
    parts.control.install(snapshot)
    tables = parts.tables(snapshot)
    serving["tables"] = tables
    # (Compiled routes and policies have slots and no weak references: counted below.)
    return [weakref.ref(obj) for obj in (snapshot, tables[8080], tables[8080].entries[-1].app)]


def live(kind: type) -> int:
    """How many objects of `kind` the garbage collector tracks now."""
    return sum(1 for obj in gc.get_objects() if isinstance(obj, kind))


def test_old_generations_leave_nothing_reachable(tmp_path):
    write_routes(tmp_path / "cfg", 60)
    cache = FileCache()
    parts, serving = assembly(Snapshot.empty()), {}
    gc.collect()
    routes, policies = live(CompiledRoute), live(CompiledPolicy)
    generations = [_one_generation(tmp_path / "cfg", cache, parts, serving) for _ in range(4)]
    gc.collect()
    # The last generation is serving; every earlier one is gone.
    assert all(ref() is not None for ref in generations[-1])
    for refs in generations[:-1]:
        assert [ref() for ref in refs] == [None] * len(refs)
    assert live(CompiledRoute) - routes == 60
    assert live(CompiledPolicy) - policies == 60


def test_memory_is_flat_across_many_builds(tmp_path):
    write_routes(tmp_path / "cfg", 60)
    cache = FileCache()
    parts, serving = assembly(Snapshot.empty()), {}
    tracemalloc.start()
    try:
        _one_generation(tmp_path / "cfg", cache, parts, serving)
        gc.collect()
        one = tracemalloc.get_traced_memory()[0]
        for _ in range(2):  # the first builds resize a few process-wide tables
            _one_generation(tmp_path / "cfg", cache, parts, serving)
        gc.collect()
        settled = tracemalloc.get_traced_memory()[0]
        for _ in range(12):
            _one_generation(tmp_path / "cfg", cache, parts, serving)
        gc.collect()
        grown = tracemalloc.get_traced_memory()[0] - settled
    finally:
        tracemalloc.stop()
    # Twelve more generations hold less than a tenth of what one holds: nothing accumulates.
    assert grown < one / 10, (grown, one)


def test_the_collector_is_paused_inside_a_build_and_restored_after():
    from mcp_oauth_gateway.controlplane.collector import collector_paused

    def failing_build() -> None:
        with collector_paused():
            assert not gc.isenabled()
            raise RuntimeError("a build that fails")

    assert gc.isenabled()
    with pytest.raises(RuntimeError):
        failing_build()
    assert gc.isenabled()
    gc.disable()
    try:
        with collector_paused():
            assert not gc.isenabled()
        assert not gc.isenabled()  # one disabled by someone else stays so
    finally:
        gc.enable()
