"""What outlives a reload is kept only while a configuration can use it: compiled CEL rules,
rate-limit buckets and federated sessions are found by values an edit changes, and an edited
value's old state is freed, not kept for good (issue 39: memory flat across changes)."""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from pathlib import Path

from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.controlplane.cel import compile_expression
from mcp_oauth_gateway.controlplane.snapshot import CompiledRoute, Snapshot
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.options import ServeOptions

from .config_variants_support import DEPLOYMENT, FEDERATED, OTHER_ROUTE, SECRETS, process_state_in
from .resources_fixture import BASE, policy
from .stages.harness import drive


def test_a_rule_no_configuration_holds_is_freed_and_compiled_anew():
    held = compile_expression('"retention-a" in jwt.groups')
    assert compile_expression('"retention-a" in jwt.groups') is held
    gone = weakref.ref(compile_expression('"retention-b" in jwt.groups'))
    assert gone() is None  # nothing held it: freed at once, not cached for later
    assert compile_expression('"retention-b" in jwt.groups').source == '"retention-b" in jwt.groups'


def serving(tmp_path: Path) -> tuple[GatewayApp, Callable[[str], Snapshot]]:
    """An app and what installs a configuration given as text."""
    path = tmp_path / "resources.yaml"

    def install(text: str) -> Snapshot:
        path.write_text(text)
        snapshot = build_snapshot(load_paths([path]), DEPLOYMENT)
        assert snapshot.errors == (), snapshot.errors
        assert all(report.ok for report in snapshot.policies), snapshot.policies
        if app is not None:
            app.control.install(snapshot)
        return snapshot

    app: GatewayApp | None = None
    app = GatewayApp(
        ControlPlane(install(BASE)), ServeOptions(), process_state=process_state_in(tmp_path)
    )
    return app, install


def route(snapshot: Snapshot) -> CompiledRoute:
    return snapshot.listeners[8080][0]


def limited_policy(target: str = "mcp", requests: int = 5) -> str:
    """A policy for `target` with a rate limit of `requests` a minute."""
    return policy(name=target, target=target).replace(
        "    authorization:\n",
        f"    rateLimit: {{key: 'jwt.sub', requests: {requests}, window: 1m}}\n"
        "    authorization:\n",
    )


def limited(requests: int) -> str:
    return BASE + limited_policy(requests=requests)


def test_an_edited_rate_limit_forgets_the_old_buckets(tmp_path):
    app, install = serving(tmp_path)
    process_state = app.process_state

    def limiter(snapshot: Snapshot) -> object:
        policy = route(snapshot).policy
        assert policy is not None
        assert policy.rate_limit is not None
        return process_state.limiter(policy.key, policy.rate_limit)

    first = limiter(install(limited(5)))
    assert limiter(install(limited(5))) is first  # unchanged: the same buckets
    old = weakref.ref(first)
    del first
    for requests in range(6, 12):
        install(limited(requests))
    gc.collect()
    assert old() is None, "the buckets of a limit no configuration has are kept"
    assert limiter(install(limited(5))) is not None


def test_edited_federation_targets_forget_the_old_sessions(tmp_path, monkeypatch):
    for variable, value in SECRETS.items():
        monkeypatch.setenv(variable, value)
    app, install = serving(tmp_path)
    process_state = app.process_state
    snapshot = install(FEDERATED)
    assert route(snapshot).federated
    first = process_state.federation_of(route(snapshot))
    assert process_state.federation_of(route(install(FEDERATED))) is first
    old = weakref.ref(first)
    del first
    for port in range(9100, 9106):
        install(FEDERATED.replace("port: 9003", f"port: {port}"))
    gc.collect()
    assert old() is None, "the sessions of targets no configuration has are kept"


async def test_the_metrics_of_a_route_and_policy_that_left_are_dropped(tmp_path):
    path = tmp_path / "resources.yaml"

    def load(text: str) -> Snapshot:
        path.write_text(text)
        return build_snapshot(load_paths([path]))

    both = BASE + OTHER_ROUTE + policy() + limited_policy("other")
    app = GatewayApp(ControlPlane(load(both)), ServeOptions(status_port=1))
    assert app.metrics is not None
    for where in ("/mcp", "/other"):
        assert (await drive(app, "POST", where)).status == 401
    app.metrics.rejection_counter("default/other")()  # as a refused request would count
    before = app.metrics.render().decode()
    assert 'route="default/other"' in before
    assert 'policy="default/other"' in before
    app.control.install(load(BASE + policy()))
    after = app.metrics.render().decode()
    assert 'route="default/other"' not in after
    assert 'policy="default/other"' not in after
    assert 'route="default/mcp"' in after  # a route still served keeps its counts
