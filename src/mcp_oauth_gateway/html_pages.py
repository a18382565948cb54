"""The gateway's own browser pages (the Broker's consent, the user-OAuth connect pages): one
look, headers that keep them out of frames, caches and other sites' referrers, text from others
shown only escaped, and the redirects that send the browser on."""

from __future__ import annotations

import unicodedata
from html import escape

from .asgi import Headers, Send

STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:30rem;margin:4rem auto;padding:0 1rem}"
    "button{padding:.6rem 1.2rem;margin-right:.5rem;font-size:1rem}"
    ".host{font-family:monospace;background:#eee;padding:0 .2rem}"
)
SECURITY = [
    (b"content-type", b"text/html; charset=utf-8"),
    (b"cache-control", b"no-store"),
    (b"x-frame-options", b"DENY"),
    # `same-origin`, not `no-referrer`: with no-referrer browsers post the consent form with
    # `Origin: null`, and the gateway needs the real origin to refuse forms from other sites.
    # Cross-origin navigations (to the provider, back to the client) still carry no referrer.
    (b"referrer-policy", b"same-origin"),
]


_HIDDEN = frozenset({"Cc", "Cf", "Co", "Cs"})


def shown(text: str, limit: int = 100) -> str:
    """Text from a client, fit for the consent page: escaped, without control, format (bidi
    overrides, zero-width) or private-use characters that could make one name look like
    another, and bounded in length."""
    kept = " ".join(
        "".join(
            " " if c.isspace() else c
            for c in text
            if c.isspace() or unicodedata.category(c) not in _HIDDEN
        ).split()
    )
    return escape(kept[:limit] + ("…" if len(kept) > limit else "")) or "(unnamed client)"


def html(title: str, content: str) -> bytes:
    """A page; both arguments are HTML already (anything from others went through `shown` or
    `escape`)."""
    return (
        f"<!doctype html><html><head><meta charset=utf-8><title>{title}</title>"
        f"<style>{STYLE}</style></head><body>{content}</body></html>"
    ).encode()


# Nothing but inline style: no script, no frame, no form leaves the page unless it says so.
NO_SCRIPT = b"default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'"


async def send_page(
    send: Send, status: int, body: bytes, csp: bytes = NO_SCRIPT, headers: Headers | None = None
) -> None:
    """An HTML page, with the security headers every gateway page has."""
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                *SECURITY,
                (b"content-length", str(len(body)).encode()),
                (b"content-security-policy", csp),
                *(headers or ()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


async def send_redirect(send: Send, location: str, headers: Headers | None = None) -> None:
    """302 to `location` (the provider's sign-in, or back to the client), never cached."""
    await send(
        {
            "type": "http.response.start",
            "status": 302,
            "headers": [
                (b"location", location.encode()),
                (b"content-length", b"0"),
                (b"cache-control", b"no-store"),
                *(headers or ()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b""})
