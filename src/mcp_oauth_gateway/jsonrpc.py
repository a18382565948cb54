"""JSON-RPC 2.0 as the gateway reads and writes it for MCP: the error codes (JSON-RPC's own,
MCP's, and the one the gateway adds), a client's request read as sent, a peer's message read
and written as clients do, and the shapes of a result, an error and a request.

A leaf, like `asgi`: tool authorization (`dataplane`), federation (`proxy`) and users' upstream
tokens (`useroauth`) speak it without depending on each other. How a request is read strictly
before it is judged is tool authorization's own (`dataplane.mcp_messages`)."""

from __future__ import annotations

import json

import orjson

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603
# MCP's 2026-07-28 wire: routing headers that disagree with the body, a capability the client
# did not declare, a protocol version the server does not speak.
HEADER_MISMATCH = -32020
MISSING_CAPABILITY = -32021
UNSUPPORTED_VERSION = -32022
# MCP 2025-11-25: the client is to open a URL (a URL-mode elicitation) and try again.
URL_ELICITATION_REQUIRED = -32042
# The implementation-defined server error range of JSON-RPC 2.0: the 2026-07-28 wire retired
# -32042 and has no code for "connect first" on a method that cannot ask for input.
CONNECT_FIRST = -32050


class Malformed(ValueError):
    """A client's message that cannot be acted on; `code` is its JSON-RPC error code."""

    def __init__(self, code: int, why: str):
        super().__init__(why)
        self.code = code


class NotJson(ValueError):
    """A message that is not JSON, even read as clients read it."""


def read_message(data: bytes) -> object:
    """A peer's JSON message read as clients read it: UTF-8 (invalid bytes replaced, a BOM
    skipped, as browsers' `TextDecoder` does), lone surrogates (which JavaScript servers write)
    kept; NotJson otherwise."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    text = data.decode("utf-8", "replace").removeprefix("\ufeff")
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        raise NotJson("the message is not JSON the gateway can read") from None


def write_message(message: object) -> bytes:
    """JSON for a message `read_message` read (lone surrogates written as escapes)."""
    try:
        return orjson.dumps(message)
    except TypeError:
        return json.dumps(message, separators=(",", ":")).encode("ascii")


def read_request(body: bytes) -> dict[str, object]:
    """A client's one JSON-RPC message (an object); Malformed for anything else, batches
    included (read as sent: what tool authorization judges is read strictly, in
    `dataplane.mcp_messages`)."""
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise Malformed(PARSE_ERROR, f"the body is not JSON: {exc}") from None
    if isinstance(message, list):
        raise Malformed(
            INVALID_REQUEST, "JSON-RPC batches are not accepted here; send one message per request"
        )
    if not isinstance(message, dict) or message.get("jsonrpc") != "2.0":
        raise Malformed(INVALID_REQUEST, "the body is not a JSON-RPC 2.0 message")
    method = message.get("method")
    if "method" in message and not isinstance(method, str):
        raise Malformed(INVALID_REQUEST, "the JSON-RPC method must be a string")
    request_id = message.get("id")
    if "id" in message and not (
        isinstance(request_id, str)
        or (isinstance(request_id, int) and not isinstance(request_id, bool))
    ):
        raise Malformed(INVALID_REQUEST, "the JSON-RPC id must be a string or an integer")
    return message


def params_of(message: dict[str, object]) -> dict[str, object]:
    """The message's params object (empty when absent); Malformed when not an object."""
    params = message.get("params", {})
    if not isinstance(params, dict):
        raise Malformed(INVALID_PARAMS, "params must be an object")
    return params


def result(request_id: object, value: object) -> dict[str, object]:
    """A JSON-RPC result response."""
    return {"jsonrpc": "2.0", "id": request_id, "result": value}


def error(request_id: object, code: int, text: str, data: object = None) -> dict[str, object]:
    """A JSON-RPC error response (`data` left out when None)."""
    body: dict[str, object] = {"code": code, "message": text}
    if data is not None:
        body["data"] = data
    return {"jsonrpc": "2.0", "id": request_id, "error": body}


def request(request_id: object, method: str, params: dict[str, object] | None) -> bytes:
    """A JSON-RPC request (a notification when `request_id` is None), as bytes to send."""
    message: dict[str, object] = {"jsonrpc": "2.0", "method": method}
    if request_id is not None:
        message["id"] = request_id
    if params is not None:
        message["params"] = params
    return orjson.dumps(message)
