"""The JSON-RPC 2.0 messages the federation stage reads and writes itself."""

from __future__ import annotations

import json

import orjson

from ...asgi import JSON, Headers, Send

PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
INTERNAL_ERROR = -32603


class Malformed(ValueError):
    """A client message the stage cannot act on; `code` is its JSON-RPC error code."""

    def __init__(self, code: int, why: str):
        super().__init__(why)
        self.code = code


def loads(data: bytes) -> object:
    """A target's JSON read as clients read it: lone surrogates (which JavaScript servers
    write) kept, invalid UTF-8 replaced; ValueError when it is not JSON."""
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        pass
    try:
        return json.loads(data.decode("utf-8", "replace").removeprefix("\ufeff"))
    except RecursionError:
        raise ValueError("the JSON nests too deep") from None


def dumps(message: object) -> bytes:
    """JSON for a message `loads` read (lone surrogates written as escapes)."""
    try:
        return orjson.dumps(message)
    except TypeError:
        return json.dumps(message, separators=(",", ":")).encode("ascii")


async def reply(send: Send, status: int, message: object, headers: Headers | None = None) -> None:
    """A complete JSON answer."""
    body = dumps(message)
    head = [(b"content-type", JSON), (b"content-length", str(len(body)).encode())]
    head += headers or []
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})


def read(body: bytes) -> dict[str, object]:
    """One JSON-RPC message (an object); Malformed for anything else, batches included."""
    try:
        message = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        raise Malformed(PARSE_ERROR, f"the body is not JSON: {exc}") from None
    if isinstance(message, list):
        raise Malformed(INVALID_REQUEST, "JSON-RPC batches are not accepted by a federated route")
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


def error(request_id: object, code: int, text: str) -> dict[str, object]:
    """A JSON-RPC error response."""
    return {"jsonrpc": "2.0", "id": request_id, "error": {"code": code, "message": text}}


def request(request_id: object, method: str, params: dict[str, object] | None) -> bytes:
    """A JSON-RPC request (a notification when `request_id` is None), as bytes to send."""
    message: dict[str, object] = {"jsonrpc": "2.0", "method": method}
    if request_id is not None:
        message["id"] = request_id
    if params is not None:
        message["params"] = params
    return orjson.dumps(message)
