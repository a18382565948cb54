"""Objects as the API server returns them, made into the resource models files give.

The server adds what files do not have (`metadata.uid`, `resourceVersion`, `managedFields`,
`creationTimestamp`, `status`, defaults such as `weight: 1`): metadata is reduced to what the
models read, `status` is dropped, and defaults the models know are kept. An object the models
refuse is not served; its problems become its status."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from ..controlplane.objects import RefusedGateway, RefusedPolicy
from ..resources.loader import validation_problems
from ..resources.models import GATEWAY_API_GROUP, KINDS, Resource

_METADATA = ("name", "namespace", "generation", "labels", "annotations", "creationTimestamp")


@dataclass(frozen=True, slots=True)
class Invalid:
    """An object the gateway cannot use, and why (field path: problem)."""

    kind: str
    namespace: str
    name: str
    generation: int
    problems: tuple[str, ...]


def identity(raw: dict[str, Any]) -> tuple[str, str, str]:
    """(kind, namespace, name) of a raw object ("" namespace when cluster-scoped)."""
    metadata = raw.get("metadata") or {}
    return str(raw.get("kind")), str(metadata.get("namespace") or ""), str(metadata.get("name"))


def document_of(raw: dict[str, Any]) -> dict[str, Any]:
    """What the models read of a raw API object (all `from_server` reads)."""
    metadata = raw.get("metadata") or {}
    return {
        "apiVersion": raw.get("apiVersion"),
        "kind": identity(raw)[0],
        "metadata": {key: metadata[key] for key in _METADATA if metadata.get(key) is not None},
        "spec": raw.get("spec") or {},
    }


def from_server(raw: dict[str, Any]) -> Resource | Invalid:
    """The resource model of a raw API object, or why it cannot be one."""
    kind, namespace, name = identity(raw)
    generation = (raw.get("metadata") or {}).get("generation")
    document = document_of(raw)
    model = KINDS.get((str(raw.get("apiVersion")), kind))
    if model is None:
        problems: tuple[str, ...] = (f"unsupported apiVersion {raw.get('apiVersion')}",)
        return Invalid(kind, namespace, name, int(generation or 1), problems)
    try:
        return model.model_validate(document)
    except ValidationError as exc:
        return Invalid(kind, namespace, name, int(generation or 1), tuple(validation_problems(exc)))


def refused_policy(raw: dict[str, Any], invalid: Invalid) -> RefusedPolicy | None:
    """The stand-in of a GatewayPolicy the models refuse: the HTTPRoutes its targetRefs name,
    read leniently, so they fail closed rather than lose the policy (None for other kinds)."""
    if invalid.kind != "GatewayPolicy":
        return None
    spec = raw.get("spec")
    refs = spec.get("targetRefs") if isinstance(spec, dict) else None
    targets = tuple(
        ref["name"]
        for ref in (refs if isinstance(refs, list) else [])
        if isinstance(ref, dict)
        and isinstance(ref.get("name"), str)
        and ref.get("kind", "HTTPRoute") == "HTTPRoute"
        and ref.get("group", GATEWAY_API_GROUP) == GATEWAY_API_GROUP
    )
    return RefusedPolicy(invalid.namespace, invalid.name, targets, invalid.problems)


def refused_gateway(raw: dict[str, Any], invalid: Invalid) -> RefusedGateway | None:
    """The stand-in of a Gateway the models refuse: its class, age and the ports its listeners
    name, read leniently, so it keeps holding them (None for other kinds)."""
    if invalid.kind != "Gateway":
        return None
    given = raw.get("spec")
    spec: dict[str, Any] = given if isinstance(given, dict) else {}
    found = spec.get("listeners")
    listeners: list[Any] = found if isinstance(found, list) else []
    ports = sorted(
        {
            item["port"]
            for item in listeners
            if isinstance(item, dict)
            and type(item.get("port")) is int
            and 1 <= item["port"] <= 65535
        }
    )
    created = (raw.get("metadata") or {}).get("creationTimestamp")
    return RefusedGateway(
        invalid.namespace,
        invalid.name,
        str(spec.get("gatewayClassName") or ""),
        created if isinstance(created, str) else "",
        tuple(ports),
    )
