"""Kubernetes mode: which Gateways are this controller's, which cross-namespace references a
ReferenceGrant permits, and how a Service reference becomes an address in the cluster."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..controller_name import CONTROLLER_NAME
from ..resources.models import Gateway, GatewayClass, ReferenceGrant, Service
from .cluster_secrets import ClusterSecrets
from .egress import EgressRules
from .objects import Entry


@dataclass(frozen=True, slots=True)
class Cluster:
    """The objects come from a Kubernetes API server, not from files."""

    controller_name: str = CONTROLLER_NAME
    cluster_domain: str = "cluster.local"
    # The Service objects given are all the cluster has (so a missing one is missing); False
    # when the server does not serve Services or the controller may not read them.
    services_listed: bool = False
    # Which hosts tenants may name themselves, and where the gateway never connects.
    egress: EgressRules = field(default_factory=EgressRules)
    # Where policies' secrets may come from (controlplane/secret_sources.py): files only under
    # `--secret-files-dir`/<namespace>/ (None: none), and the Secrets the controller read.
    secret_files_dir: str | None = None
    secrets: ClusterSecrets = field(default_factory=ClusterSecrets)


def our_classes(classes: Mapping[str, Entry[GatewayClass]], cluster: Cluster) -> frozenset[str]:
    """The names of the GatewayClasses this controller implements."""
    return frozenset(
        name
        for name, entry in classes.items()
        if entry.resource.spec.controller_name == cluster.controller_name
    )


def our_gateways(
    gateways: Mapping[str, Entry[Gateway]],
    classes: Mapping[str, Entry[GatewayClass]],
    cluster: Cluster | None,
) -> dict[str, Entry[Gateway]]:
    """The Gateways to serve: all of them from files; in a cluster, those of our classes."""
    if cluster is None:
        return dict(gateways)
    ours = our_classes(classes, cluster)
    return {
        key: entry
        for key, entry in gateways.items()
        if entry.resource.spec.gateway_class_name in ours
    }


@dataclass(frozen=True, slots=True)
class Reference:
    """A reference from an object (group, kind, namespace) to a named object elsewhere."""

    group: str
    kind: str
    namespace: str
    to_group: str
    to_kind: str
    to_namespace: str
    to_name: str

    def refusal(self, grants: Mapping[str, Entry[ReferenceGrant]]) -> str | None:
        """Why the reference is not permitted (Gateway API ReferenceGrant), or None."""
        if self.to_namespace == self.namespace:
            return None
        for entry in grants.values():
            if entry.resource.metadata.namespace == self.to_namespace and entry.resource.permits(
                self.group, self.kind, self.namespace, self.to_group, self.to_kind, self.to_name
            ):
                return None
        return (
            f"{self.to_kind} {self.to_namespace}/{self.to_name} is in another namespace: it needs "
            f"a ReferenceGrant in namespace {self.to_namespace} from {self.kind} "
            f"({self.group or 'core'}) in namespace {self.namespace} to {self.to_kind} "
            f"{self.to_name}"
        )


def service_host(name: str, namespace: str, cluster: Cluster) -> str:
    """A Service's in-cluster DNS name (no need to read the Service to reach it)."""
    return f"{name}.{namespace}.svc.{cluster.cluster_domain}"


def missing_service(
    services: Mapping[str, Service], key: str, port: int, cluster: Cluster
) -> str | None:
    """Why a referenced Service or port does not exist, when the cluster's Services are known."""
    if not cluster.services_listed:
        return None
    service = services.get(key)
    if service is None:
        return f"Service {key} not found"
    ports = [p.port for p in service.spec.ports]
    if ports and port not in ports:
        return f"Service {key} has no port {port} (ports: {ports})"
    return None
