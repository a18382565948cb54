"""The `status` the controller writes for each object, merged into what the object has.

Pure functions. Another controller's entries (route `parents[]`, policy `ancestors[]` naming
another `controllerName`) are kept as they are; a condition keeps its `lastTransitionTime`
unless its `status` changes; an unchanged status is not written at all (None).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

from ..controlplane import status as conditions
from ..controlplane.snapshot import PolicyReport
from .objects import Invalid

Json = dict[str, Any]


def merge_conditions(current: Sequence[Json], wanted: Iterable[Json]) -> list[Json]:
    """`wanted`, each keeping the `lastTransitionTime` of the current condition of its type
    when its `status` is the same (Kubernetes: the time of the last status change)."""
    before = {c.get("type"): c for c in current if isinstance(c, dict)}
    out = []
    for condition in wanted:
        previous = before.get(condition["type"])
        if previous is not None and previous.get("status") == condition["status"]:
            condition = {**condition, "lastTransitionTime": previous.get("lastTransitionTime")}
        out.append(condition)
    return out


def _dicts(conditions_: Iterable[conditions.Condition]) -> list[Json]:
    return [c.as_dict() for c in conditions_]


def _same_ref(a: Mapping[str, Any], b: Mapping[str, Any], keys: Sequence[str]) -> bool:
    return all(a.get(k) == b.get(k) for k in keys)


_PARENT_KEYS = ("group", "kind", "name", "namespace", "sectionName", "port")


def _merged_entries(
    current: Sequence[Json], ours: list[Json], controller: str, ref_field: str
) -> list[Json]:
    """Others' entries as they are, then ours, each keeping its conditions' transition times."""
    others = [e for e in current if isinstance(e, dict) and e.get("controllerName") != controller]
    previous = [e for e in current if isinstance(e, dict) and e.get("controllerName") == controller]
    merged = []
    for entry in ours:
        match = next(
            (
                p
                for p in previous
                if _same_ref(p.get(ref_field) or {}, entry[ref_field], _PARENT_KEYS)
            ),
            None,
        )
        old = match.get("conditions", []) if match else []
        merged.append({**entry, "conditions": merge_conditions(old, entry["conditions"])})
    return others + merged


def route_status(current: Json, parents: list[Json], controller: str) -> Json:
    """HTTPRoute `status.parents[]`: ours replaced, others' kept."""
    entries = [{**p, "controllerName": controller} for p in parents]
    return {
        **current,
        "parents": _merged_entries(current.get("parents") or [], entries, controller, "parentRef"),
    }


def policy_status(
    current: Json,
    report: PolicyReport,
    live: Sequence[conditions.Condition],
    controller: str,
) -> Json:
    """GatewayPolicy: `status.conditions[]` (Accepted, Attached, ResolvedRefs) and one
    `status.ancestors[]` entry per Gateway its routes attach to (GEP-713)."""
    wanted = _dicts(live)
    ancestors = [
        {
            "ancestorRef": {
                "group": "gateway.networking.k8s.io",
                "kind": "Gateway",
                "namespace": gateway.split("/", 1)[0],
                "name": gateway.split("/", 1)[1],
            },
            "controllerName": controller,
            "conditions": wanted,
        }
        for gateway in report.ancestors
    ]
    return {
        **current,
        "conditions": merge_conditions(current.get("conditions") or [], wanted),
        "ancestors": _merged_entries(
            current.get("ancestors") or [], ancestors, controller, "ancestorRef"
        ),
    }


def conditions_status(current: Json, wanted: Sequence[conditions.Condition]) -> Json:
    """A kind whose status is its conditions (GatewayClass, GatewayBackend)."""
    return {
        **current,
        "conditions": merge_conditions(current.get("conditions") or [], _dicts(wanted)),
    }


def unbound_listeners(raw: Json, unbound: Mapping[int, str]) -> dict[str, str]:
    """Listener name → why its port could not be bound by this replica."""
    listeners = (raw.get("spec") or {}).get("listeners")
    out = {}
    for listener in listeners if isinstance(listeners, list) else []:
        if isinstance(listener, dict) and listener.get("port") in unbound:
            out[str(listener.get("name"))] = unbound[listener["port"]]
    return out


def _unbound_conditions(
    wanted: Sequence[conditions.Condition], why: str, listener: bool
) -> tuple[conditions.Condition, ...]:
    """A listener's (or its Gateway's) conditions when its port could not be bound: the
    listener not Accepted (PortUnavailable), neither Programmed."""
    out = []
    for condition in wanted:
        if listener and condition.type == "Accepted":
            condition = replace(condition, status=False, reason="PortUnavailable", message=why)
        elif condition.type == "Programmed":
            condition = replace(condition, status=False, reason="Invalid", message=why)
        out.append(condition)
    return tuple(out)


def _accepted(wanted: Sequence[conditions.Condition]) -> bool:
    return any(c.type == "Accepted" and c.status for c in wanted)


def gateway_status(
    current: Json, computed: conditions.ObjectStatus, unbound: Mapping[str, str] | None = None
) -> Json:
    """Gateway: conditions and `listeners[]` (each listener's conditions merged by name);
    `unbound`: listener name → why its port could not be bound (not Programmed)."""
    # A port this replica could not bind says nothing new about a listener that is not served
    # anyway (its own reason, such as another Gateway holding the port, stays).
    served = {lst.name for lst in computed.listeners if _accepted(lst.conditions)}
    unbound = {name: why for name, why in (unbound or {}).items() if name in served}
    before = {
        lst.get("name"): lst for lst in current.get("listeners") or [] if isinstance(lst, dict)
    }
    listeners = []
    for listener in computed.listeners:
        old = (before.get(listener.name) or {}).get("conditions", [])
        if listener.name in unbound:
            listener = replace(
                listener,
                conditions=_unbound_conditions(listener.conditions, unbound[listener.name], True),
            )
        listeners.append(
            {
                **listener.as_dict(),
                "supportedKinds": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute"}],
                "conditions": merge_conditions(old, _dicts(listener.conditions)),
            }
        )
    gateway = computed.conditions
    if unbound:
        why = "; ".join(f"listener {name}: {reason}" for name, reason in sorted(unbound.items()))
        gateway = _unbound_conditions(gateway, why, False)
    return {
        **current,
        "conditions": merge_conditions(current.get("conditions") or [], _dicts(gateway)),
        "listeners": listeners,
    }


def invalid_conditions(invalid: Invalid, at: str) -> list[conditions.Condition]:
    """`Accepted=False reason=Invalid` for an object the API server holds but the gateway
    cannot use (the schema admitted something the gateway does not support)."""
    message = f"{invalid.kind} {invalid.namespace}/{invalid.name} is invalid: " + "; ".join(
        invalid.problems
    )
    return [conditions.Condition("Accepted", False, "Invalid", message, invalid.generation, at)]


def parent_refs(raw: Json) -> list[Json]:
    """An HTTPRoute's `spec.parentRefs` as sent (only the well-formed entries)."""
    refs = (raw.get("spec") or {}).get("parentRefs")
    return [ref for ref in refs if isinstance(ref, dict)] if isinstance(refs, list) else []


def parent_gateway(ref: Json, route_namespace: str) -> str:
    """The `namespace/name` of the Gateway a parentRef names (the route's namespace by default)."""
    return f"{ref.get('namespace') or route_namespace}/{ref.get('name')}"


def changed(current: Json, wanted: Json) -> bool:
    """Whether writing `wanted` would change the object's status."""
    return current != wanted
