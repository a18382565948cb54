"""Compile what a backend receives in place of the caller's token (`spec.backend.credentials`):
secrets are read here, at load, from files or the environment, and checked, so the request path
only copies bytes. A secret that cannot be read makes the policy invalid (its routes answer 503):
never a request sent without the credential the backend expects."""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path

from ..resources.models import (
    BackendCredentialsSpec,
    SecretHeader,
    SecretSource,
    TargetCredentials,
)
from .snapshot import (
    CompiledCredentials,
    CompiledIdentity,
    CompiledSecretHeader,
    CompiledTokenExchange,
)

PATH = "spec.backend.credentials"
MAX_SECRET_BYTES = 16 * 1024


class SecretError(ValueError):
    """A secret cannot be used; the message names where it was looked for (never its value)."""


def read_secret(source: SecretSource, environ: Mapping[str, str] | None = None) -> str:
    """The secret's value: a file's content (one trailing newline dropped) or a variable."""
    environ = os.environ if environ is None else environ
    if source.env is not None:
        if source.env not in environ:
            raise SecretError(
                f"environment variable {source.env} is not set in the gateway's environment"
            )
        value = environ[source.env]
        where = f"environment variable {source.env}"
    else:
        assert source.file is not None  # the model guarantees exactly one source
        try:
            raw = Path(source.file).read_bytes()[: MAX_SECRET_BYTES + 1]
        except OSError as exc:
            raise SecretError(f"file {source.file} cannot be read: {exc.strerror}") from exc
        if len(raw) > MAX_SECRET_BYTES:
            raise SecretError(f"file {source.file} is larger than {MAX_SECRET_BYTES} bytes")
        value = raw.decode("utf-8", "replace").removesuffix("\n").removesuffix("\r")
        where = f"file {source.file}"
    if not value:
        raise SecretError(f"{where} is empty")
    if any(c in value for c in "\r\n\x00") or not value.isprintable():
        raise SecretError(f"{where} holds control characters; a secret must be one line")
    return value


def compile_credentials(
    spec: BackendCredentialsSpec | None,
    problems: list[str],
    environ: Mapping[str, str] | None = None,
) -> CompiledCredentials | None:
    """The compiled default mode with its secrets, or None (no mode beside `targets`, or a
    problem per unreadable secret)."""
    if spec is None:
        return None
    return _compile_mode(spec, PATH, problems, environ)


def compile_target_credentials(
    spec: BackendCredentialsSpec | None,
    problems: list[str],
    environ: Mapping[str, str] | None = None,
) -> tuple[tuple[str, CompiledCredentials], ...]:
    """Each listed target's compiled mode (a problem per unreadable secret, naming the entry)."""
    out: list[tuple[str, CompiledCredentials]] = []
    for index, entry in enumerate(spec.targets or [] if spec is not None else []):
        compiled = _compile_mode(entry, f"{PATH}.targets[{index}]", problems, environ)
        if compiled is not None:
            out.append((entry.name, compiled))
    return tuple(out)


def _compile_mode(
    spec: BackendCredentialsSpec | TargetCredentials,
    path: str,
    problems: list[str],
    environ: Mapping[str, str] | None,
) -> CompiledCredentials | None:
    try:
        if spec.passthrough:
            return CompiledCredentials("Passthrough")
        if spec.token_exchange is not None:
            exchange = spec.token_exchange
            return CompiledCredentials(
                "TokenExchange",
                token_exchange=CompiledTokenExchange(
                    client_id=exchange.client_id,
                    client_secret=_read(
                        exchange.client_secret, f"{path}.tokenExchange.clientSecret", environ
                    ),
                    audience=exchange.audience,
                    resource=exchange.resource,
                    scope=exchange.scope,
                ),
            )
        if spec.secret_header is None:
            return None  # no default beside `targets`: a target not listed gets nothing
        return CompiledCredentials(
            "SecretHeader", secret_header=_secret_header(spec.secret_header, path, environ)
        )
    except SecretError as exc:
        problems.append(str(exc))
        return None


def _secret_header(
    header: SecretHeader, path: str, environ: Mapping[str, str] | None
) -> CompiledSecretHeader:
    identity = None
    if header.identity is not None:
        key = header.identity.signing_key
        identity = CompiledIdentity(
            header.identity.header.lower().encode(),
            tuple(header.identity.claims),
            None
            if key is None
            else _read(key, f"{path}.secretHeader.identity.signingKey", environ).encode(),
        )
    value = _read(header.value, f"{path}.secretHeader.value", environ)
    return CompiledSecretHeader(header.header.lower().encode(), value.encode(), identity)


def _read(source: SecretSource, where: str, environ: Mapping[str, str] | None) -> str:
    try:
        return read_secret(source, environ)
    except SecretError as exc:
        raise SecretError(f"{where}: {exc}") from exc
