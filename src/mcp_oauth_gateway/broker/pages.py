"""The broker's browser answers: the consent page, and errors shown instead of redirecting."""

from __future__ import annotations

from html import escape

from ..asgi import Headers, Scope, Send, header, send_error
from ..html_pages import SECURITY as _SECURITY
from ..html_pages import html as _html
from ..html_pages import send_redirect, shown
from ..urls import origin_of
from .clients import BrokerClient

__all__ = ["send_consent", "send_error_page", "send_redirect", "shown"]


def _form_target(url: str | None) -> str | None:
    """A CSP source for where the form's redirect may lead: the origin, or `scheme:` for the
    private-use schemes of native clients (`cursor:`), whose URLs have no origin."""
    if not url:
        return None
    origin = origin_of(url)
    if origin is not None:
        return origin
    # Only validated URLs come here, so the scheme is a valid one.
    return f"{url.partition(':')[0]}:"


def _policy(provider_authorize: list[str | None], redirect_href: str | None) -> bytes:
    # form-action also governs where the form's redirect may go: the providers (allow) and the
    # client (deny), nowhere else.
    places = ["'self'", *(_form_target(a) for a in provider_authorize), _form_target(redirect_href)]
    targets = " ".join(dict.fromkeys(o for o in places if o))
    return (
        f"default-src 'none'; style-src 'unsafe-inline'; form-action {targets}; "
        "frame-ancestors 'none'"
    ).encode()


async def send_consent(
    send: Send,
    action: str,
    request_id: str,
    client: BrokerClient,
    redirect_href: str,
    scopes: list[str],
    cookie: str,
    provider_authorize: list[str | None],
    choices: list[tuple[int, str]] | None = None,
    resource: str | None = None,
) -> None:
    """Ask the user whether this client may sign in through the gateway to the MCP server
    `resource` (and, with several identity providers in `choices`, at which one: one Allow
    button each)."""
    origin = origin_of(redirect_href)
    host = origin.partition("://")[2] if origin else redirect_href
    published = origin_of(client.client_id) if client.kind == "cimd" else None
    where = (
        f"<p>Client metadata published at <span class=host>"
        f"{escape(published.partition('://')[2])}</span>.</p>"
        if published
        else "<p>This client registered itself with the gateway.</p>"
    )
    items = "".join(f"<li>{shown(s)}</li>" for s in scopes) or "<li>(no scopes)</li>"
    # Several MCP servers may share the gateway's host: the page names the one it is for.
    server = f"<p>MCP server: <span class=host>{escape(resource)}</span></p>" if resource else ""
    name = shown(client.name)
    body = _html(
        f"Allow {name}?",
        f"<h1>Allow <b>{name}</b> to use this MCP server?</h1>{server}"
        f"{where}<p>After you sign in, you will be sent back to "
        f"<span class=host>{escape(host)}</span>.</p><p>It asks for:</p><ul>{items}</ul>"
        f'<form method="post" action="{escape(action)}">'
        f'<input type="hidden" name="request" value="{escape(request_id)}"/>'
        f"{_allow_buttons(choices or [])}"
        '<button type="submit" name="decision" value="deny">Deny</button>'
        "</form><p><small>Only allow clients you started yourself.</small></p>",
    )
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [
                *_SECURITY,
                (b"content-length", str(len(body)).encode()),
                (b"content-security-policy", _policy(provider_authorize, redirect_href)),
                (b"set-cookie", cookie.encode()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


def _allow_buttons(choices: list[tuple[int, str]]) -> str:
    if not choices:
        return '<button type="submit" name="decision" value="allow">Allow</button>'
    return "".join(
        f'<button type="submit" name="decision" value="allow-{index}">'
        f"Allow, sign in with {escape(name)}</button>"
        for index, name in choices
    )


async def send_error_page(
    scope: Scope,
    send: Send,
    status: int,
    error: str,
    description: str,
    headers: Headers | None = None,
) -> None:
    """An OAuth error answered in place: an HTML page for browsers, JSON for programs. `headers`
    are the error's own (a 405's `Allow`), sent either way."""
    accept = header(scope, b"accept") or b""
    if b"text/html" not in accept:
        await send_error(send, status, error, description, headers)
        return
    body = _html(
        "Sign-in failed",
        f"<h1>Sign-in failed</h1><p><b>{escape(error)}</b>: "
        f"{escape(description)}</p><p>Start the sign-in again from your MCP client."
        "</p>",
    )
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                *_SECURITY,
                *(headers or ()),
                (b"content-length", str(len(body)).encode()),
                (
                    b"content-security-policy",
                    b"default-src 'none'; style-src 'unsafe-inline'; frame-ancestors 'none'",
                ),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})
