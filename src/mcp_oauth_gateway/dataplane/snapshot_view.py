"""The running configuration as JSON for the admin `/config` endpoint, secrets redacted."""

from __future__ import annotations

from urllib.parse import urlsplit, urlunsplit

from ..controlplane.snapshot import Snapshot


def redact(url: str | None) -> str | None:
    """A URL without its user information (Redis passwords live there)."""
    if not url:
        return url
    parts = urlsplit(url)
    if parts.username is None and parts.password is None:
        return url
    host = parts.hostname or ""
    netloc = f"***@{host}" + (f":{parts.port}" if parts.port else "")
    return urlunsplit((parts.scheme, netloc, parts.path, parts.query, parts.fragment))


def config_dump(snapshot: Snapshot) -> dict[str, object]:
    """Listeners, routes and policies as the data plane uses them."""
    policies: dict[str, dict[str, object]] = {}
    listeners: dict[str, list[dict[str, object]]] = {}
    for port, routes in snapshot.listeners.items():
        listeners[str(port)] = []
        for route in routes:
            listeners[str(port)].append({
                "route": route.route, "match": f"{route.match_type} {route.match_value}",
                "backend": f"{route.target.authority}{route.target.path}" if route.target
                else None, "policy": route.policy.key if route.policy else None})
            policy = route.policy
            if policy is None or policy.key in policies:
                continue
            entry: dict[str, object] = {"invalid": policy.invalid}
            if policy.provider is not None:
                entry["issuer"] = policy.provider.issuer
                entry["audiences"] = sorted(policy.provider.audiences or [])
                entry["jwks"] = "inline" if policy.provider.keyset.inline else \
                    policy.provider.keyset.url
            if policy.mcp is not None:
                entry["mcp"] = {"provider": policy.mcp.provider, "mode": policy.mcp.mode,
                                "clientId": policy.mcp.client_id,
                                "resource": policy.mcp.resource,
                                "redisUrl": redact(policy.mcp.redis_url)}
            for name, rules in (("authorization", policy.authorization),
                                ("mcpAuthorization", policy.mcp_authorization)):
                if rules is not None:
                    entry[name] = {"action": rules.action,
                                   "rules": [e.source for e in rules.expressions]}
            if policy.rate_limit is not None:
                entry["rateLimit"] = {"key": policy.rate_limit.key.source,
                                      "capacity": policy.rate_limit.capacity,
                                      "perSecond": policy.rate_limit.per_second,
                                      "redisUrl": redact(policy.rate_limit.redis_url)}
            policies[policy.key] = entry
    return {"builtAt": snapshot.built_at, "listeners": listeners, "policies": policies}
