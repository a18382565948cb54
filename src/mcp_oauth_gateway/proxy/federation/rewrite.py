"""A target's messages as the client gets them, and the client's answers as the target gets
them: request ids of the targets' own requests swapped for the ids the session minted
(`exchange`), and resource URIs carried in notifications and results put under
`mcp+gw://<target>/` so the client can read them back through the gateway."""

from __future__ import annotations

from collections.abc import Callable

from ...controlplane.federation import offered_uri
from ...mcp_methods import CALL_TOOL, CANCELLED, GET_PROMPT, PROGRESS, READ_RESOURCE, UPDATED
from .exchange import Exchanges

# Content items that carry a resource URI: a link (`uri`) or an embedded resource (`resource`).
_LINK = "resource_link"
_EMBEDDED = "resource"


def _wrapped(target: str, holder: object, field: str) -> object:
    """`holder` with its URI field under the target's prefix (unchanged when it has none)."""
    if isinstance(holder, dict) and isinstance(holder.get(field), str) and holder[field]:
        return {**holder, field: offered_uri(target, holder[field])}
    return holder


def _content_item(target: str, item: object) -> object:
    if not isinstance(item, dict):
        return item
    if item.get("type") == _LINK:
        return _wrapped(target, item, "uri")
    if item.get("type") == _EMBEDDED:
        return {**item, "resource": _wrapped(target, item.get("resource"), "uri")}
    return item


def _each(result: dict[str, object], field: str, change: Callable[[object], object]) -> None:
    items = result.get(field)
    if isinstance(items, list):
        result[field] = [change(item) for item in items]


def offered_result(method: str, target: str, result: object) -> object:
    """A call's result with the resource URIs it carries offered under `target`: the
    contents of `resources/read`, resource links and embedded resources in a tool's result and
    in a prompt's messages."""
    if not isinstance(result, dict):
        return result
    out = dict(result)
    if method == READ_RESOURCE:
        _each(out, "contents", lambda item: _wrapped(target, item, "uri"))
    elif method == CALL_TOOL:
        _each(out, "content", lambda item: _content_item(target, item))
    elif method == GET_PROMPT:

        def message(held: object) -> object:
            if not isinstance(held, dict):
                return held
            return {**held, "content": _content_item(target, held.get("content"))}

        _each(out, "messages", message)
    return out


def from_target(
    message: dict[str, object],
    target: str,
    exchanges: Exchanges,
    method: str | None = None,
    request_id: object = None,
) -> dict[str, object] | None:
    """`target`'s message as the client gets it; None when it has nothing for the client.
    `method` and `request_id`: the client's request whose answer this is (None on the GET
    stream, which carries no answers). The answer goes under the request's id, whatever id
    the target wrote: a target answers the call it was sent, never another request of the
    client's (one in flight at another target, say)."""
    kind = message.get("method")
    if isinstance(kind, str) and "id" in message:
        return {**message, "id": exchanges.ask(target, message["id"])}
    if isinstance(kind, str):
        return _notification(message, kind, target, exchanges)
    if method is None or "id" not in message:
        return None
    if "result" in message:
        result = offered_result(method, target, message["result"])
        return {**message, "id": request_id, "result": result}
    return {**message, "id": request_id}


def is_answer(message: dict[str, object]) -> bool:
    """Whether a message the client gets is a response (neither a request nor a notification)."""
    return not isinstance(message.get("method"), str)


def call_answer(
    message: dict[str, object],
    target: str,
    exchanges: Exchanges,
    method: str,
    request_id: object,
) -> dict[str, object] | None:
    """A call's whole (JSON) answer as the client gets it (under the request's id); None
    when it is no answer."""
    if not is_answer(message):
        return None
    return from_target(message, target, exchanges, method, request_id)


def _notification(
    message: dict[str, object], kind: str, target: str, exchanges: Exchanges
) -> dict[str, object] | None:
    params = message.get("params")
    if kind == UPDATED and isinstance(params, dict):
        return {**message, "params": _wrapped(target, params, "uri")}
    if kind == CANCELLED:
        # The target withdraws one of its own requests: the client knows it by the minted id.
        own = params.get("requestId") if isinstance(params, dict) else None
        minted = exchanges.withdraw(target, own)
        if minted is None or not isinstance(params, dict):
            return None
        return {**message, "params": {**params, "requestId": minted}}
    return message


def to_target(
    message: dict[str, object], exchanges: Exchanges
) -> tuple[str, dict[str, object]] | None:
    """The target the client's answer is for and the answer under the target's own id; None
    when the session never sent the client a request with that id."""
    if not is_answer_of_client(message):
        return None
    return answered(message, exchanges.answer(message.get("id")))


def is_answer_of_client(message: dict[str, object]) -> bool:
    """Whether the client's message is an answer (a result or an error)."""
    return "result" in message or "error" in message


def answered(
    message: dict[str, object], asked: tuple[str, object] | None
) -> tuple[str, dict[str, object]] | None:
    """The client's answer to the target's request `asked` (target, its own id), for it."""
    if asked is None:
        return None
    target, own_id = asked
    return target, {**message, "id": own_id}


def withdrawn_id(message: dict[str, object]) -> object:
    """The target's own id of the request a target's cancellation withdraws (None: none)."""
    params = message.get("params")
    if message.get("method") != CANCELLED or not isinstance(params, dict):
        return None
    return params.get("requestId")


def progress_of(message: dict[str, object]) -> object:
    """The progress token a progress notification reports under."""
    params = message.get("params")
    return params.get("progressToken") if isinstance(params, dict) else None


def progress_token(message: dict[str, object]) -> object:
    """The progress token a client's request asked progress under (None: it asked for none)."""
    params = message.get("params")
    meta = params.get("_meta") if isinstance(params, dict) else None
    return meta.get("progressToken") if isinstance(meta, dict) else None


def foreign_progress(message: dict[str, object], token: object) -> bool:
    """Whether `message` is progress of another request than the call whose stream carries
    it: a target could otherwise report progress for a request in flight at another target
    (tokens are often the request ids), or for one that asked for none."""
    if message.get("method") != PROGRESS:
        return False
    params = message.get("params")
    given = params.get("progressToken") if isinstance(params, dict) else None
    return token is None or type(given) is not type(token) or given != token


def stray_progress(message: dict[str, object], target: str, exchanges: Exchanges) -> bool:
    """Whether `message` is progress sent outside a call's own stream (the GET stream, a
    listen stream) under a token no client request in flight at `target` asked for: another
    target's call (tokens are often request ids), one already answered, or none at all."""
    if message.get("method") != PROGRESS:
        return False
    params = message.get("params")
    given = params.get("progressToken") if isinstance(params, dict) else None
    return not exchanges.in_flight_at(target, given)
