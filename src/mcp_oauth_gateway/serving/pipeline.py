"""Assemble every route rule's pipeline from the snapshot, once per configuration. The stages
and their order are declared in `stages.PIPELINE`; this module only builds and indexes them.

A reload builds again only the pipelines whose inputs changed: a rule's pipeline is kept while
everything it was built from is the same (`pipeline_inputs`: the compiled rule, the other
protected resources on its hosts, and the keyset holders and discovery caches its stages hold,
each by identity). Anything else a stage reads is the process's and the same for every build.
The new tables are one assignment (in `app.py`): requests in flight keep the old ones.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..asgi import ASGIApp
from ..controlplane.control import ControlPlane
from ..controlplane.memo import Inputs, Memo
from ..controlplane.snapshot import CompiledRoute, Snapshot
from ..dataplane.routing import RouteEntry, RouteTable, shared_hosts
from .route_context import FailClosed, RouteContext, Shared
from .stages import assemble

__all__ = ["Assembly", "FailClosed", "pipeline_inputs"]


def pipeline_inputs(
    route: CompiledRoute, shared_with: tuple[str, ...], control: ControlPlane
) -> Inputs:
    """Everything a rule's pipeline is built from that can change between builds: the compiled
    rule (its policy, backend, CORS, timeouts), the other protected resources on a host it
    serves, and what its stages hold of the control plane: the keyset holder of each of its
    providers and workload issuers and each provider's discovery cache (None where there is
    none; how many of each is the rule's own). The control plane's session is read at request
    time."""
    policy = route.policy
    if policy is None:
        return (route, shared_with)
    keysets, discoveries = control.keysets, control.discoveries
    providers = policy.providers
    return (
        route,
        shared_with,
        *(keysets.get(p.keyset.url) for p in providers),
        *(keysets.get(w.provider.keyset.url) for w in policy.workload_issuers),
        *(discoveries.get(p.discovery_url) for p in providers),
    )


@dataclass(frozen=True)
class Assembly(Shared):
    """Builds route pipelines from what every route shares, keeping those of the last tables
    whose inputs are the same."""

    kept: Memo[tuple[str, int], ASGIApp] = field(default_factory=Memo, compare=False)

    def route_app(self, route: CompiledRoute, shared_with: tuple[str, ...] = ()) -> ASGIApp:
        """The stages for one route rule. `shared_with`: the other protected resources on a host
        the route serves (then it does not answer the root forms)."""
        return assemble(RouteContext(route, self, shared_with))

    def tables(self, snapshot: Snapshot) -> dict[int, RouteTable]:
        """A route table per listener port; pipelines are shared by the routes' matches."""
        try:
            tables = self._tables(snapshot)
        except BaseException:
            self.kept.end(keep=False)
            raise
        self.kept.end(keep=True)
        return tables

    def _tables(self, snapshot: Snapshot) -> dict[int, RouteTable]:
        built: dict[tuple[str, int], ASGIApp] = {}
        tables = {}
        shared = shared_hosts(snapshot.listeners)
        for port, routes in snapshot.listeners.items():
            entries = []
            for route in routes:
                key = (route.route, route.rule)
                if key not in built:
                    inputs = pipeline_inputs(route, shared.get(key, ()), self.control)
                    built[key] = self.kept.get(key, inputs, self._app)
                entries.append(RouteEntry(route, built[key]))
            tables[port] = RouteTable(entries, snapshot.hosts_of(port))
        return tables

    def _app(self, route: CompiledRoute, shared_with: tuple[str, ...], *_: object) -> ASGIApp:
        return self.route_app(route, shared_with)
