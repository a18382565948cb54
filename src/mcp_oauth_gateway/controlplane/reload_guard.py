"""Whether a GatewayPolicy as a reload would have it may let in, or give more to, a request the
running one refuses: every part of a compiled policy that decides who gets in and what they may
do, compared part by part. Each finding is `field: why`; none means provably not wider.

- `jwtAuthentication`: the mode may only get stricter (Strict < Optional < Permissive); every
  provider must be one the running policy has (same issuer), with no audience added or dropped
  to "any", the same provider kind, and its keys from the same place (inline: no key added, no
  algorithm added, and never down to one key where a token without `kid` then finds it).
- `authorization`, `backend.mcp.authorization`: `narrowing.rules_widening`.
- `scopes`, `backend.mcp.scopes`: `narrowing.scopes_widening`.
- `transformation`: each header the gateway sets keeps its expression or is removed, and each
  header it removes stays removed (else a client's own copy, or a value computed anew, reaches
  a backend that trusts it).

What the backend is given in place of the caller's token (credentials), rate limits and the MCP
metadata documents are not compared: they decide neither who gets in nor what a caller may do
at the gateway."""

from __future__ import annotations

from typing import get_args

from ..resources.models import JwtMode
from .keys import Keyset
from .narrowing import rules_widening, scopes_widening
from .snapshot import CompiledPolicy, CompiledProvider, CompiledTransformation, KeysetSource

JWT = "spec.traffic.jwtAuthentication"
# How much each mode lets in (the model lists them in that order): a token is needed, may be
# left out, may also be bad.
MODE_RANK = {mode: rank for rank, mode in enumerate(get_args(JwtMode))}
MODE_LETS_IN = {"Optional": "requests without a token", "Permissive": "requests with a bad token"}

Finding = tuple[str, str]


def _audiences(old: CompiledProvider, new: CompiledProvider) -> str:
    if old.audiences is None:
        return ""
    if new.audiences is None:
        return "removed (a token for any audience would be accepted)"
    added = new.audiences - old.audiences
    return f"{', '.join(sorted(added))} added" if added else ""


def _key_parts(keyset: Keyset) -> dict[str | None, tuple[str, frozenset[str]]]:
    return {kid: (key.key.thumbprint(), key.algorithms) for kid, key in keyset.by_kid.items()}


def _inline_keys(old: Keyset, new: Keyset) -> str:
    before = _key_parts(old)
    for kid, (thumbprint, algorithms) in _key_parts(new).items():
        was = before.get(kid)
        if was is None or was[0] != thumbprint:
            return f"inline key {kid!r} added or changed"
        if algorithms - was[1]:
            return f"inline key {kid!r} may verify {', '.join(sorted(algorithms - was[1]))} too"
    if len(new.by_kid) == 1 and len(old.by_kid) > 1:
        return "one inline key left: a token without kid would be checked with it"
    return ""


def _keys(old: KeysetSource, new: KeysetSource) -> str:
    if old.inline is not None and new.inline is not None:
        return _inline_keys(old.inline, new.inline)
    if old.inline is None and new.inline is None and old.url == new.url:
        return ""
    return "the signing keys would be taken from another place"


def _provider(old: CompiledProvider, new: CompiledProvider, path: str) -> list[Finding]:
    found = []
    audiences = _audiences(old, new)
    if audiences:
        found.append((f"{path}.audiences", audiences))
    if old.kind != new.kind:
        kinds = f"{old.kind or 'none'} → {new.kind or 'none'}"
        found.append((f"{path}.kind", f"{kinds} changes which tokens count as access tokens"))
    keys = _keys(old.keyset, new.keyset)
    if keys:
        found.append((f"{path}.jwks", keys))
    return found


def _authentication(old: CompiledPolicy, new: CompiledPolicy) -> list[Finding]:
    found = []
    if MODE_RANK[new.jwt_mode] > MODE_RANK[old.jwt_mode]:
        lets_in = MODE_LETS_IN[new.jwt_mode]
        found.append((f"{JWT}.mode", f"{old.jwt_mode} → {new.jwt_mode} lets in {lets_in}"))
    by_issuer = {provider.issuer: provider for provider in old.providers}
    for provider in new.providers:
        path = f"{JWT}.providers[{provider.index}]"
        was = by_issuer.get(provider.issuer)
        if was is None:
            found.append((f"{path}.issuer", "a new issuer: its tokens would be accepted"))
        else:
            found += _provider(was, provider, path)
    return found


def _transformation(
    old: CompiledTransformation | None, new: CompiledTransformation | None
) -> list[Finding]:
    if old is None:
        return []
    sets = {name: e.source for name, e in new.set} if new is not None else {}
    removes = new.remove if new is not None else frozenset()
    path = "spec.traffic.transformation.request"
    found = []
    for name, expression in old.set:
        if sets.get(name) != expression.source and name not in removes:
            found.append((f"{path}.set", f"header {name.decode('latin-1')} no longer set as now"))
    for name in sorted(old.remove - removes):
        found.append((f"{path}.remove", f"header {name.decode('latin-1')} no longer removed"))
    return found


def policy_widening(old: CompiledPolicy, new: CompiledPolicy) -> list[str]:
    """Each way `new` may let in, or give more to, a request `old` refuses: `field: why`."""
    if old is new:
        return []
    found = _authentication(old, new)
    for field, why in (
        ("spec.traffic.authorization", rules_widening(old.authorization, new.authorization)),
        (
            "spec.backend.mcp.authorization",
            rules_widening(old.mcp_authorization, new.mcp_authorization),
        ),
    ):
        if why:
            found.append((field, why))
    found += scopes_widening(old.scopes, new.scopes)
    found += _transformation(old.transformation, new.transformation)
    return [f"{field}: {why}" for field, why in found]
