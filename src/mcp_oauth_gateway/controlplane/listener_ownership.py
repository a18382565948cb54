"""A listener is a boundary: each port belongs to one Gateway, and the listeners of that
Gateway on one port have distinct hostnames.

Every replica binds every port of the Gateways it serves, so listeners of two Gateways on one
port would share one socket: the routes one Gateway's `allowedRoutes` admits would be served
beside the other's paths. Instead the oldest Gateway (creationTimestamp, then namespace/name,
as for routes) holds the port; a listener of any other Gateway on it is not served
(`PortUnavailable`). Two listeners of one Gateway with the same port and hostname cannot be
told apart by a request, so neither is served (`HostnameConflict`).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from ..resources.models import Gateway
from .hostnames import ANY_HOST
from .objects import Entry

PORT_UNAVAILABLE = "PortUnavailable"
HOSTNAME_CONFLICT = "HostnameConflict"


@dataclass(frozen=True, slots=True)
class ListenerRefusal:
    """Why one listener is not served (a Gateway API listener condition reason and message)."""

    reason: str
    message: str

    @property
    def conflicted(self) -> bool:
        """The listener conflicts with another of its Gateway (`Conflicted=True`)."""
        return self.reason == HOSTNAME_CONFLICT


@dataclass(frozen=True, slots=True)
class PortClaim:
    """The ports a Gateway's listeners name, and how old the Gateway is."""

    gateway: str  # namespace/name
    created: str  # metadata.creationTimestamp ("" from files)
    ports: tuple[int, ...]


def claim_of(entry: Entry[Gateway]) -> PortClaim:
    """A Gateway's claim on the ports of its listeners."""
    ports = tuple(listener.port for listener in entry.resource.spec.listeners)
    return PortClaim(entry.key, entry.resource.metadata.creation_timestamp or "", ports)


def port_holders(
    gateways: Mapping[str, Entry[Gateway]], others: Iterable[PortClaim] = ()
) -> dict[int, str]:
    """Port → the Gateway (`namespace/name`) that holds it: the oldest claiming it, then the
    first by namespace/name. `others`: claims of Gateways that serve nothing but still hold
    their ports (one the models refuse)."""
    claims = [*(claim_of(entry) for entry in gateways.values()), *others]
    holders: dict[int, str] = {}
    for claim in sorted(claims, key=lambda c: (c.created, c.gateway)):
        for port in claim.ports:
            holders.setdefault(port, claim.gateway)
    return dict(sorted(holders.items()))


def _taken(port: int, holder: str) -> ListenerRefusal:
    return ListenerRefusal(
        PORT_UNAVAILABLE,
        f"port {port} belongs to Gateway {holder} (the oldest Gateway with a listener on a port "
        "holds it, then the first by namespace/name): use another port, or attach the routes "
        f"to Gateway {holder} where its listeners allow them",
    )


def _conflicts(entry: Entry[Gateway], holders: Mapping[int, str]) -> dict[str, ListenerRefusal]:
    """The listeners of one Gateway sharing a held port and hostname with another of its own."""
    names: dict[tuple[int, str], list[str]] = {}
    for listener in entry.resource.spec.listeners:
        if holders[listener.port] == entry.key:
            host = (listener.hostname or ANY_HOST).lower()
            names.setdefault((listener.port, host), []).append(listener.name)
    out = {}
    for (port, host), same in names.items():
        if len(same) < 2:
            continue
        shown = f"hostname {host}" if host else "no hostname"
        for name in same:
            others = ", ".join(repr(n) for n in same if n != name)
            out[name] = ListenerRefusal(
                HOSTNAME_CONFLICT,
                f"listener {others} has the same port {port} and {shown}: a request cannot "
                "tell them apart, so neither is served; give each its own hostname or port",
            )
    return out


def refused_listeners(
    gateways: Mapping[str, Entry[Gateway]], others: Iterable[PortClaim] = ()
) -> dict[str, dict[str, ListenerRefusal]]:
    """Gateway `namespace/name` → listener name → why it is not served (only those that are
    not); `others` as for `port_holders`."""
    holders = port_holders(gateways, others)
    out: dict[str, dict[str, ListenerRefusal]] = {}
    for key, entry in gateways.items():
        refused = {
            listener.name: _taken(listener.port, holders[listener.port])
            for listener in entry.resource.spec.listeners
            if holders[listener.port] != key
        }
        refused.update(_conflicts(entry, holders))
        if refused:
            out[key] = refused
    return out


def served_ports(
    gateways: Mapping[str, Entry[Gateway]], refused: Mapping[str, Mapping[str, ListenerRefusal]]
) -> dict[int, tuple[str, ...]]:
    """Port → the hostnames of the listeners served on it (ANY_HOST for one without), sorted;
    a port none of whose listeners is served is not listed (not bound at all)."""
    ports: dict[int, set[str]] = {}
    for key, entry in gateways.items():
        for listener in entry.resource.spec.listeners:
            if listener.name not in refused.get(key, {}):
                host = (listener.hostname or ANY_HOST).lower()
                ports.setdefault(listener.port, set()).add(host)
    return {port: tuple(sorted(hosts)) for port, hosts in sorted(ports.items())}
