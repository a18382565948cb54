"""What the federation stage makes of its targets' answers: one `initialize` result (the union
of their capabilities, the oldest protocol version any agreed to) and merged lists whose items
carry their target in their names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...controlplane.federation import offered_name, offered_uri
from ...mcp_methods import LISTS


def union(capabilities: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """Every capability any target has; a flag is true when it is true for any of them (the
    GET stream carries every target's notifications, so one target's promise is kept)."""
    out: dict[str, object] = {}
    for each in capabilities:
        for name, value in each.items():
            if isinstance(value, Mapping):
                held = out.get(name)
                out[name] = union([held if isinstance(held, Mapping) else {}, value])
            elif isinstance(value, bool):
                out[name] = bool(out.get(name)) or value
            else:
                out.setdefault(name, value)
    return out


def agreed_version(versions: Sequence[str]) -> str:
    """The protocol version to answer the client: the oldest any target agreed to (versions
    are dates, `YYYY-MM-DD`, so the smallest string is the oldest)."""
    return min(versions)


def instructions(texts: Mapping[str, str]) -> str | None:
    """The targets' instructions, each under its target's name (None when none gave any)."""
    parts = [f"{target}: {text}" for target, text in texts.items() if text]
    return "\n\n".join(parts) if parts else None


def offered_items(method: str, target: str, result: Mapping[str, object]) -> list[object]:
    """A target's list items as clients see them: named `<target>_<name>` or with their URI
    under `mcp+gw://<target>/`. Items without a usable name are dropped: nothing could call
    them back."""
    field, kind, key = LISTS[method]
    items = result.get(field)
    out: list[object] = []
    # Resources and resource templates are offered by URI, tools and prompts by name.
    rename = offered_uri if kind == "resource" else offered_name
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict) or not isinstance(item.get(key), str) or not item[key]:
            continue
        out.append({**item, key: rename(target, item[key])})
    return out
