"""Which of a route's backends (or targets) take each user's own upstream token (userOAuth),
and the grant key each is kept under besides the user."""

from __future__ import annotations

from ..controlplane.snapshot import CompiledPolicy, CompiledRoute, CompiledTarget
from ..useroauth.access import Upstream


def uses_user_oauth(route: CompiledRoute) -> bool:
    """Whether any of the route's backends takes each user's own upstream token."""
    policy = route.policy
    return policy is not None and any(c.user_oauth is not None for c in policy.every_credential())


def backend_key(policy: CompiledPolicy, route: CompiledRoute, target: CompiledTarget) -> str:
    """What a grant is kept under besides the user: the policy, the route and the target, so
    one tenant's route never uses a grant made through another's."""
    name = target.name or f"{target.authority}{target.path}"
    return f"{policy.key}|{route.route}|{name}"


def by_target(route: CompiledRoute) -> dict[str, tuple[str, Upstream]]:
    """The route's userOAuth targets by name: each one's grant backend key and upstream."""
    policy = route.policy
    if policy is None:
        return {}
    listed = dict(policy.target_credentials)
    out = {}
    for target in route.targets or ((route.target,) if route.target else ()):
        chosen = listed.get(target.name, policy.credentials)
        if chosen is None or chosen.user_oauth is None:
            continue
        oauth = chosen.user_oauth
        url = target.url
        service = oauth.display_name or target.name or route.route.rpartition("/")[2]
        out[target.name] = (backend_key(policy, route, target), Upstream(oauth, url, service))
    return out


def upstreams_of(route: CompiledRoute) -> dict[str, Upstream]:
    """The route's userOAuth backends (or targets) by grant backend key."""
    return dict(by_target(route).values())
