"""The federated routes' targets' health, for the admin listener: under each route rule on
`/status`, and as rows for the metrics (read at scrape time, from the running configuration, so a
rule that left it leaves them too). A rule whose sessions are shared across replicas (Redis)
shows on `/status` what every replica saw, read from Redis first (`refresh_federation`), the
same at each; its metrics stay this replica's own."""

from __future__ import annotations

from ..controlplane.snapshot import CompiledRoute, Snapshot
from ..dataplane.metrics import TargetRow
from ..proxy.federation.health import Health
from ..urls import shown_url
from .process_state import ProcessState


def federated_rules(
    snapshot: Snapshot, process_state: ProcessState
) -> list[tuple[CompiledRoute, Health]]:
    """Each federated route rule once (its path matches and listeners share one state), with
    its targets' health, in route and rule order."""
    found: dict[tuple[str, int], tuple[CompiledRoute, Health]] = {}
    for routes in snapshot.listeners.values():
        for route in routes:
            if route.federated and (route.route, route.rule) not in found:
                found[(route.route, route.rule)] = (
                    route,
                    process_state.federation_of(route).health,
                )
    return [found[key] for key in sorted(found)]


async def refresh_federation(snapshot: Snapshot, process_state: ProcessState) -> None:
    """Read what every replica saw of the targets of the rules shared across replicas."""
    for route, health in federated_rules(snapshot, process_state):
        await health.refresh(target.name for target in route.targets)


def federation_status(
    snapshot: Snapshot, process_state: ProcessState
) -> dict[str, dict[str, object]]:
    """Route → its federated rules → each target: its address (secrets hidden) and health."""
    out: dict[str, dict[str, object]] = {}
    for route, health in federated_rules(snapshot, process_state):
        out.setdefault(route.route, {})[str(route.rule)] = {
            "targets": {
                target.name: {
                    "address": shown_url(target.url),
                    **health.shown(target.name).view(),
                }
                for target in route.targets
            }
        }
    return out


def federation_rows(snapshot: Snapshot, process_state: ProcessState) -> list[TargetRow]:
    """Every federated route rule's targets' health as the metrics export it."""
    rows: list[TargetRow] = []
    for route, health in federated_rules(snapshot, process_state):
        for target in route.targets:
            seen = health.of(target.name)
            rows.append((route.route, route.rule, target.name, seen.up, seen.failures))
    return rows
