"""What `--token-exchange-client` / `--token-exchange-audience` ask of either identity provider,
and where the exchange client's secret goes: a 0600 file beside the resources, never printed."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from .resources import TokenExchangeValues

SECRET_FILE = "token-exchange-client-secret"


@dataclass(frozen=True)
class ExchangeOptions:
    """The exchange client to create, the backend's audience, and the secret file."""

    client: str
    audience: str
    secret_file: Path


@dataclass(frozen=True)
class ExchangeValues:
    """What the generated policy's `credentials.tokenExchange` says."""

    client: str  # the client id the gateway authenticates as
    audience: str
    scope: str
    secret_file: Path


def write_secret(path: Path, secret: str) -> None:
    """Write the client secret readable by its owner only (created 0600, never widened)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w") as handle:
        handle.write(secret + "\n")


def for_policy(values: ExchangeValues | None) -> TokenExchangeValues | None:
    """What the rendered policy names (the secret file by its absolute path)."""
    if values is None:
        return None
    return TokenExchangeValues(
        values.client, values.audience, values.scope, str(values.secret_file.resolve())
    )
