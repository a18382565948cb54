"""The dev identity provider's HTML pages: login, consent, errors. Plain forms, no scripts."""

from __future__ import annotations

from html import escape

from starlette.responses import HTMLResponse

_STYLE = (
    "body{font-family:system-ui,sans-serif;max-width:26rem;margin:4rem auto;padding:0 1rem}"
    "input,button{display:block;width:100%;box-sizing:border-box;margin:.5rem 0;"
    "padding:.5rem;font-size:1rem}"
    ".warn{background:#fff3cd;border:1px solid #e0c36c;padding:.5rem;font-size:.85rem}"
    ".err{color:#a00}"
)
_BANNER = (
    '<p class="warn">mcp-oauth-gateway dev identity provider: for development and tests '
    "only. Never use it to protect real data.</p>"
)


def _page(title: str, body: str, status: int = 200) -> HTMLResponse:
    return HTMLResponse(
        f"<!doctype html><html><head><meta charset=utf-8><title>{escape(title)}</title>"
        f"<style>{_STYLE}</style></head><body>{_BANNER}<h1>{escape(title)}</h1>{body}"
        f"</body></html>",
        status_code=status,
        headers={"Cache-Control": "no-store", "X-Frame-Options": "DENY"},
    )


def login_page(
    action: str, client: str, error: str | None = None, status: int = 200
) -> HTMLResponse:
    """The sign-in form (fields `login` and `password`)."""
    message = f'<p class="err">{escape(error)}</p>' if error else ""
    return _page(
        "Sign in",
        (
            f"<p>to continue to <b>{escape(client)}</b></p>{message}"
            f'<form method="post" action="{escape(action)}">'
            '<input type="hidden" name="prompt" value="login"/>'
            '<input name="login" placeholder="Username" autocomplete="username" required '
            "autofocus/>"
            '<input name="password" type="password" placeholder="Password" '
            'autocomplete="current-password" required/>'
            '<button type="submit">Sign in</button></form>'
        ),
        status,
    )


def consent_page(action: str, client: str, scopes: list[str], redirect_host: str) -> HTMLResponse:
    """The consent page naming the client, its redirect host and the scopes."""
    items = "".join(f"<li>{escape(s)}</li>" for s in scopes) or "<li>(no scopes)</li>"
    return _page(
        "Authorize access",
        (
            f"<p><b>{escape(client)}</b> (redirecting to <b>{escape(redirect_host)}</b>) asks for:"
            f"</p><ul>{items}</ul>"
            f'<form method="post" action="{escape(action)}">'
            '<input type="hidden" name="prompt" value="consent"/>'
            '<button type="submit" name="decision" value="allow">Allow</button>'
            '<button type="submit" name="decision" value="deny">Deny</button></form>'
        ),
    )


def error_page(title: str, detail: str, status: int) -> HTMLResponse:
    """An error the user can read (never a redirect to an unverified URI)."""
    return _page(title, f'<p class="err">{escape(detail)}</p>', status)
