"""RFC 6750 `WWW-Authenticate` challenges, written one way for the 401 and the 403."""

from __future__ import annotations


def _quote(value: str) -> str:
    # Header values are one line: a reason quoting a claim must not start another.
    flat = value.replace("\r", " ").replace("\n", " ")
    return flat.replace("\\", "\\\\").replace('"', '\\"')


def challenge(
    resource_metadata: str | None,
    scope: str | None,
    error: str | None,
    code: str = "invalid_token",
) -> bytes:
    """`Bearer` first (TS clients read only the first token), then error, metadata, scope."""
    params = []
    if error:
        params.append(f'error="{code}", error_description="{_quote(error)}"')
    if resource_metadata:
        params.append(f'resource_metadata="{resource_metadata}"')
    if scope:
        params.append(f'scope="{scope}"')
    return ("Bearer " + ", ".join(params)).strip().encode("latin-1", "replace")
