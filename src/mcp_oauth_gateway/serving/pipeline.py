"""Assemble every route rule's pipeline from the snapshot, once per configuration. The stages
and their order are declared in `stages.PIPELINE`; this module only builds and indexes them."""

from __future__ import annotations

from dataclasses import dataclass

from ..asgi import ASGIApp
from ..controlplane.snapshot import CompiledRoute, Snapshot
from ..dataplane.routing import RouteEntry, RouteTable, shared_hosts
from .route_context import FailClosed, RouteContext, Shared
from .stages import assemble

__all__ = ["Assembly", "FailClosed"]


@dataclass(frozen=True)
class Assembly(Shared):
    """Builds route pipelines from what every route shares."""

    def route_app(self, route: CompiledRoute, shared_with: tuple[str, ...] = ()) -> ASGIApp:
        """The stages for one route rule. `shared_with`: the other protected resources on a host
        the route serves (then it does not answer the root forms)."""
        return assemble(RouteContext(route, self, shared_with))

    def tables(self, snapshot: Snapshot) -> dict[int, RouteTable]:
        """A route table per listener port; pipelines are shared by the routes' matches."""
        built: dict[tuple[str, int], ASGIApp] = {}
        tables = {}
        shared = shared_hosts(snapshot.listeners)
        for port, routes in snapshot.listeners.items():
            entries = []
            for route in routes:
                key = (route.route, route.rule)
                if key not in built:
                    built[key] = self.route_app(route, shared.get(key, ()))
                entries.append(RouteEntry(route, built[key]))
            tables[port] = RouteTable(entries, snapshot.hosts_of(port))
        return tables
