"""Where an issuer's keys are read from, compiled from its `jwks` (a provider's or a workload
issuer's): a URL, a Service's address and path, the JWKS given inline (parsed now), or the
service-account issuer of the cluster the gateway watches."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urlsplit

import orjson

from ..resources.models import (
    POLICY_API_GROUP,
    Jwks,
    RemoteJwks,
    ServiceBackendRef,
    WorkloadJwks,
    parse_duration,
)
from .jwks import CLUSTER_JWKS_URL
from .keys import parse_jwks
from .service_refs import Referrer, ServiceRefs, resolve_service
from .snapshot import KeysetSource


@dataclass(frozen=True, slots=True)
class KeysetPlace:
    """Where a `jwks` is: the policy's namespace (a Service's default), the name an inline
    keyset is kept under, and the field path messages name."""

    namespace: str
    inline_name: str
    path: str


def compile_keyset(
    jwks: Jwks | WorkloadJwks,
    issuer: str,
    where: KeysetPlace,
    refs: ServiceRefs,
    findings: tuple[list[str], list[str]],
) -> tuple[KeysetSource, str] | None:
    """Where the keys are read, and the base the issuer's discovery document is read from;
    None (with a problem) when that cannot be said."""
    parts = urlsplit(issuer)
    issuer_base = f"{parts.scheme}://{parts.netloc}"
    if jwks.inline is not None:
        try:
            keyset = parse_jwks(orjson.loads(jwks.inline), version=1)
        except (ValueError, orjson.JSONDecodeError) as exc:
            findings[0].append(f"{where.path}.jwks.inline: {exc}")
            return None
        return KeysetSource(url=where.inline_name, refresh=0, inline=keyset), issuer_base
    if isinstance(jwks, WorkloadJwks) and jwks.kubernetes is not None:
        refresh = parse_duration(jwks.kubernetes.cache_duration)
        return KeysetSource(url=CLUSTER_JWKS_URL, refresh=refresh), issuer_base
    assert jwks.remote is not None  # the models guarantee exactly one source
    return _remote_keyset(jwks.remote, issuer_base, where, refs, findings)


def _service_base(
    ref: ServiceBackendRef,
    where: KeysetPlace,
    refs: ServiceRefs,
    findings: tuple[list[str], list[str]],
) -> str | None:
    """`http://host:port` of the Service a JWKS backendRef names, or None (with a problem)."""
    problems, unresolved = findings
    referrer = Referrer(POLICY_API_GROUP, "GatewayPolicy", where.namespace)
    resolved = resolve_service(refs, referrer, ref.name, ref.namespace, ref.port)
    field = f"{where.path}.jwks.remote.backendRef"
    if resolved.unresolved is not None:
        unresolved.append(f"{field}: {resolved.unresolved}")
    if resolved.host is None:
        problems.append(f"{field}: {resolved.problem}")
        return None
    host = f"[{resolved.host}]" if ":" in resolved.host else resolved.host
    return f"http://{host}:{ref.port}"


def _remote_keyset(
    remote: RemoteJwks,
    issuer_base: str,
    where: KeysetPlace,
    refs: ServiceRefs,
    findings: tuple[list[str], list[str]],
) -> tuple[KeysetSource, str] | None:
    """Where a remote keyset is fetched, and the base its discovery document is fetched from."""
    refresh = parse_duration(remote.cache_duration)
    if remote.url is not None:
        return KeysetSource(url=remote.url, refresh=refresh), issuer_base
    assert remote.backend_ref is not None  # the model guarantees exactly one source
    assert remote.jwks_path is not None
    base = _service_base(remote.backend_ref, where, refs, findings)
    if base is None:
        return None
    return KeysetSource(url=base + remote.jwks_path, refresh=refresh), base
