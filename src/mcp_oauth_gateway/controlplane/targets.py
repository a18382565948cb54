"""A GatewayBackend's targets: where each one is reached, decided once per backend.

A `static` host is used as written from files; in a cluster only when the operator lets the
backend's namespace name it (egress rules). A `service` is resolved as every Service reference
is (service_refs). Either may be reached over TLS (backend_tls). One target that may not be
reached refuses the whole backend: its routes answer 503 naming why, rather than serving some
targets of a federated backend and not others.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..resources.models import POLICY_API_GROUP, GatewayBackend, McpTarget, parse_duration
from .backend_tls import TlsConfigError, compile_tls
from .objects import Entry
from .service_refs import Referrer, ServiceRefs, resolve_service
from .snapshot import CompiledTarget, TargetTls


@dataclass(frozen=True, slots=True)
class BackendTargets:
    """A backend's targets in the resource's order, or the problems that refuse it; the
    Services it names that the cluster does not have (it is still served)."""

    targets: tuple[CompiledTarget, ...]
    problems: tuple[str, ...] = ()
    unresolved: tuple[str, ...] = ()

    @property
    def refused(self) -> bool:
        """Some target may not be reached: the backend is not served."""
        return bool(self.problems)


def _address(
    target: McpTarget, index: int, namespace: str, refs: ServiceRefs, found: BackendFindings
) -> tuple[str, int, str] | None:
    path = f"spec.mcp.targets[{index}]"
    if target.static is not None:
        static = target.static
        if refs.cluster is not None:
            why = refs.cluster.egress.host_refusal(static.host, namespace, static.port)
            if why is not None:
                found.problems.append(f"{path}.static.host: {why}")
                return None
        return static.host, static.port, static.path
    assert target.service is not None  # the model guarantees exactly one
    service = target.service
    referrer = Referrer(POLICY_API_GROUP, "GatewayBackend", namespace)
    resolved = resolve_service(refs, referrer, service.name, service.namespace, service.port)
    if resolved.unresolved is not None:
        found.unresolved.append(f"{path}.service: {resolved.unresolved}")
    if resolved.host is None:
        found.problems.append(f"{path}.service: {resolved.problem}")
        return None
    return resolved.host, service.port, service.path


@dataclass(slots=True)
class BackendFindings:
    """What resolving a backend's targets found wrong, by field path."""

    problems: list[str]
    unresolved: list[str]


def _tls(
    target: McpTarget,
    index: int,
    host: str,
    namespace: str,
    refs: ServiceRefs,
    found: BackendFindings,
) -> TargetTls | None:
    """The target's TLS (None: plain HTTP), or None with a problem naming `caFile`."""
    address = target.static or target.service
    assert address is not None  # the model guarantees exactly one
    if address.tls is None:
        return None
    kind = "static" if target.static is not None else "service"
    try:
        return compile_tls(address.tls, host, namespace, refs.cluster)
    except TlsConfigError as exc:
        found.problems.append(f"spec.mcp.targets[{index}].{kind}.tls.caFile: {exc}")
        return None


def compile_targets(entry: Entry[GatewayBackend], refs: ServiceRefs) -> BackendTargets:
    """Resolve every target of one backend."""
    backend = entry.resource
    namespace = backend.metadata.namespace
    found = BackendFindings([], [])
    targets = []
    for index, target in enumerate(backend.spec.mcp.targets):
        address = _address(target, index, namespace, refs, found)
        if address is not None:
            tls = _tls(target, index, address[0], namespace, refs, found)
            timeout = parse_duration(target.timeout) if target.timeout else None
            targets.append(CompiledTarget(*address, target.name, timeout, tls))
    if found.problems:
        return BackendTargets((), tuple(found.problems), tuple(found.unresolved))
    return BackendTargets(tuple(targets), unresolved=tuple(found.unresolved))


def reads_files(backend: GatewayBackend) -> bool:
    """Whether resolving the backend reads a file no object holds (a target's `caFile`, read
    again at each build)."""
    return any(
        address is not None and address.tls is not None and address.tls.ca_file is not None
        for target in backend.spec.mcp.targets
        for address in (target.static, target.service)
    )
