"""Where a reference to a Service leads: the host the gateway connects to for a GatewayBackend's
`service` target and for a JWKS `backendRef`, or why it may not.

From files a Service is resolved through its `externalName` (the operator's own files). In a
cluster a reference into another namespace needs a ReferenceGrant there, and the host is the
Service's DNS name, which the controller makes itself; an ExternalName Service (when the
controller may read Services) leads to its `externalName`, a host its namespace's tenant wrote,
so it is held to the operator's allow-list like any other such host: the cluster's DNS would
otherwise take the gateway wherever the name points.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from ..resources.models import GatewayBackend, GatewayPolicy, ReferenceGrant, RemoteJwks, Service
from .cluster import Cluster, Reference, missing_service, service_host
from .objects import Entry
from .snapshot import service_address


@dataclass(frozen=True, slots=True)
class ServiceRefs:
    """What Service references resolve against."""

    services: Mapping[str, Service]
    grants: Mapping[str, Entry[ReferenceGrant]] = field(default_factory=dict)
    cluster: Cluster | None = None


@dataclass(frozen=True, slots=True)
class Referrer:
    """The kind of object that refers to a Service, and its namespace (for ReferenceGrants)."""

    group: str
    kind: str
    namespace: str


@dataclass(frozen=True, slots=True)
class ServiceHost:
    """A Service reference resolved: the host to connect to, or the problem that refuses it;
    `unresolved` when it is used but names a Service or port the cluster does not have."""

    host: str | None
    problem: str | None = None
    unresolved: str | None = None


def resolve_service(
    refs: ServiceRefs, referrer: Referrer, name: str, namespace: str | None, port: int
) -> ServiceHost:
    """The host a reference to Service `namespace/name` (default: the referrer's) leads to."""
    target_namespace = namespace or referrer.namespace
    key = f"{target_namespace}/{name}"
    if refs.cluster is None:
        service = refs.services.get(key)
        if service is None:
            return ServiceHost(
                None,
                f"Service {key} not found (define a Service of type ExternalName named {name})",
            )
        host = service_address(service)
        if host is None:
            return ServiceHost(
                None,
                f"Service {key} has type {service.spec.type}; standalone mode resolves only type "
                f"ExternalName (set spec.externalName to the host)",
            )
        return ServiceHost(host)
    return _in_cluster(refs, refs.cluster, referrer, name, target_namespace, port)


def _in_cluster(
    refs: ServiceRefs, cluster: Cluster, referrer: Referrer, name: str, namespace: str, port: int
) -> ServiceHost:
    reference = Reference(
        referrer.group, referrer.kind, referrer.namespace, "", "Service", namespace, name
    )
    refusal = reference.refusal(refs.grants)
    if refusal is not None:
        # Gateway API: without a grant, say nothing of whether the Service exists.
        return ServiceHost(None, refusal)
    key = f"{namespace}/{name}"
    service = refs.services.get(key)
    external = service.spec.external_name if service is not None else None
    if service is not None and service.spec.type == "ExternalName" and external:
        why = cluster.egress.host_refusal(external, namespace, port)
        if why is not None:
            return ServiceHost(None, f"Service {key} is of type ExternalName: {why}")
        return ServiceHost(external.rstrip("."))
    return ServiceHost(
        service_host(name, namespace, cluster),
        unresolved=missing_service(refs.services, key, port, cluster),
    )


def policy_services(policy: GatewayPolicy) -> tuple[str, ...]:
    """Every Service (`namespace/name`) a policy's keysets name: its providers' and its
    workload issuers'."""
    jwt = policy.spec.traffic.jwt_authentication
    if jwt is None:
        return ()
    remotes: list[RemoteJwks | None] = [p.jwks.remote for p in jwt.providers]
    workload = jwt.mcp.workload_identity if jwt.mcp is not None else None
    if workload is not None:
        remotes += [issuer.jwks.remote for issuer in workload.issuers]
    namespace = policy.metadata.namespace
    return tuple(
        f"{remote.backend_ref.namespace or namespace}/{remote.backend_ref.name}"
        for remote in remotes
        if remote is not None and remote.backend_ref is not None
    )


def backend_services(backend: GatewayBackend) -> tuple[str, ...]:
    """Every Service (`namespace/name`) a backend's targets name."""
    namespace = backend.metadata.namespace
    return tuple(
        f"{target.service.namespace or namespace}/{target.service.name}"
        for target in backend.spec.mcp.targets
        if target.service is not None
    )
