"""A test client's Broker-mode OAuth calls over plain HTTP: register, authorize URL, redeem; and
a server of Client ID Metadata Documents on loopback (`metadata_documents`)."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import urlencode

import httpx

from support import free_port

CALLBACK = "http://127.0.0.1:47001/cb"
VERIFIER = "v" * 64


def s256(verifier: str) -> str:
    import base64
    import hashlib

    return (
        base64.urlsafe_b64encode(hashlib.sha256(verifier.encode()).digest()).rstrip(b"=").decode()
    )


def register(stack, redirect: str = CALLBACK, headers: dict[str, str] | None = None) -> str:
    response = httpx.post(
        f"{stack.gateway}/.well-known/oauth-authorization-server/mcp/client-registration",
        json={"client_name": "Attack Lab", "redirect_uris": [redirect]},
        headers=headers,
    )
    assert response.status_code == 201, response.text
    body = response.json()
    assert body["redirect_uris"] == [redirect]
    assert body["token_endpoint_auth_method"] == "none"
    return body["client_id"]


def authorize_url(stack, client_id: str, redirect: str = CALLBACK, **extra: str) -> str:
    params = {
        "response_type": "code",
        "client_id": client_id,
        "redirect_uri": redirect,
        "state": "client-state-1",
        "code_challenge": s256(VERIFIER),
        "code_challenge_method": "S256",
        "scope": "openid profile",
        **extra,
    }
    return f"{stack.gateway}/mcp/oauth/authorize?{urlencode(params)}"


def redeem(
    stack, client_id: str, code: str, verifier: str = VERIFIER, redirect: str = CALLBACK
) -> httpx.Response:
    return httpx.post(
        f"{stack.gateway}/mcp/oauth/token",
        data={
            "grant_type": "authorization_code",
            "code": code,
            "client_id": client_id,
            "redirect_uri": redirect,
            "code_verifier": verifier,
        },
    )


@contextmanager
def metadata_documents() -> Iterator[tuple[str, dict[str, dict]]]:
    """(base URL, documents by path) of a loopback server of client metadata documents: a
    document put under a path is served there (404 for the others), until the block ends."""
    documents: dict[str, dict] = {}

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self):
            document = documents.get(self.path)
            body = json.dumps(document).encode() if document else b"{}"
            self.send_response(200 if document else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", free_port()), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}", documents
    finally:
        server.shutdown()
        server.server_close()
