"""What the connect pages read of and write to the browser: parameters (each at most once),
the cookie that ties a flow to the browser that started it, and the pages themselves."""

from __future__ import annotations

import base64
import binascii
import hashlib
import hmac
import secrets
import time
from html import escape
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl

import orjson

from ..asgi import Headers, Scope, Send, header, request_origin
from ..gateway_cookies import CONNECT_COOKIE
from ..html_pages import html, send_page
from ..usertokens.keys import SealError, TokenKeys

FLOW_LIFETIME = 15 * 60


class PageError(Exception):
    """A page's refusal: its status, a title, and what the user should do."""

    def __init__(self, status: int, title: str, text: str):
        super().__init__(text)
        self.status = status
        self.title = title
        self.text = text


def params_of(text: str) -> dict[str, str]:
    """Query or form parameters; a repeated one is refused, never resolved."""
    pairs = parse_qsl(text, keep_blank_values=True)
    params = dict(pairs)
    if len(params) != len(pairs):
        raise PageError(400, "Bad link", "a parameter appears more than once in this link")
    return params


def query(scope: Scope) -> dict[str, str]:
    """The query string's parameters."""
    return params_of(scope.get("query_string", b"").decode("latin-1"))


def cookie_values(scope: Scope, name: str) -> list[str]:
    """Every value the browser sent for cookie `name` (one per path it was set for)."""
    values = []
    for name_, raw in scope["headers"]:
        if name_ != b"cookie":
            continue
        jar: SimpleCookie = SimpleCookie()
        for pair in raw.decode("latin-1").split(";"):
            try:
                jar.load(pair)
            except CookieError:
                continue
            morsel = jar.get(name)
            if morsel is not None:
                values.append(morsel.value)
            jar.clear()
    return values


def digest(value: str) -> str:
    """What the store keeps of a browser's flow cookie: never the value itself."""
    return hashlib.sha256(value.encode()).hexdigest()


def holds(scope: Scope, name: str, expected: object) -> bool:
    """Whether the browser holds the cookie whose digest the flow kept."""
    if not isinstance(expected, str):
        return False
    return any(hmac.compare_digest(digest(v), expected) for v in cookie_values(scope, name))


_FLOW_AAD = b"mcp-oauth-gateway/connect-flow/v1"


def sealed_flow(keys: TokenKeys, flow: dict[str, object]) -> str:
    """A flow kept in the browser's cookie, sealed: the gateway keeps nothing for a browser
    that has not signed in (anyone may open the pages)."""
    kept = {**flow, "nonce": secrets.token_urlsafe(16), "exp": time.time() + FLOW_LIFETIME}
    return base64.urlsafe_b64encode(keys.seal(orjson.dumps(kept), _FLOW_AAD)).decode("ascii")


def cookie_flow(scope: Scope, keys: TokenKeys, state: str) -> tuple[dict[str, object], str] | None:
    """The unexpired flow of `state` this browser's cookie holds, and the cookie's value."""
    for value in cookie_values(scope, CONNECT_COOKIE)[:8]:
        try:
            flow = orjson.loads(keys.open(base64.urlsafe_b64decode(value.encode()), _FLOW_AAD))
        except (SealError, ValueError, binascii.Error):
            continue
        if not isinstance(flow, dict) or not isinstance(flow.get("exp"), (int, float)):
            continue
        if flow.get("state") == state and flow["exp"] > time.time():
            return flow, value
    return None


def new_flow_cookie(
    scope: Scope, path: str, name: str = CONNECT_COOKIE, value: str | None = None
) -> tuple[str, bytes]:
    """A flow cookie (fresh, unless `value` is given): its value and the Set-Cookie value."""
    value = value if value is not None else secrets.token_urlsafe(24)
    secure = "; Secure" if request_origin(scope).startswith("https:") else ""
    cookie = f"{name}={value}; Path={path}; Max-Age={FLOW_LIFETIME}; HttpOnly; SameSite=Lax{secure}"
    return value, cookie.encode("latin-1")


def wants_html(scope: Scope) -> bool:
    """Whether the client asked for a page (browsers do); programs get JSON errors."""
    return b"text/html" in (header(scope, b"accept") or b"")


async def send_message_page(
    send: Send, status: int, title: str, text: str, headers: Headers | None = None
) -> None:
    """A page saying one thing."""
    body = html(escape(title), f"<h1>{escape(title)}</h1><p>{escape(text)}</p>")
    await send_page(send, status, body, headers=headers)
