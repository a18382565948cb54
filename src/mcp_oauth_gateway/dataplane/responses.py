"""JSON responses written straight to ASGI `send`."""

from __future__ import annotations

import orjson

from .asgi import Headers, Send

JSON = b"application/json"


async def send_json(send: Send, status: int, payload: object, headers: Headers = ()) -> None:
    """Send a complete JSON response."""
    body = orjson.dumps(payload)
    await send({
        "type": "http.response.start",
        "status": status,
        "headers": [(b"content-type", JSON), (b"content-length", str(len(body)).encode()),
                    (b"cache-control", b"no-store"), *headers],
    })
    await send({"type": "http.response.body", "body": body})


async def send_error(
    send: Send, status: int, error: str, description: str, headers: Headers = ()
) -> None:
    """Send `{"error": …, "error_description": …}` with `status`."""
    await send_json(send, status, {"error": error, "error_description": description}, headers)
