"""Reading Broker requests: parameters (each at most once), scopes, cookies."""

from __future__ import annotations

from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl

from ..asgi import TOO_LARGE, BodyTooLarge, Receive, Scope, header, read_body
from ..oauth_scopes import scope_problem, scope_tokens
from .errors import OAuthError

MAX_FORM = 16 * 1024  # bytes of a form body
FORM_LIMIT = "of a form the Broker reads (fixed)"


def single_params(text: str) -> dict[str, str]:
    """Query or form parameters; a repeated one is refused rather than resolved (RFC 6749
    §3.1), since the gateway and the provider could pick different copies."""
    pairs = parse_qsl(text, keep_blank_values=True)
    params = dict(pairs)
    if len(params) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise OAuthError(
                    400,
                    "invalid_request",
                    f"the parameter {name[:40]!r} appears more than once; send "
                    "each parameter once (RFC 6749 §3.1)",
                )
            seen.add(name)
    return params


def query_params(scope: Scope) -> dict[str, str]:
    """The query string's parameters."""
    return single_params(scope.get("query_string", b"").decode("latin-1"))


def form_params(raw: bytes | None) -> dict[str, str]:
    """A form body's parameters."""
    return single_params((raw or b"").decode("utf-8", "replace"))


async def read_form(receive: Receive) -> dict[str, str]:
    """The request's form parameters; the one 413 (as an OAuthError) past MAX_FORM bytes."""
    return form_params(await read_limited(receive, MAX_FORM, FORM_LIMIT))


async def read_limited(receive: Receive, limit: int, setting: str) -> bytes | None:
    """The request body (None: the client left), or the one 413 as an OAuthError."""
    try:
        return await read_body(receive, limit, setting)
    except BodyTooLarge as exc:
        raise OAuthError(413, TOO_LARGE, str(exc)) from None


def scope_param(
    given: str | None,
    default: str = "",
    redirect_href: str | None = None,
    state: str | None = None,
) -> str:
    """The scope a request asks for, as the space-joined tokens the Broker shows and passes on
    (`default` when it names none); `invalid_scope` when it is not RFC 6749 §3.3 scope tokens."""
    problem = scope_problem(given or "")
    if problem is not None:
        raise OAuthError(400, "invalid_scope", problem, redirect_href=redirect_href, state=state)
    # Joined anew, never passed on as sent: the provider reads exactly the tokens the consent
    # page listed, with no doubled or trailing space for it to read its own way.
    return " ".join(scope_tokens(given or "")) or default


def cookies(scope: Scope) -> dict[str, str]:
    """The request's cookies (none when the header is malformed)."""
    raw = header(scope, b"cookie")
    if not raw:
        return {}
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw.decode("latin-1"))
    except CookieError:
        return {}
    return {name: morsel.value for name, morsel in jar.items()}
