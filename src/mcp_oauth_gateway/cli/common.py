"""What the commands share: exit codes, environment names, loading and printing problems."""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, TextIO

from ..authorization_server_modes import FACADE_CLIENTS

if TYPE_CHECKING:
    from ..controlplane import Deployment, Snapshot

EXIT_INVALID = 2
TRUST_ENV = "MCP_OAUTH_GATEWAY_TRUST_FORWARDED"
LOCAL_CIMD_ENV = "MCP_OAUTH_GATEWAY_ALLOW_LOCAL_CLIENT_METADATA"
REDIS_ENV = "MCP_OAUTH_GATEWAY_REDIS_URL"
FACADE_HINT = (
    f"Facade mode serves only {FACADE_CLIENTS}; set mcp.authorizationServerMode: Broker to "
    "serve them all"
)


def env_flag(name: str) -> bool:
    return os.environ.get(name, "").strip().lower() in ("1", "true", "yes", "on")


def load(files: Sequence[str], deployment: Deployment | None = None) -> Snapshot:
    """The snapshot `files` make. The control plane is imported here, not with this module:
    `dev-idp`, `idp` and `grants` share it and need none of it (half a second of each start)."""
    from ..controlplane import build_snapshot
    from ..controlplane.collector import collector_paused
    from ..resources import load_paths

    with collector_paused():
        return build_snapshot(load_paths(files), deployment)


def print_problems(snapshot: Snapshot, stream: TextIO | None = None) -> None:
    """Each problem of `snapshot` as an `error:` line, on `stream` (sys.stderr as it is now)."""
    stream = stream if stream is not None else sys.stderr
    for error in snapshot.errors:
        print(f"error: {error}", file=stream)
    for report in snapshot.policies:
        for condition in report.conditions:
            if not condition.status:
                print(
                    f"error: {report.source}: GatewayPolicy {report.key}: {condition.type}="
                    f"False ({condition.reason}): {condition.message}",
                    file=stream,
                )


class Refused(Exception):
    """`serve` cannot start; the message is the one line to print."""
