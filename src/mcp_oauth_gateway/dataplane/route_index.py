"""Which route rule serves a request, found through maps built once per snapshot: the host
picks a few groups (its exact name, the wildcards over its parent domains, routes with no
hostname), and in each group the path is one dict lookup (Exact) and one walk of a
path-segment trie (PathPrefix). Every route keeps its position in the listener's precedence
order, and the lowest position among the matches wins, so the answer is the first match of
the ordered table whatever the number of routes."""

from __future__ import annotations

from collections.abc import Sequence

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


class RouteIndex:
    """A listener's routes (in precedence order) indexed by hostname, then by path."""

    __slots__ = ("any_host", "exact_hosts", "wildcards")

    def __init__(self, routes: Sequence[CompiledRoute]) -> None:
        self.any_host = _Paths()
        self.exact_hosts: dict[str, _Paths] = {}
        # `*.example.com` under ".example.com": any name ending so, at any depth.
        self.wildcards: dict[str, _Paths] = {}
        for position, route in enumerate(routes):
            if not route.hostnames:
                self.any_host.add(position, route)
            for pattern in dict.fromkeys(h.lower() for h in route.hostnames):
                if pattern.startswith("*."):
                    self.wildcards.setdefault(pattern[1:], _Paths()).add(position, route)
                else:
                    self.exact_hosts.setdefault(pattern, _Paths()).add(position, route)

    def named(self, host: str) -> list[_Paths]:
        """The host groups whose hostnames name `host` (a Host header, maybe with a port)."""
        name = host.rsplit(":", 1)[0].lower() if not host.startswith("[") else host
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
