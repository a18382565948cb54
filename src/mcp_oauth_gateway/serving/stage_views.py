"""What `/config` shows of a policy for each stage of `stages.PIPELINE`: what the data plane
uses, with URLs shown without credentials and no secret at all."""

from __future__ import annotations

from ..controlplane.snapshot import (
    CompiledAuthorization,
    CompiledCredentials,
    CompiledPolicy,
    CompiledProvider,
)
from ..redis_targets import shown_redis_url
from ..urls import shown_url


def _shown_redis(url: str | None) -> str | None:
    """An optional Redis URL as /config shows it: its hosts, never a password."""
    return None if url is None else shown_redis_url(url)


def _shown(url: str | None) -> str | None:
    """An optional URL as /config shows it (see `shown_url`)."""
    return None if url is None else shown_url(url)


def _provider(provider: CompiledProvider) -> dict[str, object]:
    return {
        "issuer": shown_url(provider.issuer),
        "name": provider.name,
        "audiences": sorted(provider.audiences or []),
        "jwks": "inline" if provider.keyset.inline else shown_url(provider.keyset.url),
    }


def _rules(rules: CompiledAuthorization | None) -> dict[str, object] | None:
    if rules is None:
        return None
    return {"action": rules.action, "rules": [e.source for e in rules.expressions]}


def mcp(policy: CompiledPolicy) -> dict[str, object]:
    """The MCP OAuth settings."""
    if policy.mcp is None:
        return {}
    return {
        "mcp": {
            "provider": policy.mcp.provider,
            "mode": policy.mcp.mode,
            "clientId": policy.mcp.client_id,
            "resource": _shown(policy.mcp.resource),
            "redisUrl": _shown_redis(policy.mcp.redis_url),
        }
    }


def providers(policy: CompiledPolicy) -> dict[str, object]:
    """The first provider at the top level (what one-provider policies show), all of them under
    `providers`."""
    if policy.provider is None:
        return {}
    return {
        **_provider(policy.provider),
        "providers": [_provider(p) for p in policy.providers],
        "jwtMode": policy.jwt_mode,
        "forwardToken": policy.forward_token,
    }


def scopes(policy: CompiledPolicy) -> dict[str, object]:
    """Route-wide and per-item scopes, and what each granted scope implies."""
    if policy.scopes is None:
        return {}
    return {
        "scopes": {
            "required": list(policy.scopes.required),
            "implies": {k: sorted(v) for k, v in sorted(policy.scopes.implies.items())},
            "items": [
                {"match": r.match.source, "required": list(r.required), "kinds": sorted(r.kinds)}
                for r in policy.scopes.items
            ],
        }
    }


def authorization(policy: CompiledPolicy) -> dict[str, object]:
    """The CEL rules over the request."""
    rules = _rules(policy.authorization)
    return {} if rules is None else {"authorization": rules}


def mcp_authorization(policy: CompiledPolicy) -> dict[str, object]:
    """The tool-level rules."""
    rules = _rules(policy.mcp_authorization)
    return {} if rules is None else {"mcpAuthorization": rules}


def rate_limit(policy: CompiledPolicy) -> dict[str, object]:
    """The bucket key, its size and refill."""
    limit = policy.rate_limit
    if limit is None:
        return {}
    return {
        "rateLimit": {
            "key": limit.key.source,
            "capacity": limit.capacity,
            "perSecond": limit.per_second,
            "redisUrl": _shown_redis(limit.redis_url),
        }
    }


def transformation(policy: CompiledPolicy) -> dict[str, object]:
    """The headers set (from which expression) and removed."""
    t = policy.transformation
    if t is None:
        return {}
    return {
        "transformation": {
            "set": {name.decode(): e.source for name, e in t.set},
            "remove": sorted(name.decode() for name in t.remove),
        }
    }


def credentials(policy: CompiledPolicy) -> dict[str, object]:
    """The backend credentials mode and its non-secret settings, and each listed target's."""
    if not policy.has_credentials:
        return {}
    view = _credential(policy.credentials)
    if policy.target_credentials:
        view["targets"] = {name: _credential(c) for name, c in policy.target_credentials}
    return {"credentials": view}


def _credential(c: CompiledCredentials | None) -> dict[str, object]:
    """One mode and its non-secret settings (mode None: no default beside `targets`)."""
    if c is None:
        return {"mode": None}
    view: dict[str, object] = {"mode": c.mode}
    if c.token_exchange is not None:
        x = c.token_exchange
        view["tokenExchange"] = {
            "clientId": x.client_id,
            "audience": x.audience,
            "resource": _shown(x.resource),
            "scope": x.scope,
        }
    if c.secret_header is not None:
        s = c.secret_header
        view["secretHeader"] = {
            "header": s.header.decode(),
            "identityHeader": s.identity.header.decode() if s.identity else None,
            "identityClaims": list(s.identity.claims) if s.identity else [],
        }
    return view
