"""Which target a client's request is for, and the request as that target must receive it:
the offered name or URI turned back into the target's own."""

from __future__ import annotations

from collections.abc import Collection

from ...controlplane.federation import split_name, split_uri
from ...jsonrpc import INVALID_PARAMS, Malformed, params_of
from ...mcp_methods import COMPLETION, ITEMS, NOTIFICATIONS, REFERENCES


def _split(kind: str, offered: object, targets: Collection[str]) -> tuple[str, str]:
    """(target, the target's own name or URI); Malformed as an unknown item otherwise (the
    answer a target gives for an item it does not have)."""
    if isinstance(offered, str):
        split = (split_uri if kind == "resource" else split_name)(offered, targets)
        if split is not None:
            return split
    shown = offered[:200] if isinstance(offered, str) else offered
    raise Malformed(INVALID_PARAMS, f"Unknown {kind}: {shown}")


def routed(message: dict[str, object], targets: Collection[str]) -> tuple[str, dict[str, object]]:
    """The target of a request naming an item, and the request rewritten for it."""
    method = message["method"]
    params = params_of(message)
    if method == COMPLETION:
        ref = params.get("ref")
        if not isinstance(ref, dict) or ref.get("type") not in REFERENCES:
            raise Malformed(INVALID_PARAMS, "completion/complete needs a prompt or resource ref")
        kind, field = REFERENCES[str(ref["type"])]
        target, own = _split(kind, ref.get(field), targets)
        return target, {**message, "params": {**params, "ref": {**ref, field: own}}}
    kind, field = ITEMS[str(method)]
    target, own = _split(kind, params.get(field), targets)
    return target, {**message, "params": {**params, field: own}}


def relayed_notification(method: str) -> bool:
    """Whether a message without an id may go to the targets as it is: a notification, never
    a request (which names no target, or one: relayed to every target, it would reach the
    others' items under the offered name). What a client sends its targets without an id is
    only notifications (`initialized`, `cancelled`, `progress`, `roots/list_changed`)."""
    return method.startswith(NOTIFICATIONS)
