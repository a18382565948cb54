"""How a federated backend's items are named for its clients, and read back: the one place that
decides it, for the federation stage (which rewrites messages) and tool-level authorization
(which tells rules the target as `mcp.target`). Pure functions over the target names.

- A tool or prompt `echo` of target `b` is offered as `b_echo` (`<target>_<tool>`, one
  underscore; agentgateway's current releases write `<target>__<tool>`). Target names hold no
  `_` (resources.backend.TARGET_NAME), so the first `_` of an offered name always ends the
  target's part: a name splits one way only.
- A resource URI (or URI template) `file:///x` of target `b` is offered as `mcp+gw://b/file:///x`:
  the original follows the target's name verbatim, not percent-encoded (agentgateway writes
  `agw://<target>/?u=<percent-encoded URI>`), so a template's `{expressions}` stay expandable by
  the client and any original reads back exactly, whatever characters it holds."""

from __future__ import annotations

from collections.abc import Collection

SEPARATOR = "_"
URI_PREFIX = "mcp+gw://"


def offered_name(target: str, name: str) -> str:
    """A target's tool or prompt name as clients see it: `<target>_<name>`."""
    return f"{target}{SEPARATOR}{name}"


def split_name(offered: str, targets: Collection[str]) -> tuple[str, str] | None:
    """`(target, name)` of an offered tool or prompt name; None when no target owns it."""
    target, separator, name = offered.partition(SEPARATOR)
    if not separator or not name or target not in targets:
        return None
    return target, name


def offered_uri(target: str, uri: str) -> str:
    """A target's resource URI or URI template as clients see it: `mcp+gw://<target>/<uri>`."""
    return f"{URI_PREFIX}{target}/{uri}"


def split_uri(offered: str, targets: Collection[str]) -> tuple[str, str] | None:
    """`(target, uri)` of an offered resource URI; None when it is not one of a target's."""
    if not offered.startswith(URI_PREFIX):
        return None
    target, separator, uri = offered[len(URI_PREFIX) :].partition("/")
    if not separator or not uri or target not in targets:
        return None
    return target, uri


def target_of(kind: str, offered: str, targets: Collection[str]) -> str | None:
    """The target an item belongs to (`kind`: tool, prompt or resource), or None."""
    split = split_uri(offered, targets) if kind == "resource" else split_name(offered, targets)
    return split[0] if split is not None else None
