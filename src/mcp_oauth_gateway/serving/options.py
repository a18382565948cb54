"""How one gateway process serves: everything `serve`'s flags decide, in one frozen object."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..asgi import Limits
from ..controlplane.deployment import Deployment
from ..controlplane.watch import ReloadCaches


@dataclass(frozen=True)
class Watch:
    """Resource paths to watch for changes, how often to look, and what the load that started
    the gateway read and built (the first reload starts from there)."""

    paths: tuple[str, ...]
    interval: float
    caches: ReloadCaches = field(default_factory=ReloadCaches, compare=False)


@dataclass(frozen=True)
class ServeOptions:
    """`serve`'s settings, passed whole from the command line to every part that needs one."""

    host: str = "127.0.0.1"
    # Take the public scheme and host from X-Forwarded-* (only behind a proxy you control).
    trust_forwarded: bool = False
    # Seconds in-flight requests get to finish after SIGTERM.
    grace_period: float = 30.0
    workers: int = 1
    log_level: str = "info"
    log_format: str = "text"
    watch: Watch | None = None
    limits: Limits = field(default_factory=Limits)
    # The admin listener (metrics, status, the configuration, health); None: none.
    status_port: int | None = None
    # Loopback unless told otherwise: /config lists every route and rule of every namespace.
    admin_host: str = "127.0.0.1"
    # The health listener (/healthz and /readyz only, for probes on a pod's address); None: none.
    health_port: int | None = None
    health_host: str = "127.0.0.1"
    tracing: bool = False
    # The audit trail: a file path, "-" for standard output, None for none (`--audit-log`).
    audit_log: str | None = None
    # Refuse requests (503) while the audit log cannot be written (`--audit-required`).
    audit_required: bool = False
    # What reloads validate against (Broker mode across several workers needs Redis, say).
    deployment: Deployment = field(default_factory=Deployment)


def own_ports(options: ServeOptions) -> dict[int, str]:
    """The ports of the gateway's own listeners, each with what holds it: no Gateway listener
    may take one (its requests would be answered by the admin or health listener)."""
    held = {
        options.status_port: "the admin listener's (--admin-port)",
        options.health_port: "the health listener's (--health-port)",
    }
    return {port: why for port, why in held.items() if port is not None}
