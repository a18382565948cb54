"""Which Gateways and listeners are served, and why the others are not.

From files every Gateway is served. In a cluster, only the Gateways of this controller's
GatewayClasses, and of those only the ones their class accepts (a class whose parametersRef
cannot be followed accepts none; one whose parameters name namespaces accepts those). Among
the Gateways served, each port belongs to one of them and its listeners have distinct hostnames
(listener_ownership).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from types import MappingProxyType

from .class_parameters import ClassRule, class_rule
from .cluster import Cluster, our_classes, our_gateways
from .listener_ownership import ListenerRefusal, PortClaim, refused_listeners, served_ports
from .objects import ObjectIndex

# Gateway `Accepted=False` reasons of ours (Gateway API lets implementations add reasons).
NAMESPACE_NOT_ALLOWED = "NamespaceNotAllowed"
CLASS_NOT_ACCEPTED = "GatewayClassNotAccepted"


@dataclass(frozen=True, slots=True)
class GatewayRefusal:
    """Why a Gateway of one of our classes is not served at all."""

    reason: str
    message: str


@dataclass(frozen=True, slots=True)
class Admission:
    """The verdicts on our classes, Gateways and listeners."""

    # Our GatewayClasses by name, with what each allows (or why it is not accepted).
    classes: Mapping[str, ClassRule] = field(default_factory=lambda: MappingProxyType({}))
    # Gateways of our classes that are not served.
    gateways: Mapping[str, GatewayRefusal] = field(default_factory=lambda: MappingProxyType({}))
    # Listeners of served Gateways that are not served: Gateway → listener name → why.
    listeners: Mapping[str, Mapping[str, ListenerRefusal]] = field(
        default_factory=lambda: MappingProxyType({})
    )
    # Port → the hostnames of the listeners served on it (hostnames.ANY_HOST for none).
    ports: Mapping[int, tuple[str, ...]] = field(default_factory=lambda: MappingProxyType({}))

    def listener_refusal(self, gateway: str, listener: str) -> ListenerRefusal | None:
        """Why a listener of a served Gateway is not served, or None."""
        return self.listeners.get(gateway, {}).get(listener)


def admit(index: ObjectIndex, cluster: Cluster | None) -> tuple[ObjectIndex, Admission]:
    """The index narrowed to what is ours (in a cluster: our classes and their Gateways, served
    or not, since both get a status), and the verdicts on them."""
    refused: dict[str, GatewayRefusal] = {}
    rules: dict[str, ClassRule] = {}
    unreadable: list[PortClaim] = []
    if cluster is not None:
        ours = our_classes(index.classes, cluster)
        classes = {k: e for k, e in index.classes.items() if k in ours}
        rules = {name: class_rule(entry, index.parameters) for name, entry in classes.items()}
        gateways = our_gateways(index.gateways, classes, cluster)
        for key, entry in gateways.items():
            class_name = entry.resource.spec.gateway_class_name or ""
            rule = rules[class_name]
            why = rule.refusal(class_name, entry.resource.metadata.namespace)
            if why is not None:
                reason = CLASS_NOT_ACCEPTED if rule.invalid else NAMESPACE_NOT_ALLOWED
                refused[key] = GatewayRefusal(reason, why)
        index = replace(index, classes=classes, gateways=gateways)
        unreadable = held_by_unreadable(index, rules)
    served = {k: e for k, e in index.gateways.items() if k not in refused}
    listeners = refused_listeners(served, unreadable)
    admission = Admission(
        MappingProxyType(rules),
        MappingProxyType(refused),
        MappingProxyType(listeners),
        MappingProxyType(served_ports(served, listeners)),
    )
    return index, admission


def held_by_unreadable(index: ObjectIndex, rules: Mapping[str, ClassRule]) -> list[PortClaim]:
    """The ports our Gateways that the models refuse still hold (their class would serve them):
    a typo in the Gateway holding a port must not hand the port to the next Gateway."""
    return [
        PortClaim(gateway.key, gateway.created, gateway.ports)
        for gateway in index.refused_gateways.values()
        if gateway.class_name in rules
        and rules[gateway.class_name].refusal(gateway.class_name, gateway.namespace) is None
    ]


def admission_errors(index: ObjectIndex, admission: Admission) -> list[str]:
    """One load error per Gateway and listener that is not served, naming it and why."""
    errors = [
        f"{index.gateways[key].prefix}: not served: {why.message}"
        for key, why in admission.gateways.items()
    ]
    for key, refused in admission.listeners.items():
        entry = index.gateways[key]
        for position, listener in enumerate(entry.resource.spec.listeners):
            why = refused.get(listener.name)
            if why is not None:
                errors.append(
                    f"{entry.prefix}: spec.listeners[{position}] ({listener.name!r}) is not "
                    f"served: {why.message}"
                )
    return errors
