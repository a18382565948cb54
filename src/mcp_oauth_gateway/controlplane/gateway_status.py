"""The status of our GatewayClasses and Gateways (Gateway API shapes), from the admission's
verdicts: a class whose parameters cannot be followed is `Accepted=False InvalidParameters`; a
Gateway its class refuses, or none of whose listeners is served, is `Accepted=False` and
`Programmed=False`; a listener on another Gateway's port `Accepted=False PortUnavailable`, and
one whose port and hostname another listener of its Gateway shares `Conflicted=True
HostnameConflict`."""

from __future__ import annotations

from collections import Counter

from ..resources.models import Gateway, GatewayClass
from . import status
from .admission import Admission
from .class_parameters import ClassRule
from .listener_ownership import ListenerRefusal
from .objects import Entry

Condition = status.Condition
LISTENERS_NOT_VALID = "ListenersNotValid"


def class_status(
    entry: Entry[GatewayClass], rule: ClassRule | None, at: str
) -> status.ObjectStatus:
    """`Accepted`: True, or False reason InvalidParameters naming the field and the fix."""
    generation = entry.generation
    if rule is None or rule.invalid is None:
        return status.ObjectStatus((status.class_accepted(generation, at),))
    refused = Condition("Accepted", False, "InvalidParameters", rule.invalid, generation, at)
    return status.ObjectStatus((refused,))


def _listener(
    name: str, attached: int, refused: ListenerRefusal | None, generation: int, at: str
) -> status.ListenerStatus:
    conditions = status.listener_conditions(generation, at)
    if refused is None:
        return status.ListenerStatus(name, attached, conditions)
    out = [
        Condition("Accepted", False, refused.reason, refused.message, generation, at),
        Condition("Programmed", False, "Invalid", refused.message, generation, at),
        *(c for c in conditions if c.type == "ResolvedRefs"),
    ]
    if refused.conflicted:
        out.append(Condition("Conflicted", True, refused.reason, refused.message, generation, at))
    return status.ListenerStatus(name, attached, tuple(out))


def _not_served(reason: str, message: str, generation: int, at: str) -> tuple[Condition, ...]:
    return (
        Condition("Accepted", False, reason, message, generation, at),
        Condition("Programmed", False, "Invalid", message, generation, at),
    )


def gateway_status(
    entry: Entry[Gateway], attached: Counter[tuple[str, str]], admission: Admission, at: str
) -> status.ObjectStatus:
    """`Accepted`, `Programmed`, and each listener's conditions and attached routes."""
    generation = entry.generation
    refused = admission.gateways.get(entry.key)
    if refused is not None:
        # Not served at all: no listener of it is, and none has anything to report.
        return status.ObjectStatus(_not_served(refused.reason, refused.message, generation, at))
    listeners = entry.resource.spec.listeners
    verdicts = {lst.name: admission.listener_refusal(entry.key, lst.name) for lst in listeners}
    statuses = tuple(
        _listener(lst.name, attached[entry.key, lst.name], verdicts[lst.name], generation, at)
        for lst in listeners
    )
    unserved = [f"listener {name!r}: {why.message}" for name, why in verdicts.items() if why]
    conditions: tuple[Condition, ...]
    if not unserved:
        conditions = (
            status.gateway_accepted(generation, at),
            status.gateway_programmed(generation, at),
        )
    elif len(unserved) == len(listeners):
        message = "no listener is served: " + "; ".join(unserved)
        conditions = _not_served(LISTENERS_NOT_VALID, message, generation, at)
    else:
        # Gateway API: ListenersNotValid with Accepted=True when the others are served.
        message = "some listeners are not served: " + "; ".join(unserved)
        conditions = (
            Condition("Accepted", True, LISTENERS_NOT_VALID, message, generation, at),
            status.gateway_programmed(generation, at),
        )
    return status.ObjectStatus(conditions, listeners=statuses)
