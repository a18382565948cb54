"""The `DPoP` challenge of a 401 (RFC 9449 §7.1, §7.2, §9): the algorithms a proof may use,
and the refusal when a DPoP request was refused.

RFC 9449's own example puts `error` first and `algs` after; parameters may come in any order
(RFC 9110 §11.2). Values are quoted-strings, escaped the way the `Bearer` challenge's are
(`asgi.quoted_string`), so a description quoting what a client sent cannot end the header
or start another parameter. When no DPoP credentials were sent, no error is named (§7.2).
"""

from __future__ import annotations

from collections.abc import Sequence

from ..asgi import quoted_string


def dpop_challenge(
    algorithms: Sequence[str],
    error: str | None = None,
    description: str | None = None,
    resource_metadata: str | None = None,
    scope: str | None = None,
) -> bytes:
    """The `WWW-Authenticate` value `DPoP error="…", error_description="…", algs="…"`, with
    `resource_metadata` and `scope` when given (RFC 9728 §5.1, RFC 6750 §3)."""
    params = []
    if error:
        params.append(f'error="{quoted_string(error)}"')
        if description:
            params.append(f'error_description="{quoted_string(description)}"')
    params.append(f'algs="{quoted_string(" ".join(algorithms))}"')
    if resource_metadata:
        params.append(f'resource_metadata="{quoted_string(resource_metadata)}"')
    if scope:
        params.append(f'scope="{quoted_string(scope)}"')
    return ("DPoP " + ", ".join(params)).encode("latin-1", "replace")
