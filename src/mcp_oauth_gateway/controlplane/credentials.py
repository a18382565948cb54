"""Compile what a backend receives in place of the caller's token (`spec.backend.credentials`):
secrets are read here, at load, from where the policy may read them in its mode
(`secret_sources`), and checked, so the request path only copies bytes. A secret that cannot be
read makes the policy invalid (its routes answer 503): never a request sent without the
credential the backend expects."""

from __future__ import annotations

from ..resources.models import (
    BackendCredentialsSpec,
    SecretHeader,
    SecretSource,
    TargetCredentials,
    UserOAuth,
)
from .secret_sources import MAX_SECRET_BYTES, SecretError, SecretScope, read_secret
from .snapshot import (
    CompiledCredentials,
    CompiledIdentity,
    CompiledSecretHeader,
    CompiledTokenExchange,
    CompiledUserOAuth,
)

__all__ = [
    "MAX_SECRET_BYTES",
    "SecretError",
    "SecretScope",
    "compile_credentials",
    "compile_target_credentials",
    "read_secret",
]

PATH = "spec.backend.credentials"


def compile_credentials(
    spec: BackendCredentialsSpec | None,
    problems: list[str],
    scope: SecretScope | None = None,
) -> CompiledCredentials | None:
    """The compiled default mode with its secrets, or None (no mode beside `targets`, or a
    problem per unreadable secret)."""
    if spec is None:
        return None
    return _compile_mode(spec, PATH, problems, scope)


def compile_target_credentials(
    spec: BackendCredentialsSpec | None,
    problems: list[str],
    scope: SecretScope | None = None,
) -> tuple[tuple[str, CompiledCredentials], ...]:
    """Each listed target's compiled mode (a problem per unreadable secret, naming the entry)."""
    out: list[tuple[str, CompiledCredentials]] = []
    for index, entry in enumerate(spec.targets or [] if spec is not None else []):
        compiled = _compile_mode(entry, f"{PATH}.targets[{index}]", problems, scope)
        if compiled is not None:
            out.append((entry.name, compiled))
    return tuple(out)


def _compile_mode(
    spec: BackendCredentialsSpec | TargetCredentials,
    path: str,
    problems: list[str],
    scope: SecretScope | None,
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
                        exchange.client_secret, f"{path}.tokenExchange.clientSecret", scope
                    ),
                    audience=exchange.audience,
                    resource=exchange.resource,
                    scope=exchange.scope,
                ),
            )
        if spec.user_oauth is not None:
            return CompiledCredentials(
                "UserOAuth", user_oauth=_user_oauth(spec.user_oauth, path, scope)
            )
        if spec.secret_header is None:
            return None  # no default beside `targets`: a target not listed gets nothing
        return CompiledCredentials(
            "SecretHeader", secret_header=_secret_header(spec.secret_header, path, scope)
        )
    except SecretError as exc:
        problems.append(str(exc))
        return None


def _secret_header(
    header: SecretHeader, path: str, scope: SecretScope | None
) -> CompiledSecretHeader:
    identity = None
    if header.identity is not None:
        key = header.identity.signing_key
        identity = CompiledIdentity(
            header.identity.header.lower().encode(),
            tuple(header.identity.claims),
            None
            if key is None
            else _read(key, f"{path}.secretHeader.identity.signingKey", scope).encode(),
        )
    value = _read(header.value, f"{path}.secretHeader.value", scope)
    return CompiledSecretHeader(header.header.lower().encode(), value.encode(), identity)


def _user_oauth(spec: UserOAuth, path: str, scope: SecretScope | None) -> CompiledUserOAuth:
    secret = spec.client_secret
    return CompiledUserOAuth(
        client_id=spec.client_id,
        client_secret=None
        if secret is None
        else _read(secret, f"{path}.userOAuth.clientSecret", scope),
        scopes=tuple(spec.scopes),
        issuer=spec.issuer,
        authorization_endpoint=spec.authorization_endpoint,
        token_endpoint=spec.token_endpoint,
        revocation_endpoint=spec.revocation_endpoint,
        resource=spec.resource,
        display_name=spec.display_name,
    )


def _read(source: SecretSource, where: str, scope: SecretScope | None) -> str:
    try:
        return read_secret(source, scope)
    except SecretError as exc:
        raise SecretError(f"{where}: {exc}") from exc
