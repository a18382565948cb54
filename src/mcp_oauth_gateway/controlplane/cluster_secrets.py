"""The Secrets the controller has read for the policies, as the builder is given them."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType

# Shown where the gateway's install names the ClusterRole a namespace binds to let the
# controller read its Secrets (deploy/rbac.yaml; the chart's `secretNamespaces`).
SECRET_READER_ROLE = "mcp-oauth-gateway-secret-reader"


@dataclass(frozen=True, slots=True)
class ClusterSecrets:
    """Only the Secrets some policy may use (its own namespace's, or granted), by namespace:
    those read (`data`, each Secret's keys and decoded values), the namespaces whose Secrets
    were listed, and those the controller may not read, with what to do about it."""

    data: Mapping[tuple[str, str], Mapping[str, bytes]] = field(
        default_factory=lambda: MappingProxyType({}), repr=False
    )
    listed: frozenset[str] = frozenset()
    unreadable: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))
