"""Reading MCP JSON-RPC messages for tool-level authorization: which item a request names, and
which items a list result carries. Pure functions; the pipeline stage does the I/O.

Requests are read strictly: a body is judged only when every backend would read it as the
gateway does, and anything else is refused, never passed on unjudged (a body the backend read
more leniently could run a tool the gateway never saw). Results are read leniently, as clients
read them (`jsonrpc.read_message`, lone surrogates included), since what a client can read is
what must be filtered.

A denied call is answered as if the item did not exist (JSON-RPC -32602, "Unknown tool: X",
the same answer agentgateway gives), so a caller learns nothing about items it may not use."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import NamedTuple

from ..controlplane.federation import target_of
from ..jsonrpc import HEADER_MISMATCH, INVALID_PARAMS, INVALID_REQUEST, PARSE_ERROR, error
from ..mcp_headers import decode_name
from ..mcp_methods import COMPLETION, ITEMS, LISTEN, LISTS, REFERENCES, UPDATED

# 2026-07-28: a listen stream delivers the updates of the resources it names, each guarded as
# a `resources/subscribe` of it is.
_SUBSCRIPTIONS = ("notifications", "resourceSubscriptions")

# Fields the gateway reads, at the top of a message and in `params`. A key equal to one of them
# but for case (`METHOD`, `Name`, `param\u017f`) is read as that field by case-insensitive decoders
# (Go's encoding/json folds case, Kelvin sign and long s included), and one equal but for
# underscores (`resource_subscriptions`) by the Python SDK's models (pydantic's
# `populate_by_name` takes a field's snake_case name for its camelCase one), so it is refused.


def _fold(key: str) -> str:
    """A key as some decoder reads it: case folded, underscores dropped."""
    return key.replace("_", "").casefold()


_TOP_FIELDS = ("jsonrpc", "id", "method", "params", "result", "error")
_PARAM_FIELDS = ("name", "uri", "arguments")
_FOLDED_TOP = {_fold(f): f for f in _TOP_FIELDS}
_FOLDED_PARAMS = {_fold(f): f for f in (*_PARAM_FIELDS, "ref")}
_FOLDED_REF = {_fold(f): f for f in ("type", "name", "uri")}
# Keys that need no case check: the fields themselves, and usual ones that fold to none.
_USUAL_KEYS = frozenset({*_TOP_FIELDS, *_PARAM_FIELDS, "ref", "type", "_meta", "argument"})
_FOLDED_METHODS = {m.casefold(): m for m in (*ITEMS, *LISTS, COMPLETION, LISTEN)}
# A `\uD800`-`\uDFFF` escape: the only way a lone surrogate gets into text decoded strictly.
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")
# Nesting the gateway reads: well within Python's recursion limit, wherever the parse runs (a
# deeper body raised RecursionError at a depth that depended on the stack), and far beyond any
# MCP message.
MAX_DEPTH = 512
# The integers every JSON-RPC peer reads exactly (JavaScript numbers are doubles).
_SAFE_INTEGER = 2**53 - 1


class McpRequest(NamedTuple):
    """The parts of one JSON-RPC request that authorization looks at (a named tuple: one is
    made per request, and a frozen dataclass cost five attribute calls to build)."""

    id: object
    method: str
    kind: str | None = None  # "tool", "prompt" or "resource" for a guarded method
    name: str | None = None
    # The resources a `subscriptions/listen` stream would deliver updates of.
    subscribed: tuple[str, ...] = ()


class Refusal(ValueError):
    """A request body that is answered 400 with a JSON-RPC error instead of being judged."""

    code = INVALID_REQUEST


class Unreadable(Refusal):
    """A body the gateway cannot read exactly: not UTF-8 JSON as RFC 8259 and I-JSON define it
    (answered 400, -32700)."""

    code = PARSE_ERROR


class Ambiguous(Refusal):
    """A body the gateway might read differently from the backend (answered 400, -32600)."""


class HeaderMismatch(Refusal):
    """`Mcp-Method`/`Mcp-Name` disagree with the body (answered 400, -32020)."""

    code = HEADER_MISMATCH


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # With duplicate keys, which one wins is parser-dependent: the gateway could authorize one
    # tool name and the backend call another.
    unique = dict(pairs)
    if len(unique) != len(pairs):
        raise Ambiguous("the JSON body repeats a key")
    return unique


def _no_constant(name: str) -> object:
    raise Unreadable(f"{name} is not a JSON number (RFC 8259)")


# Built once: `json.loads(text, object_pairs_hook=...)` would build a decoder per call, which
# cost more than the parse itself.
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates, parse_constant=_no_constant)
# The decoder's own scanner (C, with the hooks above), which `decode` calls.
_SCAN: Callable[[str, int], tuple[object, int]] = vars(_DECODER)["scan_once"]
_JSON_SPACE = " \t\n\r"


def _decoded(text: str) -> object:
    """`_DECODER.decode(text)`, its scanner called directly: the decoder's own steps around it
    (Python, and two regular expressions) cost a third of reading a `tools/call` body. What
    the scanner does not take at once (leading space, extra data, no JSON) goes to the decoder,
    which refuses or reads it exactly as before."""
    try:
        value, end = _SCAN(text, 0)
    except StopIteration:
        return _DECODER.decode(text)
    if end != len(text) and text[end:].strip(_JSON_SPACE):
        return _DECODER.decode(text)
    return value


def parse_request(body: bytes) -> object:
    """The JSON value of a request body read strictly; Unreadable or Ambiguous otherwise."""
    try:
        text = body.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise Unreadable(f"the body is not UTF-8 (invalid byte at offset {exc.start})") from None
    if text.startswith("\ufeff"):
        raise Unreadable("the body starts with a byte order mark; send UTF-8 JSON without one")
    try:
        value = _decoded(text)
    except Refusal:
        raise
    except RecursionError:
        why = f"the body nests arrays or objects deeper than {MAX_DEPTH} levels"
        raise Unreadable(why) from None
    except json.JSONDecodeError as exc:
        raise Unreadable(f"the body is not JSON: {exc}") from None
    except ValueError:
        # int() refuses more than sys.get_int_max_str_digits() digits (4300).
        why = "the body holds a number with more digits than the gateway reads"
        raise Unreadable(why) from None
    if (
        len(text) > MAX_DEPTH
        and text.count("[") + text.count("{") > MAX_DEPTH
        and _deeper_than(value, MAX_DEPTH)
    ):
        raise Unreadable(f"the body nests arrays or objects deeper than {MAX_DEPTH} levels")
    if "\\u" in text and _SURROGATE_ESCAPE.search(text) and _holds_lone_surrogate(value):
        # Decoders differ on these: Go writes U+FFFD, Rust refuses, JavaScript keeps them.
        raise Unreadable("the body holds a lone UTF-16 surrogate escape (not I-JSON)")
    if "\\u0000" in text and _a_key_holds_nul(value):
        # C parsers read a key only up to its NUL: `method\u0000` would be `method` to them.
        raise Ambiguous("a key of the body holds a NUL character")
    return value


def _a_key_holds_nul(value: object) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, dict):
            if any("\x00" in key for key in item):
                return True
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def _deeper_than(value: object, limit: int) -> bool:
    pending: list[tuple[object, int]] = [(value, 1)]
    while pending:
        item, depth = pending.pop()
        if isinstance(item, dict | list):
            if depth > limit:
                return True
            children = item.values() if isinstance(item, dict) else item
            pending.extend((child, depth + 1) for child in children)
    return False


def _holds_lone_surrogate(value: object) -> bool:
    pending = [value]
    while pending:
        item = pending.pop()
        if isinstance(item, str):
            if not item.isascii():
                try:
                    item.encode("utf-8")
                except UnicodeEncodeError:
                    return True
        elif isinstance(item, dict):
            pending.extend(item)
            pending.extend(item.values())
        elif isinstance(item, list):
            pending.extend(item)
    return False


def _unfolded(message: dict[str, object], folded: dict[str, str], where: str) -> None:
    if message.keys() <= _USUAL_KEYS:
        return  # the common case, decided in C: only fields read, or keys that fold to none
    for key in message:
        if key in folded:
            continue  # the field itself (a one-word name in lower case is its own fold)
        field = folded.get(_fold(key))
        if field is not None and field != key:
            raise Ambiguous(
                f"the {where} key {key[:40]!r} differs from {field!r} only in case or "
                "underscores; some servers read them alike"
            )


def _request_id(message: dict[str, object]) -> object:
    value = message.get("id")
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool) and abs(value) <= _SAFE_INTEGER:
        return value
    raise Ambiguous("the JSON-RPC id must be a string or an integer of at most 2^53 - 1")


def read_request(
    body: bytes, method_header: bytes | None = None, name_header: bytes | None = None
) -> McpRequest | None:
    """The request in `body`, or None for a JSON-RPC response (a client's answer to the server);
    a Refusal for anything else."""
    message = parse_request(body)
    if isinstance(message, list):
        # Batches (2025-03-26 only) would need every member authorized; refused instead.
        raise Ambiguous("JSON-RPC batches are not accepted when tool-level authorization is on")
    if not isinstance(message, dict):
        raise Ambiguous("the body is not a JSON-RPC message (a JSON object)")
    _unfolded(message, _FOLDED_TOP, "message")
    request_id = _request_id(message)
    if "method" not in message:
        if "result" in message or "error" in message:
            return None
        raise Ambiguous("the JSON-RPC message has neither a method nor a result or error")
    method = message["method"]
    if not isinstance(method, str) or "\x00" in method:
        # A method with a NUL is another method to a backend reading strings up to one.
        raise Ambiguous("the JSON-RPC method must be a string without NUL characters")
    if method not in _FOLDED_METHODS:
        canonical = _FOLDED_METHODS.get(method.strip().casefold())
        if canonical is not None:
            why = f"the method {method[:40]!r} is written differently from {canonical!r}"
            raise Ambiguous(why)
    if method_header is not None and method_header.decode("latin-1") != method:
        raise HeaderMismatch(
            f"Mcp-Method {method_header.decode('latin-1')!r} does not match "
            f"the body's method {method!r}"
        )
    params = message.get("params")
    if isinstance(params, dict):
        _unfolded(params, _FOLDED_PARAMS, "params")
    if method == COMPLETION:
        return _completion(request_id, params)
    if method == LISTEN:
        return McpRequest(request_id, method, subscribed=_subscribed(params))
    guarded = ITEMS.get(method)
    if guarded is None:
        return McpRequest(request_id, method)
    name = params.get(guarded[1]) if isinstance(params, dict) else None
    if not isinstance(name, str):
        name = None
    # A name outside printable ASCII travels base64-wrapped; latin-1 keeps the bytes as sent.
    if name_header is not None and decode_name(name_header.decode("latin-1")) != name:
        raise HeaderMismatch(
            f"Mcp-Name {name_header.decode('latin-1')[:200]!r} does not "
            f"match the body's {guarded[1]} {name!r}"
        )
    return McpRequest(request_id, method, guarded[0], name)


def _subscribed(params: object) -> tuple[str, ...]:
    """The resource URIs a listen request subscribes to; Ambiguous when they cannot be read
    exactly (a backend might find URIs where the gateway found none)."""
    outer, inner = _SUBSCRIPTIONS
    if not isinstance(params, dict) or outer not in params:
        _folded_away(params, outer)
        return ()
    notifications = params[outer]
    if not isinstance(notifications, dict):
        raise Ambiguous(f"params.{outer} of {LISTEN} must be an object")
    _folded_away(notifications, inner)
    uris = notifications.get(inner, [])
    if not isinstance(uris, list) or not all(isinstance(uri, str) for uri in uris):
        raise Ambiguous(f"params.{outer}.{inner} of {LISTEN} must be a list of strings")
    return tuple(uris)


def _folded_away(holder: object, field: str) -> None:
    """Ambiguous when `holder` has a key equal to `field` but for case or underscores."""
    if isinstance(holder, dict):
        _unfolded(holder, {_fold(field): field}, "params")


def _completion(request_id: object, params: object) -> McpRequest:
    """The prompt or resource a completion request is about (a reference that names neither
    cannot be authorized: its name is None, and None is never allowed)."""
    ref = params.get("ref") if isinstance(params, dict) else None
    if not isinstance(ref, dict):
        return McpRequest(request_id, COMPLETION, "prompt", None)
    _unfolded(ref, _FOLDED_REF, "ref")
    kind, field = REFERENCES.get(str(ref.get("type")), ("prompt", "name"))
    name = ref.get(field) if ref.get("type") in REFERENCES else None
    return McpRequest(request_id, COMPLETION, kind, name if isinstance(name, str) else None)


def filter_result(message: object, method: str | None, allowed: Callable[[str, str], bool]) -> bool:
    """Drop the items of a list result that `allowed(kind, name)` refuses; True if any were.
    `method` None: the answer's request is unknown (a resumed stream), so every list field a
    result carries is filtered. A batch is filtered member by member."""
    if isinstance(message, list):
        results = [filter_result(m, method, allowed) for m in message]
        return any(results)
    if not isinstance(message, dict):
        return False
    result = message.get("result")
    if not isinstance(result, dict):
        return False
    shapes = LISTS.values() if method is None else [LISTS[method]] if method in LISTS else []
    removed = False
    for field, kind, key in shapes:
        items = result.get(field)
        if not isinstance(items, list):
            continue
        # An item without a usable name cannot be authorized, so it is not shown (fail closed).
        kept = [
            item
            for item in items
            if isinstance(item, dict)
            and isinstance(item.get(key), str)
            and allowed(kind, item[key])
        ]
        result[field] = kept
        removed = removed or len(kept) != len(items)
    return removed


def hidden_update(message: object, allowed: Callable[[str, str], bool]) -> bool:
    """Whether `message` is an update of a resource the caller may not read (or of none it
    could be judged by): a subscription made before the rules changed, or a server that
    sends updates unasked, tells nothing of a denied resource."""
    if not isinstance(message, dict) or message.get("method") != UPDATED:
        return False
    params = message.get("params")
    uri = params.get("uri") if isinstance(params, dict) else None
    return not isinstance(uri, str) or not allowed("resource", uri)


def item_variables(kind: str, name: str, targets: tuple[str, ...]) -> dict[str, object]:
    """What CEL sees as `mcp` for an item: `mcp.<kind>.<name|uri>` as the client names it, and
    `mcp.target`, the name of the target it belongs to (a backend's only target; with several,
    the one its name or URI carries; absent when it names none, so a rule on it fails)."""
    variables: dict[str, object] = {kind: {_NAME_FIELDS[kind]: name}}
    if len(targets) == 1:
        variables["target"] = targets[0]
    elif targets:
        target = target_of(kind, name, targets)
        if target is not None:
            variables["target"] = target
    return variables


_NAME_FIELDS = {kind: field for kind, field in ITEMS.values()}


def denied(request: McpRequest) -> dict[str, object]:
    """The JSON-RPC error for a call to an item the caller may not use."""
    return error(request.id, INVALID_PARAMS, f"Unknown {request.kind}: {request.name}")
