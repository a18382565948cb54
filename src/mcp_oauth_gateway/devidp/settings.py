"""Settings of the dev identity provider (flags and environment)."""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..provider_kinds import ProviderKind

ADMIN_PASSWORD_ENV = "DEV_IDP_ADMIN_PASSWORD"
BOOTSTRAP_TOKEN_ENV = "DEV_IDP_BOOTSTRAP_TOKEN"
USER_PASSWORD_ENV = "DEV_IDP_USER_PASSWORD"


@dataclass
class DevIdpSettings:
    kind: ProviderKind
    host: str = "127.0.0.1"
    port: int = 0
    state: Path | None = None
    # Keycloak: the master realm's admin (weak defaults: local development only).
    admin_username: str = "admin"
    admin_password: str = field(default_factory=lambda: os.environ.get(ADMIN_PASSWORD_ENV, "admin"))
    # authentik: the bootstrap API token and users that exist before provisioning.
    bootstrap_token: str = field(
        default_factory=lambda: os.environ.get(BOOTSTRAP_TOKEN_ENV, "dev-bootstrap-token")
    )
    seed_users: list[str] = field(default_factory=list)
    seed_password: str = field(
        default_factory=lambda: os.environ.get(USER_PASSWORD_ENV, "dev-password")
    )
    # Keycloak's master realm issues 60 s tokens; authentik providers default to 1 h.
    access_token_ttl: int = 60
    # authentik start-up: 503 while "migrations" run, then empty lookups until the "worker" has
    # applied its blueprints (flows, scope mappings).
    migrations_seconds: float = 0.0
    worker_seconds: float = 0.0
