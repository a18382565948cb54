"""Policy status conditions (`Accepted`, `Attached`, `ResolvedRefs`) as DESIGN §3 defines them."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from ..resources.models import ParentRef
from ..urls import shown_url


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str
    observed_generation: int
    last_transition_time: str

    def as_dict(self) -> dict[str, object]:
        """The Kubernetes-style representation (status as the strings True/False)."""
        return {
            "type": self.type,
            "status": "True" if self.status else "False",
            "reason": self.reason,
            "message": self.message,
            "observedGeneration": self.observed_generation,
            "lastTransitionTime": self.last_transition_time,
        }


def accepted(problems: list[str], generation: int, at: str) -> Condition:
    """`Accepted=True reason=Valid`, or `False reason=Invalid` naming every problem."""
    if problems:
        return Condition("Accepted", False, "Invalid", "; ".join(problems), generation, at)
    return Condition("Accepted", True, "Valid", "Policy accepted", generation, at)


def attached(
    valid: bool, missing: list[str], conflicts: list[str], generation: int, at: str
) -> Condition:
    """`Attached=True reason=Attached`, or why the policy is not attached."""
    if not valid:
        return Condition(
            "Attached",
            False,
            "Pending",
            "Policy is not attached due to invalid status",
            generation,
            at,
        )
    if missing:
        return Condition(
            "Attached",
            False,
            "TargetNotFound",
            "Policy is not attached: " + "; ".join(missing),
            generation,
            at,
        )
    if conflicts:
        return Condition(
            "Attached",
            False,
            "Conflicted",
            "Policy is not attached: " + "; ".join(conflicts),
            generation,
            at,
        )
    return Condition("Attached", True, "Attached", "Attached to all targets", generation, at)


def resolved_refs(
    unavailable: list[str], generation: int, at: str, stale: list[str] | None = None
) -> Condition:
    """`ResolvedRefs=True`; `False reason=KeysetUnavailable` naming the URLs and errors; or,
    while refreshes fail but earlier keys still verify tokens, `True reason=KeysetStale`."""
    if unavailable:
        return Condition(
            "ResolvedRefs", False, "KeysetUnavailable", "; ".join(unavailable), generation, at
        )
    if stale:
        return Condition("ResolvedRefs", True, "KeysetStale", "; ".join(stale), generation, at)
    return Condition("ResolvedRefs", True, "ResolvedRefs", "Keyset fetched", generation, at)


def stale_message(
    url: str,
    error: str,
    failing_since: float,
    keys_fetched_at: float | None,
    next_attempt_at: float | None,
    now: float,
) -> str:
    """What an operator needs about a keyset whose refresh fails: since when, why, which keys
    are still in use, and when the next try is."""
    fetched = (
        f"the keys fetched at {iso(keys_fetched_at)}"
        if keys_fetched_at
        else "the last keys fetched"
    )
    upcoming = (
        ""
        if next_attempt_at is None
        else f"; next try at {iso(next_attempt_at)} (in {max(0.0, next_attempt_at - now):.0f}s)"
    )
    return (
        f"keyset {shown_url(url)} is stale: refreshing it fails since {iso(failing_since)} "
        f"({error}); still verifying tokens with {fetched}{upcoming}"
    )


def iso(seconds: float) -> str:
    """A wall-clock time as RFC 3339 UTC, to the second."""
    return datetime.fromtimestamp(seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- Gateway API status of the other kinds ---------------------------------------------------
# Only what the builder decides from the objects alone: `Programmed` (ports bound) and anything
# read from the cluster are left to whoever serves or writes status.

CONTROLLER_NAME = "mcp-oauth-gateway.dev/gateway-controller"


@dataclass(frozen=True, slots=True)
class ParentStatus:
    """One `status.parents[]` entry of an HTTPRoute: a parentRef and its conditions."""

    parent_ref: ParentRef
    conditions: tuple[Condition, ...]
    controller_name: str = CONTROLLER_NAME

    def as_dict(self) -> dict[str, object]:
        """The Gateway API representation."""
        return {
            "parentRef": self.parent_ref.model_dump(by_alias=True, exclude_none=True),
            "controllerName": self.controller_name,
            "conditions": [c.as_dict() for c in self.conditions],
        }


@dataclass(frozen=True, slots=True)
class ListenerStatus:
    """One `status.listeners[]` entry of a Gateway."""

    name: str
    attached_routes: int
    conditions: tuple[Condition, ...]

    def as_dict(self) -> dict[str, object]:
        """The Gateway API representation."""
        return {
            "name": self.name,
            "attachedRoutes": self.attached_routes,
            "conditions": [c.as_dict() for c in self.conditions],
        }


@dataclass(frozen=True, slots=True)
class ObjectStatus:
    """The status of one object: its conditions, and a route's parents or a Gateway's listeners."""

    conditions: tuple[Condition, ...] = ()
    parents: tuple[ParentStatus, ...] = ()
    listeners: tuple[ListenerStatus, ...] = ()

    def as_dict(self) -> dict[str, object]:
        """The Kubernetes `status` representation (fields the kind does not have left out)."""
        out: dict[str, object] = {}
        if self.conditions:
            out["conditions"] = [c.as_dict() for c in self.conditions]
        if self.parents:
            out["parents"] = [p.as_dict() for p in self.parents]
        if self.listeners:
            out["listeners"] = [listener.as_dict() for listener in self.listeners]
        return out


def gateway_accepted(generation: int, at: str) -> Condition:
    """`Accepted=True`: every Gateway given to the builder is served."""
    return Condition("Accepted", True, "Accepted", "Gateway accepted", generation, at)


def gateway_programmed(generation: int, at: str) -> Condition:
    """`Programmed=True`: its listeners are in the gateway's route tables."""
    return Condition("Programmed", True, "Programmed", "Gateway programmed", generation, at)


def listener_accepted(generation: int, at: str) -> Condition:
    """`Accepted=True` for a listener (the schema admits only HTTP listeners we serve)."""
    return Condition("Accepted", True, "Accepted", "Listener accepted", generation, at)


def listener_conditions(generation: int, at: str) -> tuple[Condition, ...]:
    """A served listener's `Accepted`, `Programmed` and `ResolvedRefs` (all True)."""
    return (
        listener_accepted(generation, at),
        Condition("Programmed", True, "Programmed", "Listener programmed", generation, at),
        Condition("ResolvedRefs", True, "ResolvedRefs", "References resolved", generation, at),
    )


def class_accepted(generation: int, at: str) -> Condition:
    """`Accepted=True` for a GatewayClass this controller implements."""
    return Condition(
        "Accepted", True, "Accepted", f"Implemented by {CONTROLLER_NAME}", generation, at
    )


def route_accepted(
    refusal: str | None,
    gateway: str,
    generation: int,
    at: str,
    shadowed: tuple[str, ...] = (),
    reason: str = "NoMatchingParent",
) -> Condition:
    """A route parent's `Accepted`: True (naming any match another route shadows), or False
    with `reason` (NoMatchingParent, NotAllowedByListeners, NoMatchingListenerHostname) saying
    why."""
    if refusal is not None:
        return Condition("Accepted", False, reason, refusal, generation, at)
    message = f"Accepted by Gateway {gateway}"
    if shadowed:
        message += "; " + "; ".join(shadowed)
    return Condition("Accepted", True, "Accepted", message, generation, at)


def route_resolved_refs(
    missing: list[str], generation: int, at: str, not_permitted: bool = False
) -> Condition:
    """A route's `ResolvedRefs`: True, or False naming each ref (`RefNotPermitted` when a
    reference to another namespace has no ReferenceGrant, else `BackendNotFound`)."""
    if missing:
        reason = "RefNotPermitted" if not_permitted else "BackendNotFound"
        return Condition("ResolvedRefs", False, reason, "; ".join(missing), generation, at)
    return Condition(
        "ResolvedRefs", True, "ResolvedRefs", "All references resolved", generation, at
    )


def backend_accepted(target: str, generation: int, at: str) -> Condition:
    """`Accepted=True` for a GatewayBackend, naming the target it sends to."""
    return Condition("Accepted", True, "Accepted", f"Target {target}", generation, at)


def backend_refused(problems: list[str], generation: int, at: str) -> Condition:
    """`Accepted=False` for a GatewayBackend a target of which may not be reached: its routes
    answer 503."""
    message = "Not served: " + ("; ".join(problems) or "its targets could not be resolved")
    return Condition("Accepted", False, "RefNotPermitted", message, generation, at)


def backend_resolved_refs(missing: list[str], generation: int, at: str) -> Condition:
    """A GatewayBackend's `ResolvedRefs`: whether the Services it names exist (when the
    controller may read Services)."""
    if missing:
        return Condition(
            "ResolvedRefs", False, "BackendNotFound", "; ".join(missing), generation, at
        )
    return Condition(
        "ResolvedRefs", True, "ResolvedRefs", "All references resolved", generation, at
    )


def service_accepted(service_type: str, address: str | None, generation: int, at: str) -> Condition:
    """A Service's `Accepted`: True when standalone mode can resolve it (ExternalName)."""
    if address is None:
        return Condition(
            "Accepted",
            False,
            "UnsupportedValue",
            f"type {service_type}: standalone mode resolves only type ExternalName "
            f"(set spec.externalName to the provider's host)",
            generation,
            at,
        )
    return Condition("Accepted", True, "Accepted", f"Resolves to {address}", generation, at)
