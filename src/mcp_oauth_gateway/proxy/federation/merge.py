"""What the federation stage makes of its targets' answers: one `initialize` result (the union
of their capabilities, the oldest protocol version any agreed to) and merged lists whose items
carry their target in their names."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

from ...controlplane.federation import offered_name, offered_uri

# list method -> (result field holding the items, the item field naming it, how it is offered)
LISTS: dict[str, tuple[str, str, str]] = {
    "tools/list": ("tools", "name", "name"),
    "prompts/list": ("prompts", "name", "name"),
    "resources/list": ("resources", "uri", "uri"),
    "resources/templates/list": ("resourceTemplates", "uriTemplate", "uri"),
}
# Capability flags that promise notifications (list changes, resource updates). Those reach a
# client on its GET stream, which a federated route does not offer yet: not promised.
UNDELIVERED = frozenset({"listChanged", "subscribe"})


# Client capabilities that let a server send the client requests of its own (sampling,
# elicitation, roots). Their answers come back as client POSTs the gateway cannot yet route to
# the target that asked (that needs request ids rewritten per target), so a target is not told
# the client has them: it fails what needs them at once instead of waiting for an answer.
SERVER_REQUESTS = frozenset({"sampling", "elicitation", "roots"})


def for_targets(params: Mapping[str, object]) -> dict[str, object]:
    """The client's initialize params as the targets get them (SERVER_REQUESTS left out)."""
    capabilities = params.get("capabilities")
    if not isinstance(capabilities, Mapping):
        return dict(params)
    kept = {k: v for k, v in capabilities.items() if k not in SERVER_REQUESTS}
    return {**params, "capabilities": kept}


def union(capabilities: Sequence[Mapping[str, object]]) -> dict[str, object]:
    """Every capability any target has; a flag is true when it is true for any of them."""
    out: dict[str, object] = {}
    for each in capabilities:
        for name, value in each.items():
            if name in UNDELIVERED:
                continue
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
    field, key, kind = LISTS[method]
    items = result.get(field)
    out: list[object] = []
    for item in items if isinstance(items, list) else ():
        if not isinstance(item, dict) or not isinstance(item.get(key), str) or not item[key]:
            continue
        rename = offered_uri if kind == "uri" else offered_name
        out.append({**item, key: rename(target, item[key])})
    return out
