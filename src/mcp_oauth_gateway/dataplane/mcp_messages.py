"""Reading MCP JSON-RPC messages for tool-level authorization: which item a request names, and
which items a list result carries. Pure functions; the pipeline stage does the I/O.

A denied call is answered as if the item did not exist (JSON-RPC -32602, "Unknown tool: X",
the same answer agentgateway gives), so a caller learns nothing about items it may not use."""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass

# method -> (kind as CEL sees it: mcp.<kind>.…, the params field naming the item)
GUARDED: dict[str, tuple[str, str]] = {
    "tools/call": ("tool", "name"),
    "prompts/get": ("prompt", "name"),
    "resources/read": ("resource", "uri"),
}
# list method -> (result field holding the items, kind, the item field naming it)
LISTS: dict[str, tuple[str, str, str]] = {
    "tools/list": ("tools", "tool", "name"),
    "prompts/list": ("prompts", "prompt", "name"),
    "resources/list": ("resources", "resource", "uri"),
    "resources/templates/list": ("resourceTemplates", "resource", "uriTemplate"),
}
INVALID_PARAMS = -32602
INVALID_REQUEST = -32600
HEADER_MISMATCH = -32020  # 2026-07-28: Mcp-Method/Mcp-Name must equal the body


@dataclass(frozen=True)
class McpRequest:
    """The parts of one JSON-RPC request that authorization looks at."""

    id: object
    method: str
    kind: str | None = None  # "tool", "prompt" or "resource" for a guarded method
    name: str | None = None


class HeaderMismatch(ValueError):
    """`Mcp-Method`/`Mcp-Name` disagree with the body (answered 400, -32020)."""


class Ambiguous(ValueError):
    """A body the gateway might read differently from the backend (answered 400, -32600)."""


def _no_duplicates(pairs: list[tuple[str, object]]) -> dict[str, object]:
    # With duplicate keys, which one wins is parser-dependent: the gateway could authorize one
    # tool name and the backend call another.
    unique = dict(pairs)
    if len(unique) != len(pairs):
        raise Ambiguous("the JSON body repeats a key")
    return unique


# Built once: `json.loads(body, object_pairs_hook=...)` would build a decoder per call, which
# cost more than the parse itself.
_DECODER = json.JSONDecoder(object_pairs_hook=_no_duplicates)


def _parse(body: bytes) -> object:
    """`json.loads(body)` (the same encoding detection), refusing repeated keys."""
    return _DECODER.decode(body.decode(json.detect_encoding(body), "surrogatepass"))


def read_request(
    body: bytes, method_header: bytes | None = None, name_header: bytes | None = None
) -> McpRequest | None:
    """The request in `body`, or None when it is not a JSON-RPC request object."""
    try:
        message = _parse(body)
    except Ambiguous:
        raise
    except ValueError:
        return None
    if isinstance(message, list):
        # Batches (2025-03-26 only) would need every member authorized; refused instead.
        raise Ambiguous("JSON-RPC batches are not accepted when tool-level authorization is on")
    if not isinstance(message, dict) or not isinstance(message.get("method"), str):
        return None
    method = message["method"]
    if method_header is not None and method_header.decode("latin-1") != method:
        raise HeaderMismatch(
            f"Mcp-Method {method_header.decode('latin-1')!r} does not match "
            f"the body's method {method!r}"
        )
    guarded = GUARDED.get(method)
    if guarded is None:
        return McpRequest(message.get("id"), method)
    params = message.get("params")
    name = params.get(guarded[1]) if isinstance(params, dict) else None
    if not isinstance(name, str):
        name = None
    if name_header is not None and name_header.decode("utf-8", "replace") != name:
        raise HeaderMismatch(
            f"Mcp-Name {name_header.decode('utf-8', 'replace')!r} does not "
            f"match the body's {guarded[1]} {name!r}"
        )
    return McpRequest(message.get("id"), method, guarded[0], name)


def filter_result(
    message: dict[str, object], method: str, allowed: Callable[[str, str], bool]
) -> bool:
    """Drop the items of a list result that `allowed(kind, name)` refuses; True if any were."""
    shape = LISTS.get(method)
    result = message.get("result")
    if shape is None or not isinstance(result, dict):
        return False
    field, kind, key = shape
    items = result.get(field)
    if not isinstance(items, list):
        return False
    # An item without a usable name cannot be authorized, so it is not shown (fail closed).
    kept = [
        item
        for item in items
        if isinstance(item, dict) and isinstance(item.get(key), str) and allowed(kind, item[key])
    ]
    result[field] = kept
    return len(kept) != len(items)


def denied(request: McpRequest) -> dict[str, object]:
    """The JSON-RPC error for a call to an item the caller may not use."""
    return {
        "jsonrpc": "2.0",
        "id": request.id,
        "error": {"code": INVALID_PARAMS, "message": f"Unknown {request.kind}: {request.name}"},
    }
