"""Write the status of every object back to the API server (the Lease holder only).

`updates` decides, purely, which objects need a new status: the builder's statuses merged into
what each object has, objects the gateway cannot read marked `Accepted=False`, and this
controller's entries removed from routes it no longer serves. The writer then replaces each
status through the status subresource, conditional on the object's `resourceVersion`: an object
that changed meanwhile is skipped and looked at again on the next pass.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..controlplane import status as conditions
from ..controlplane.builder import BuildResult
from ..controlplane.objects import ObjectKey
from ..controlplane.snapshot import PolicyReport
from . import status
from .cache import ObjectCache
from .client import ApiError, KubeClient
from .kinds import BY_KIND, HTTP_ROUTE, Kind
from .objects import Invalid
from .watch import CONNECTION_ERRORS

log = logging.getLogger("mcp_oauth_gateway.kube")

Json = dict[str, Any]
LiveConditions = Callable[[PolicyReport], Sequence[conditions.Condition]]


@dataclass(frozen=True, slots=True)
class StatusUpdate:
    """An object (as last read) and the status it should have."""

    kind: Kind
    raw: Json
    status: Json

    @property
    def label(self) -> str:
        """`Kind namespace/name`, for the log."""
        metadata = self.raw.get("metadata") or {}
        where = f"{metadata['namespace']}/" if metadata.get("namespace") else ""
        return f"{self.kind.kind} {where}{metadata.get('name')}"


@dataclass(frozen=True, slots=True)
class Served:
    """This controller's Gateways (`namespace/name`) and GatewayClasses (names)."""

    gateways: frozenset[str]
    classes: frozenset[str]


def _computed(
    key: ObjectKey,
    computed: conditions.ObjectStatus,
    raw: Json,
    unbound: Mapping[int, str],
    reports: dict[str, PolicyReport],
    live: LiveConditions,
    controller: str,
) -> Json | None:
    current = raw.get("status") or {}
    if key.kind == "GatewayPolicy":
        report = reports[f"{key.namespace}/{key.name}"]
        return status.policy_status(current, report, live(report), controller)
    if key.kind == "Gateway":
        return status.gateway_status(current, computed, status.unbound_listeners(raw, unbound))
    if key.kind == "HTTPRoute":
        parents = [parent.as_dict() for parent in computed.parents]
        return status.route_status(current, parents, controller)
    if key.kind in ("GatewayClass", "GatewayBackend"):
        return status.conditions_status(current, computed.conditions)
    return None  # Services: their status is the cluster's, not the gateway's


def _invalid(
    raw: Json, invalid: Invalid, current: Json, ours: Served, controller: str, at: str
) -> Json | None:
    wanted = status.invalid_conditions(invalid, at)
    if invalid.kind in ("GatewayPolicy", "GatewayBackend"):
        return status.conditions_status(current, wanted)
    if invalid.kind == "Gateway":
        # Only a Gateway of one of our classes is ours to say anything about.
        if (raw.get("spec") or {}).get("gatewayClassName") not in ours.classes:
            return None
        return status.conditions_status(current, [*wanted, replace(wanted[0], type="Programmed")])
    if invalid.kind == "HTTPRoute":
        parents = [
            {"parentRef": ref, "conditions": [c.as_dict() for c in wanted]}
            for ref in status.parent_refs(raw)
            if status.parent_gateway(ref, invalid.namespace) in ours.gateways
        ]
        return status.route_status(current, parents, controller)
    return None


def updates(
    result: BuildResult,
    cache: ObjectCache,
    live: LiveConditions,
    controller: str,
    at: str,
    unbound: Mapping[int, str] | None = None,
) -> list[StatusUpdate]:
    """Every object whose status differs from what it should be, with that status."""
    reports = {report.key: report for report in result.snapshot.policies}
    ours = Served(
        frozenset(f"{k.namespace}/{k.name}" for k in result.statuses if k.kind == "Gateway"),
        frozenset(k.name for k in result.statuses if k.kind == "GatewayClass"),
    )
    out: list[StatusUpdate] = []

    def consider(kind: Kind, raw: Json, wanted: Json | None) -> None:
        if wanted is not None and status.changed(raw.get("status") or {}, wanted):
            out.append(StatusUpdate(kind, raw, wanted))

    for key, computed in result.statuses.items():
        kind = BY_KIND[key.kind]
        raw = cache.raw(kind, key.namespace, key.name)
        if raw is not None and kind.writes_status:
            wanted = _computed(key, computed, raw, unbound or {}, reports, live, controller)
            consider(kind, raw, wanted)
    for raw, invalid in cache.invalid():
        kind = BY_KIND[invalid.kind]
        current = raw.get("status") or {}
        consider(kind, raw, _invalid(raw, invalid, current, ours, controller, at))
    routes = {(k.namespace, k.name) for k in result.statuses if k.kind == "HTTPRoute"}
    unreadable = {(i.namespace, i.name) for _, i in cache.invalid() if i.kind == "HTTPRoute"}
    for raw in cache.all_raw(HTTP_ROUTE):
        metadata = raw.get("metadata") or {}
        name = (str(metadata.get("namespace") or ""), str(metadata.get("name")))
        if name not in routes and name not in unreadable:
            # No longer a route of this controller's Gateways: take its entries out.
            consider(HTTP_ROUTE, raw, status.route_status(raw.get("status") or {}, [], controller))
    return out


class StatusWriter:
    """Writes status updates; keeps count for the admin status page."""

    def __init__(self, client: KubeClient):
        self.client = client
        self.written = 0
        self.conflicts = 0
        self.failed: dict[str, str] = {}

    async def write(self, pending: list[StatusUpdate], still_leader: Callable[[], bool]) -> int:
        """Write each update while this replica holds the Lease; the number written."""
        done = 0
        for update in pending:
            if not still_leader():
                break
            body = {**update.raw, "status": update.status}
            try:
                await self.client.replace_status(update.kind, body)
            except ApiError as exc:
                if exc.status in (404, 409):
                    # Deleted or changed meanwhile: the watch brings the new state.
                    self.conflicts += 1
                    continue
                self._failed(update, str(exc))
                continue
            except CONNECTION_ERRORS as exc:
                self._failed(update, f"API server unreachable: {exc}")
                return done
            self.failed.pop(update.label, None)
            done += 1
        self.written += done
        return done

    def _failed(self, update: StatusUpdate, message: str) -> None:
        if self.failed.get(update.label) != message:
            log.error("status of %s not written: %s", update.label, message)
        self.failed[update.label] = message
