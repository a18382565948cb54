"""Gateway API hostnames: which names a route serves through a listener, and which listener of
a port a request's host goes to.

Names are lowercase DNS names, optionally with one leading `*.` label (the models refuse any
other form). A wildcard `*.example.com` covers every name ending in `.example.com`, at any
depth, but not `example.com` itself.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

# The listener hostname of a listener that has none: it takes every host no other listener on
# its port names.
ANY_HOST = ""


def _covers(wildcard: str, name: str) -> bool:
    """Whether the wildcard `*.suffix` covers `name` (an exact name or a narrower wildcard)."""
    suffix = wildcard[1:]
    return wildcard.startswith("*.") and name.endswith(suffix) and len(name) > len(suffix)


def meet(listener: str, route: str) -> str | None:
    """The names both a listener hostname and a route hostname stand for, as one hostname
    (the narrower of the two), or None when they have none in common."""
    if listener == route:
        return listener
    if _covers(listener, route):
        return route
    if _covers(route, listener):
        return listener
    return None


def effective_hostnames(listener: str | None, route: Sequence[str]) -> tuple[str, ...] | None:
    """The hostnames a route serves through a listener: its own within the listener's (Gateway
    API). `()` stands for every host; None when the two have no name in common (the listener
    does not take the route)."""
    names = tuple(dict.fromkeys(h.lower() for h in route))
    if listener is None:
        return names
    listener = listener.lower()
    if not names:
        return (listener,)
    met = tuple(dict.fromkeys(m for h in names if (m := meet(listener, h)) is not None))
    return met or None


def request_name(host: str) -> str:
    """The name a Host header asks for: without its port, lowercase, without the final dot of a
    fully qualified name (`api.example.com.` is `api.example.com`: it must reach the same
    listener, not a less specific one); an IPv6 literal as sent."""
    if host.startswith("["):
        return host
    name = host.rsplit(":", 1)[0].lower()
    return name[:-1] if name.endswith(".") else name


def serving_listener(listeners: Collection[str], name: str) -> str | None:
    """Of a port's listener hostnames (ANY_HOST for a listener without one), the one a request
    for `name` (see `request_name`) goes to: the listener naming it exactly, else the narrowest
    wildcard covering it, else the listener without a hostname; None when no listener takes
    it. Only that listener's routes can serve the request (Gateway API listener isolation)."""
    if name in listeners and name != ANY_HOST:
        return name
    # Parent domains from the longest (`.b.example.com`) to the shortest (`.com`).
    dot = name.find(".")
    while dot != -1:
        wildcard = "*" + name[dot:]
        if wildcard in listeners:
            return wildcard
        dot = name.find(".", dot + 1)
    return ANY_HOST if ANY_HOST in listeners else None
