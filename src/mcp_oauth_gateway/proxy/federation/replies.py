"""The federation stage's complete JSON-RPC answers (written as `jsonrpc.write_message` writes
them, since they carry what targets wrote, lone surrogates included)."""

from __future__ import annotations

from ...asgi import JSON, Headers, Send
from ...jsonrpc import write_message


async def reply(send: Send, status: int, message: object, headers: Headers | None = None) -> None:
    """A complete JSON answer."""
    body = write_message(message)
    head = [(b"content-type", JSON), (b"content-length", str(len(body)).encode())]
    head += headers or []
    await send({"type": "http.response.start", "status": status, "headers": head})
    await send({"type": "http.response.body", "body": body})
