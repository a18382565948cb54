"""The broker's consent page: names the client and where it will send the user back."""

from __future__ import annotations

from html import escape
from urllib.parse import urlsplit

from ..dataplane.asgi import Send
from .clients import BrokerClient

_STYLE = ("body{font-family:system-ui,sans-serif;max-width:30rem;margin:4rem auto;padding:0 1rem}"
          "button{padding:.6rem 1.2rem;margin-right:.5rem;font-size:1rem}"
          ".host{font-family:monospace;background:#eee;padding:0 .2rem}")
_SECURITY = [
    (b"content-type", b"text/html; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-frame-options", b"DENY"),
    (b"referrer-policy", b"no-referrer"),
]


def _policy(provider_origin: str | None, client_origin: str | None) -> bytes:
    # form-action also governs where the form's redirect may go: the provider (allow) and the
    # client (deny), nowhere else.
    targets = " ".join(o for o in ("'self'", provider_origin, client_origin) if o)
    return (f"default-src 'none'; style-src 'unsafe-inline'; form-action {targets}; "
            "frame-ancestors 'none'").encode()


def _origin(url: str | None) -> str | None:
    if not url:
        return None
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}" if parts.scheme and parts.netloc else None


async def send_consent(send: Send, action: str, request_id: str, client: BrokerClient,
                       redirect_uri: str, scopes: list[str], cookie: str,
                       provider_authorize: str | None) -> None:
    """Ask the user whether this client may sign in through the gateway."""
    host = urlsplit(redirect_uri).netloc or redirect_uri
    origin = (f"<p>Client metadata published at <span class=host>"
              f"{escape(urlsplit(client.client_id).netloc)}</span>.</p>"
              if client.kind == "cimd" else
              "<p>This client registered itself with the gateway.</p>")
    items = "".join(f"<li>{escape(s)}</li>" for s in scopes) or "<li>(no scopes)</li>"
    body = (
        f"<!doctype html><html><head><meta charset=utf-8><title>Allow {escape(client.name)}?"
        f"</title><style>{_STYLE}</style></head><body>"
        f"<h1>Allow <b>{escape(client.name)}</b> to use this MCP server?</h1>"
        f"{origin}<p>After you sign in, you will be sent back to "
        f"<span class=host>{escape(host)}</span>.</p><p>It asks for:</p><ul>{items}</ul>"
        f'<form method="post" action="{escape(action)}">'
        f'<input type="hidden" name="request" value="{escape(request_id)}"/>'
        '<button type="submit" name="decision" value="allow">Allow</button>'
        '<button type="submit" name="decision" value="deny">Deny</button>'
        "</form><p><small>Only allow clients you started yourself.</small></p></body></html>"
    ).encode()
    await send({"type": "http.response.start", "status": 200,
                "headers": [*_SECURITY, (b"content-length", str(len(body)).encode()),
                            (b"content-security-policy",
                             _policy(_origin(provider_authorize), _origin(redirect_uri))),
                            (b"set-cookie", cookie.encode())]})
    await send({"type": "http.response.body", "body": body})
