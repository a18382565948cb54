"""How one gateway process serves: everything `serve`'s flags decide, in one frozen object."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..asgi import Limits
from ..controlplane.deployment import Deployment


@dataclass(frozen=True)
class Watch:
    """Resource paths to watch for changes, and how often to look."""

    paths: tuple[str, ...]
    interval: float


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
    # The admin listener (metrics, health, status); None: no admin listener.
    status_port: int | None = None
    # Loopback unless told otherwise (a pod's probes reach it on the pod's address).
    admin_host: str = "127.0.0.1"
    tracing: bool = False
    # The audit trail: a file path, "-" for standard output, None for none (`--audit-log`).
    audit_log: str | None = None
    # Refuse requests (503) while the audit log cannot be written (`--audit-required`).
    audit_required: bool = False
    # What reloads validate against (Broker mode across several workers needs Redis, say).
    deployment: Deployment = field(default_factory=Deployment)
