"""A headless browser for sign-in flows that cross several sites: it follows every redirect, keeps
each site's cookies, and fills in the forms it meets as a person would (the login form of
whichever provider the page belongs to, consent and confirmation pages), until a page it has
nothing to do on, or a redirect to `stop_at`.

`drive_connect(url, route_login, upstream_login)` opens a gateway's connect URL (a URL-mode
elicitation): the route's identity provider's sign-in, the gateway's pages, the upstream
authorization server's sign-in and consent, back to the gateway's callback and its last page.
Nothing here knows the gateway's pages: any form whose fields it recognizes is submitted."""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from email.utils import parsedate_to_datetime
from html.parser import HTMLParser
from http.cookies import CookieError, SimpleCookie
from urllib.parse import parse_qsl, urlencode, urljoin, urlsplit

import httpx

# The button a person presses to say yes or no, by its name, value or text, most specific first
# (Keycloak's consent sends accept=Yes, its login form login=Sign In; the upstream AS's
# consent accept=yes). A form with none of these, and no login to type, is not submitted: a
# last page's "disconnect" form stays untouched.
YES_WORDS = (
    "accept",
    "allow",
    "approve",
    "authorize",
    "confirm",
    "consent",
    "connect",
    "continue",
    "login",
    "sign in",
    "yes",
)
NO_WORDS = ("cancel", "deny", "reject", "decline", "abort", "no")
USER_FIELDS = ("username", "login", "user", "email")


class Jar:
    """A browser's cookies as browsers keep them: by host and path, not port (every site of the
    tests is on 127.0.0.1: the gateway's, the route provider's and the upstream AS's cookies
    meet as they do in Chromium), Secure ones sent on http loopback too (a secure context to
    browsers), expired ones dropped."""

    def __init__(self) -> None:
        # (host, path, name) -> (value, expires at or None)
        self.cookies: dict[tuple[str, str, str], tuple[str, float | None]] = {}

    def keep(self, response: httpx.Response) -> None:
        """Take the response's Set-Cookie headers."""
        host = response.url.host
        default_path = response.url.path.rsplit("/", 1)[0] or "/"
        for line in response.headers.get_list("set-cookie"):
            parsed = SimpleCookie()
            try:
                parsed.load(_known_attributes(line))
            except CookieError as error:
                raise AssertionError(
                    f"{response.url} set a cookie no browser takes: {line}"
                ) from error
            for name, morsel in parsed.items():
                key = (host, morsel["path"] or default_path, name)
                expires = _expiry(morsel["max-age"], morsel["expires"])
                if expires is not None and expires <= time.time():
                    self.cookies.pop(key, None)
                else:
                    self.cookies[key] = (morsel.value, expires)

    def header(self, url: str) -> dict[str, str]:
        """The Cookie header a browser sends to `url` (longest path first)."""
        split = urlsplit(url)
        path, now = split.path or "/", time.time()
        sent = sorted(
            (
                (cookie_path, name, value)
                for (host, cookie_path, name), (value, expires) in self.cookies.items()
                if host == split.hostname
                and (expires is None or expires > now)
                and (path == cookie_path or path.startswith(cookie_path.rstrip("/") + "/"))
            ),
            key=lambda item: -len(item[0]),
        )
        return {"Cookie": "; ".join(f"{n}={v}" for _, n, v in sent)} if sent else {}


_ATTRIBUTES = ("path", "expires", "max-age", "domain", "secure", "httponly", "samesite")


def _known_attributes(line: str) -> str:
    """A Set-Cookie line with only the attributes the standard library parses (newer ones,
    such as Partitioned, change nothing here)."""
    first, *attributes = line.split(";")
    kept = [a for a in attributes if a.split("=", 1)[0].strip().lower() in _ATTRIBUTES]
    return ";".join([first, *kept])


def _expiry(max_age: str, expires: str) -> float | None:
    """When a cookie ends (Max-Age wins over Expires); None for a session cookie."""
    if max_age:
        return time.time() + int(max_age)
    if expires:
        return parsedate_to_datetime(expires).timestamp()
    return None


@dataclass(frozen=True)
class Login:
    """Who signs in on the pages under `at` (a URL prefix: the provider's origin or issuer)."""

    username: str
    password: str
    at: str


@dataclass
class Page:
    """Where the browser stopped: the last page (or the redirect to `stop_at`, status 0)."""

    status: int
    url: str
    text: str
    met: list[str] = field(default_factory=list)  # each form filled in: "METHOD url"

    @property
    def query(self) -> dict[str, str]:
        """The query of `url` (the parameters of a callback it stopped at)."""
        return dict(parse_qsl(urlsplit(self.url).query))


class _Form(HTMLParser):
    """The first <form> of a page: method, action, and its inputs and buttons."""

    def __init__(self) -> None:
        super().__init__()
        self.method = "get"
        self.action: str | None = None
        self.fields: list[dict[str, str]] = []
        self._inside = False
        self._done = False
        self._button: dict[str, str] | None = None

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "form" and not self._done:
            self._inside = True
            self.action = values.get("action", "")
            self.method = (values.get("method") or "get").lower()
        elif tag in ("input", "button") and self._inside:
            values.setdefault("type", "text" if tag == "input" else "submit")
            values["text"] = values.get("value", "")
            self.fields.append(values)
            self._button = values if tag == "button" else None

    def handle_data(self, data: str) -> None:
        if self._button is not None:
            self._button["text"] += data

    def handle_endtag(self, tag: str) -> None:
        if tag == "button":
            self._button = None
        if tag == "form" and self._inside:
            self._inside, self._done = False, True


@dataclass(frozen=True)
class Filled:
    """A form as a person submits it, and whether they typed a login into it."""

    method: str
    action: str
    fields: dict[str, str]
    typed_login: bool


def fill(page: str, login: Login | None, say_yes: bool = True) -> Filled:
    """The page's first form as a person submits it: hidden fields as they are, the user name
    and password of `login`, and the button that says yes (or no). LookupError when there is
    nothing a person would submit."""
    parser = _Form()
    parser.feed(page)
    if parser.action is None:
        raise LookupError("no form on the page")
    form: dict[str, str] = {}
    buttons: list[dict[str, str]] = []
    asks_login = False
    for item in parser.fields:
        name, kind = item.get("name", ""), item["type"].lower()
        if kind == "submit":
            buttons.append(item)
        elif not name:
            continue
        elif kind == "hidden":
            form[name] = item.get("value", "")
        elif kind == "password" or (kind in ("text", "email") and name.lower() in USER_FIELDS):
            if login is None:
                raise LookupError(f"the form asks for {name} and no login is given for this page")
            form[name] = login.password if kind == "password" else login.username
            asks_login = True
    button = _button(buttons, YES_WORDS if say_yes else NO_WORDS)
    if button is not None and button.get("name"):
        form[button["name"]] = button.get("value", "")
    if "request" in form and "decision" not in form:  # the gateway's Broker consent page
        form["decision"] = "allow" if say_yes else "deny"
    elif button is None and not asks_login:
        raise LookupError("the form asks nothing a person would answer")
    return Filled(parser.method, parser.action, form, asks_login)


def _button(buttons: list[dict[str, str]], words: tuple[str, ...]) -> dict[str, str] | None:
    """The first button, by the order of `words`, whose name, value or text says one of them."""
    for word in words:
        for button in buttons:
            said = " ".join(button.get(k, "") for k in ("name", "value", "text")).lower()
            if word in said.split() or word in (button.get("name", "").lower(),):
                return button
            if " " in word and word in said:
                return button
    return None


def _under(url: str, at: str) -> bool:
    """Whether `url` is `at` or a page below it. Not a bare string prefix: the login for
    `http://127.0.0.1:1` is no login for `http://127.0.0.1:13967/`."""
    base = at.rstrip("/")
    return url in (at, base) or url.startswith((f"{base}/", f"{base}?"))


def login_for(url: str, logins: list[Login]) -> Login | None:
    """The login whose pages `url` is under (the longest prefix wins)."""
    matching = [login for login in logins if _under(url, login.at)]
    return max(matching, key=lambda login: len(login.at)) if matching else None


def browse(
    url: str,
    logins: list[Login],
    stop_at: str | None = None,
    jar: Jar | None = None,
    say_yes: bool = True,
    steps: int = 30,
) -> Page:
    """Open `url` as a browser would and go on until there is nothing left to do."""
    jar = Jar() if jar is None else jar
    met: list[str] = []
    # (page, action, field names): a provider may show its login and consent forms at one URL.
    submitted: set[tuple[str, str, frozenset[str]]] = set()
    typed: set[Login] = set()
    with httpx.Client(follow_redirects=False, timeout=30) as browser:
        response: httpx.Response | None = None
        for _ in range(steps):
            if stop_at is not None and url.startswith(stop_at):
                return Page(0, url, "", met)
            if response is None:
                browser.cookies.clear()  # the jar sends cookies (Secure ones on http too)
                response = browser.get(url, headers=jar.header(url))
                jar.keep(response)
            if response.is_redirect:
                url, response = urljoin(url, response.headers["location"]), None
                continue
            login = login_for(url, logins)
            try:
                filled = fill(response.text, login, say_yes)
            except LookupError:
                return Page(response.status_code, url, response.text, met)
            target = urljoin(url, filled.action)
            form = (url, target, frozenset(filled.fields))
            if form in submitted or (filled.typed_login and login in typed):
                # The same form again, or a login typed once asked again: it was refused.
                return Page(response.status_code, url, response.text, met)
            submitted.add(form)
            if filled.typed_login and login is not None:
                typed.add(login)
            met.append(f"{filled.method.upper()} {target}")
            response = _submit(browser, jar, url, filled.method, target, filled.fields)
            url = str(response.url)
        raise AssertionError(f"the browser was still going after {steps} pages, at {url}")


def _submit(
    browser: httpx.Client, jar: Jar, page: str, method: str, target: str, form: dict[str, str]
) -> httpx.Response:
    """Send a form as a browser does: a same-origin POST carries the page's Origin."""
    browser.cookies.clear()
    if method == "get":
        split = urlsplit(target)
        target = split._replace(query=urlencode(form)).geturl()
        response = browser.get(target, headers=jar.header(target))
    else:
        origin = "{0.scheme}://{0.netloc}".format(urlsplit(page))
        headers = {"Origin": origin} if target.startswith(origin + "/") else {}
        response = browser.post(target, data=form, headers={**headers, **jar.header(target)})
    jar.keep(response)
    return response


def drive_connect(
    url: str, route_login: Login, upstream_login: Login, jar: Jar | None = None
) -> str:
    """Open a gateway connect URL in a browser and sign in wherever asked: the text of the page
    the flow ends on, which must be a 200."""
    page = browse(url, [route_login, upstream_login], jar=jar)
    assert page.status == 200, (
        f"the connect flow ended at {page.url} with {page.status}: {page.text}"
    )
    return page.text


async def drive_connect_async(
    url: str, route_login: Login, upstream_login: Login, jar: Jar | None = None
) -> str:
    """`drive_connect` off the event loop (for an MCP client's elicitation callback)."""
    return await asyncio.to_thread(drive_connect, url, route_login, upstream_login, jar)
