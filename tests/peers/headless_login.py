"""Complete a browser sign-in with plain HTTP: the gateway's consent page, then the identity
provider's login and consent forms (oidc-provider's, the dev IdP's and real Keycloak's), filled
in as a person would. Returns the query of the final redirect to the client's callback.

Each sign-in starts in a browser of its own unless given one (`Jar`), which then keeps its
cookies (the gateway's remembered consent, the provider's session) for the next; `met` lists the
pages whose form a sign-in filled in: "consent" for the gateway's consent page, the host of each
other one."""

from __future__ import annotations

from html.parser import HTMLParser
from urllib.parse import parse_qs, urljoin, urlsplit

import httpx


class _FirstForm(HTMLParser):
    """The first <form> of a page: its action and the fields a person would submit."""

    def __init__(self) -> None:
        super().__init__()
        self.action: str | None = None
        self.fields: list[dict[str, str]] = []
        self._inside = False
        self._done = False

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        values = {name: value or "" for name, value in attrs}
        if tag == "form" and not self._done:
            self._inside = True
            self.action = values.get("action", "")
        elif tag in ("input", "button") and self._inside:
            values.setdefault("type", "text" if tag == "input" else "submit")
            self.fields.append(values)

    def handle_endtag(self, tag: str) -> None:
        if tag == "form" and self._inside:
            self._inside, self._done = False, True


def submission(page: str, user: str, password: str, decision: str) -> tuple[str, dict[str, str]]:
    """(action, form fields) of the page's first form: hidden fields as they are, the user name
    in its text field (`login` at oidc-provider and the dev IdP, `username` at Keycloak), the
    password, and the button that says yes (Keycloak's consent page sends accept=Yes)."""
    parser = _FirstForm()
    parser.feed(page)
    if parser.action is None:
        raise RuntimeError(f"no form on the page: {page[:300]}")
    form: dict[str, str] = {}
    for field in parser.fields:
        name, kind = field.get("name"), field["type"].lower()
        if not name:
            continue
        if kind == "hidden":
            form[name] = field.get("value", "")
        elif kind == "password":
            form[name] = password
        elif kind in ("text", "email"):
            form[name] = user
        elif name == "accept":
            form[name] = field.get("value", "")
    if "request" in form:  # the gateway's consent page
        form["decision"] = decision
    return parser.action, form


class Jar:
    """A browser's cookies: every cookie sent back to the host that set it. Keycloak marks its
    cookies Secure even on http://127.0.0.1 (a secure context to browsers), which httpx's jar
    would then hold back."""

    def __init__(self) -> None:
        self.cookies: dict[str, dict[str, str]] = {}

    def keep(self, response: httpx.Response) -> None:
        host = response.url.netloc.decode()
        for line in response.headers.get_list("set-cookie"):
            name, _, value = line.split(";", 1)[0].partition("=")
            self.cookies.setdefault(host, {})[name.strip()] = value.strip()

    def header(self, url: str) -> dict[str, str]:
        pairs = self.cookies.get(urlsplit(url).netloc, {})
        return {"Cookie": "; ".join(f"{k}={v}" for k, v in pairs.items())} if pairs else {}


async def sign_in(
    url: str,
    user: str,
    password: str,
    callback: str,
    decision: str = "allow",
    jar: Jar | None = None,
    met: list[str] | None = None,
) -> dict[str, str]:
    """Follow redirects and submit forms until the browser would land on `callback`."""
    jar = Jar() if jar is None else jar
    met = [] if met is None else met
    async with httpx.AsyncClient(follow_redirects=False, timeout=20) as browser:
        for _ in range(25):
            if url.startswith(callback):
                return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
            browser.cookies.clear()
            response = await browser.get(url, headers=jar.header(url))
            jar.keep(response)
            if response.status_code in (301, 302, 303, 307):
                url = urljoin(url, response.headers["location"])
                continue
            if response.status_code != 200:
                raise RuntimeError(
                    f"sign-in stopped at {url}: HTTP {response.status_code} {response.text[:300]}"
                )
            action, form = submission(response.text, user, password, decision)
            met.append("consent" if "request" in form else urlsplit(url).netloc)
            target = urljoin(url, action)
            # What a browser sends with a same-origin form post (the pages' Referrer-Policy
            # is same-origin, so the real origin, not "null").
            page_origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
            headers = {"Origin": page_origin} if target.startswith(page_origin + "/") else {}
            browser.cookies.clear()
            response = await browser.post(
                target, data=form, headers={**headers, **jar.header(target)}
            )
            jar.keep(response)
            if response.status_code not in (301, 302, 303, 307):
                raise RuntimeError(
                    f"form on {url} answered HTTP {response.status_code}: {response.text[:300]}"
                )
            url = urljoin(url, response.headers["location"])
    raise RuntimeError("the sign-in did not reach the client's callback")
