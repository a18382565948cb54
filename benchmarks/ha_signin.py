"""A Broker sign-in as a person's browser and an OAuth client make it, each request recorded:
the client registers (Dynamic Client Registration at the gateway), the browser goes through the
gateway's consent page and the provider's login page (forms filled in as a person would), and
the client redeems the code. A `Session` is what the gateway's answers left the client with."""

from __future__ import annotations

import base64
import hashlib
import secrets
from dataclasses import dataclass, field
from urllib.parse import parse_qs, urlencode, urljoin, urlsplit

import httpx
from ha_http import Sender
from ha_parts import submission
from ha_stack import PASSWORD, USER

REDIRECT = "http://127.0.0.1:47111/cb"
PAGE = {"Accept": "text/html,application/xhtml+xml,*/*;q=0.8"}  # what a browser asks for


@dataclass
class Session:
    """One signed-in client, as the gateway's answers left it."""

    client_id: str
    refresh: str
    access: str
    rotated: list[str] = field(default_factory=list)
    # live: its refresh token must work; revoked: must not; unknown: an answer that says
    # nothing (a broken connection), so nothing is expected of it; raced: sent to two
    # replicas at once (one may have revoked the other's family as reuse).
    state: str = "live"
    owed: bool = False  # its last answer was a 503: the same token must still work
    busy: bool = False
    not_before: float = 0.0


def s256(verifier: str) -> str:
    """The PKCE challenge of `verifier`."""
    digest = hashlib.sha256(verifier.encode()).digest()
    return base64.urlsafe_b64encode(digest).rstrip(b"=").decode()


class Browser:
    """One browser's cookies, by the host the page was asked of (the public host for the
    gateway's pages, whichever replica answered)."""

    def __init__(self) -> None:
        self.jar: dict[str, dict[str, str]] = {}

    def header(self, url: str) -> dict[str, str]:
        pairs = self.jar.get(urlsplit(url).netloc, {})
        return {"Cookie": "; ".join(f"{k}={v}" for k, v in pairs.items())} if pairs else {}

    def keep(self, url: str, response: httpx.Response) -> None:
        for line in response.headers.get_list("set-cookie"):
            name, _, value = line.split(";", 1)[0].partition("=")
            self.jar.setdefault(urlsplit(url).netloc, {})[name.strip()] = value.strip()


class SignIn:
    """Sign-ins at the Broker route `mcp`."""

    def __init__(self, sender: Sender, mcp: str):
        self.sender = sender
        self.mcp = mcp

    async def register(self) -> str | None:
        """A new client (Dynamic Client Registration at the gateway); None when refused."""
        url = httpx.URL(self.mcp)
        endpoint = (
            f"{url.scheme}://{url.netloc.decode()}/.well-known/oauth-authorization-server"
            f"{url.path}/client-registration"
        )
        body = {"client_name": "ha bench", "redirect_uris": [REDIRECT]}
        # Stateless once the replica has read the store's secret (at its first registration).
        _, response = await self.sender.send(
            "sign-in", "register", "POST", endpoint, (201,), redis=False, json=body
        )
        return (
            None
            if response is None or response.status_code != 201
            else response.json()["client_id"]
        )

    async def sign_in(self) -> Session | None:
        """Register, sign in and redeem the code; the new Session, or None when any step
        failed (recorded)."""
        client_id = await self.register()
        if client_id is None:
            return None
        verifier = secrets.token_urlsafe(48)
        query = await self._browse(self._authorize_url(client_id, verifier))
        if query is None or "code" not in query:
            return None
        form = {
            "grant_type": "authorization_code",
            "code": query["code"],
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "code_verifier": verifier,
            "resource": self.mcp,
        }
        _, response = await self.sender.send(
            "sign-in", "token", "POST", f"{self.mcp}/oauth/token", (200,), data=form
        )
        if response is None or response.status_code != 200:
            return None
        tokens = response.json()
        return Session(client_id, tokens["refresh_token"], tokens["access_token"])

    def _authorize_url(self, client_id: str, verifier: str) -> str:
        params = {
            "response_type": "code",
            "client_id": client_id,
            "redirect_uri": REDIRECT,
            "state": secrets.token_urlsafe(8),
            "code_challenge": s256(verifier),
            "code_challenge_method": "S256",
            "scope": "openid profile",
            "resource": self.mcp,
        }
        return f"{self.mcp}/oauth/authorize?{urlencode(params)}"

    async def _browse(self, url: str) -> dict[str, str] | None:
        """Follow redirects and fill in forms until the client's redirect URI: its query, or
        None when a page answered otherwise (recorded)."""
        browser = Browser()
        public = self.sender.front.public
        for _ in range(25):
            if url.startswith(REDIRECT):
                return {k: v[0] for k, v in parse_qs(urlsplit(url).query).items()}
            at_gateway = url.startswith(public)
            step = urlsplit(url).path.rsplit("/", 1)[-1] if at_gateway else "idp"
            _, response = await self.sender.send(
                "sign-in",
                step,
                "GET",
                url,
                (200, 302, 303),
                redis=at_gateway,
                headers={**PAGE, **browser.header(url)},
            )
            if response is None or response.status_code not in (200, 302, 303):
                return None
            browser.keep(url, response)
            if response.status_code != 200:
                url = urljoin(url, response.headers["location"])
                continue
            action, form = submission(response.text, USER, PASSWORD, "allow")
            target = urljoin(url, action)
            origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
            headers = {**PAGE, "Origin": origin, **browser.header(target)}
            step = "consent" if "request" in form else "idp login"
            _, response = await self.sender.send(
                "sign-in",
                step,
                "POST",
                target,
                (302, 303),
                redis=at_gateway,
                data=form,
                headers=headers,
            )
            if response is None or response.status_code not in (302, 303):
                return None
            browser.keep(target, response)
            url = urljoin(target, response.headers["location"])
        return None
