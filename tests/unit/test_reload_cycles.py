"""A reload frees the configuration it replaced by reference counting alone: loading, building
and installing a configuration, and assembling its routes' pipelines, make no reference cycle.

`serve` collects the oldest generation almost never (`server.tune_gc`), so an old pipeline
kept only by a cycle stayed in memory: every reload of a file of 200 routes grew the process by
~1.2 MB (issue 39). Each configuration here turns on other stages (`config_variants_support`)."""

from __future__ import annotations

import gc
import weakref
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest

from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.controlplane.snapshot import Snapshot
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.options import ServeOptions
from mcp_oauth_gateway.serving.route_context import RouteContext

from .config_variants_support import DEPLOYMENT, SECRETS, VARIANTS, process_state_in


def serving(tmp_path: Path, text: str) -> tuple[GatewayApp, Callable[[], Snapshot]]:
    """An app serving `text` (metrics and an audit trail on), and what loads the file again."""
    path = tmp_path / "resources.yaml"
    path.write_text(text)

    def load() -> Snapshot:
        snapshot = build_snapshot(load_paths([path]), DEPLOYMENT)
        assert snapshot.errors == (), snapshot.errors
        return snapshot

    options = ServeOptions(status_port=1, audit_log=str(tmp_path / "audit.log"))
    app = GatewayApp(ControlPlane(load()), options, process_state=process_state_in(tmp_path))
    return app, load


def cyclic_garbage(action: Callable[[], None]) -> Counter[str]:
    """The objects `action` left unreachable in reference cycles, counted by type."""
    gc.collect()
    gc.disable()
    try:
        action()
        gc.set_debug(gc.DEBUG_SAVEALL)
        gc.collect()
        return Counter(f"{type(o).__module__}.{type(o).__qualname__}" for o in gc.garbage)
    finally:
        gc.set_debug(0)
        gc.garbage.clear()
        gc.enable()


@pytest.mark.parametrize("name", sorted(VARIANTS))
def test_a_reload_leaves_no_cyclic_garbage(tmp_path, monkeypatch, name):
    for variable, value in SECRETS.items():
        monkeypatch.setenv(variable, value)
    app, load = serving(tmp_path, VARIANTS[name])
    replaced = [weakref.ref(app.tables[8080]), weakref.ref(app.control.snapshot)]

    def reload_twice() -> None:
        for _ in range(2):
            app.control.install(load())
        # Freed when the last reference went, with the collector off.
        assert [ref() for ref in replaced] == [None, None]

    left = cyclic_garbage(reload_twice)
    assert not left, f"cycles kept the replaced configuration: {left.most_common(12)}"


def test_no_route_context_outlives_its_assembly(tmp_path, monkeypatch):
    """What a stage keeps is what it needs, never the context it was built from: the context
    holds its configuration's route, and what the process keeps for good (the user-OAuth
    runtime) would hold that configuration's route for good."""
    for variable, value in SECRETS.items():
        monkeypatch.setenv(variable, value)
    app, load = serving(tmp_path, VARIANTS["federated"])
    app.control.install(load())
    gc.collect()
    assert not [o for o in gc.get_objects() if isinstance(o, RouteContext)]
