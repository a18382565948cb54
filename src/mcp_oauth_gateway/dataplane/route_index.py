"""Which route rule serves a request, found through maps built once per snapshot: the host
picks the one listener of the port that takes it (the most specific listener hostname, Gateway
API listener isolation), then a few groups of that listener's routes (its exact name, the
wildcards over its parent domains, routes with no hostname), and in each group the path is one
dict lookup (Exact) and one walk of a path-segment trie (PathPrefix). Every route keeps its
position in the port's precedence order, and the lowest position among the matches wins, so
the answer is the first match of the ordered table among the listener's routes whatever the
number of routes."""

from __future__ import annotations

from collections.abc import Sequence

from ..controlplane.hostnames import ANY_HOST, request_name, serving_listener
from ..controlplane.snapshot import CompiledCors, CompiledRoute

# No route: larger than any position, so `min` needs no special case on the request path.
NONE = 1 << 62


class _Node:
    """A trie node: the PathPrefix routes whose value ends at this segment."""

    __slots__ = ("children", "first")

    def __init__(self) -> None:
        self.children: dict[str, _Node] = {}
        self.first = NONE


class _Paths:
    """The routes of one host group: the first position of each Exact path and of each prefix,
    and the distinct CORS policies with the first position that has each."""

    __slots__ = ("cors", "exact", "trie")

    def __init__(self) -> None:
        self.exact: dict[str, int] = {}
        self.trie = _Node()
        self.cors: dict[CompiledCors, int] = {}

    def add(self, position: int, route: CompiledRoute) -> None:
        """Index one route; routes come in precedence order, so the first one kept wins."""
        if route.cors is not None:
            self.cors.setdefault(route.cors, position)
        if route.match_type == "Exact":
            self.exact.setdefault(route.match_value, position)
            return
        # Gateway API prefixes match whole path elements: `/mcp` is `/mcp` and `/mcp/…`, not
        # `/mcpx`. Split on "/" as the request path is, so `/mcp/` is the prefix `/mcp`.
        node = self.trie
        prefix = route.match_value.rstrip("/")
        if prefix:
            for segment in prefix.split("/"):
                child = node.children.get(segment)
                if child is None:
                    child = node.children[segment] = _Node()
                node = child
        node.first = min(node.first, position)

    def best(self, path: str) -> int:
        """The first position among this group's routes whose path matches, or NONE."""
        node = self.trie
        best = min(self.exact.get(path, NONE), node.first)
        for segment in path.split("/"):
            child = node.children.get(segment)
            if child is None:
                break
            node = child
            if node.first < best:
                best = node.first
        return best


class _HostIndex:
    """One listener's routes (in precedence order) indexed by hostname, then by path."""

    __slots__ = ("any_host", "exact_hosts", "wildcards")

    def __init__(self) -> None:
        self.any_host = _Paths()
        self.exact_hosts: dict[str, _Paths] = {}
        # `*.example.com` under ".example.com": any name ending so, at any depth.
        self.wildcards: dict[str, _Paths] = {}

    def add(self, position: int, route: CompiledRoute) -> None:
        """Index one route; routes come in precedence order."""
        if not route.hostnames:
            self.any_host.add(position, route)
        for pattern in dict.fromkeys(h.lower() for h in route.hostnames):
            if pattern.startswith("*."):
                self.wildcards.setdefault(pattern[1:], _Paths()).add(position, route)
            else:
                self.exact_hosts.setdefault(pattern, _Paths()).add(position, route)

    def named(self, host: str) -> list[_Paths]:
        """The host groups whose hostnames name `host` (a Host header, maybe with a port)."""
        name = request_name(host)
        group = self.exact_hosts.get(name)
        found = [] if group is None else [group]
        wildcards = self.wildcards
        if wildcards:
            # Every parent domain of the name (`.b.example.com`, `.example.com`, `.com`): as
            # many lookups as the name has dots, whatever the number of wildcards.
            dot = name.find(".")
            while dot != -1:
                group = wildcards.get(name[dot:])
                if group is not None:
                    found.append(group)
                dot = name.find(".", dot + 1)
        return found

    def first(self, host: str, path: str) -> int | None:
        """The position of the route serving `host` + `path`, or None."""
        best = self.any_host.best(path)
        if self.exact_hosts or self.wildcards:  # else the Host header is not even read
            for group in self.named(host):
                position = group.best(path)
                if position < best:
                    best = position
        return None if best == NONE else best

    def cors_candidates(self, host: str) -> list[tuple[int, CompiledCors]]:
        """The distinct CORS policies of the routes naming `host`, in precedence order."""
        found: dict[CompiledCors, int] = {}
        for group in [self.any_host, *self.named(host)]:
            for cors, position in group.cors.items():
                if found.get(cors, NONE) > position:
                    found[cors] = position
        return sorted(((p, c) for c, p in found.items()), key=lambda pc: pc[0])


# A listener no request reaches, or one without routes: it matches nothing.
_EMPTY = _HostIndex()


class RouteIndex:
    """A port's routes (in precedence order) by the listener they are served through
    (`CompiledRoute.listener_hostname`), each listener's indexed by hostname, then by path.
    `listeners`: the hostnames of the port's listeners ("" for one without), routes or not."""

    __slots__ = ("_listeners", "_only")

    def __init__(self, routes: Sequence[CompiledRoute], listeners: Sequence[str] = (ANY_HOST,)):
        self._listeners = {host: _HostIndex() for host in listeners}
        for position, route in enumerate(routes):
            index = self._listeners.get(route.listener_hostname)
            if index is not None:
                index.add(position, route)
        # The usual port: one listener without a hostname, which every request reaches.
        self._only = self._listeners.get(ANY_HOST) if len(self._listeners) == 1 else None

    def listener(self, host: str) -> _HostIndex:
        """The routes of the listener a request for `host` reaches (none: no listener)."""
        if self._only is not None:
            return self._only
        chosen = serving_listener(self._listeners, request_name(host))
        return _EMPTY if chosen is None else self._listeners[chosen]

    def first(self, host: str, path: str) -> int | None:
        """The position of the route serving `host` + `path`, or None."""
        return self.listener(host).first(host, path)

    def cors_candidates(self, host: str) -> list[tuple[int, CompiledCors]]:
        """The distinct CORS policies of the routes naming `host`, in precedence order."""
        return self.listener(host).cors_candidates(host)
