"""Steady Broker traffic across gateway replicas while Redis fails, every answer recorded, and
what issue 37 promises checked against the record: no refresh token accepted twice, no revoked
token accepted, no user told signed in whose tokens then stop working, every refusal a clear
503 (`temporarily_unavailable`, a description, `Retry-After`; never a 500, a hang beyond
`BOUND`, a password or a Redis address), and service back afterwards.

Each worker is a user of a registered client: it signs in (authorize, consent, the provider's
pages, callback, token), calls a tool with a real MCP client, rotates its refresh token twice,
and then either stays signed in (checked after the failover), races its token on two replicas
at once, or revokes it. Steps go to the replicas in turn, as a balancer spreads them; a step
answered 503 is sent again, as the answer asks, until it is answered otherwise."""

from __future__ import annotations

import asyncio
import itertools
import secrets
from dataclasses import dataclass, field
from urllib.parse import urlencode, urljoin, urlsplit

import httpx
import httpx2
from headless_login import submission
from mcp.client import Client
from mcp.client.streamable_http import streamable_http_client

from balancer_support import BOUND, Answer, Balancer
from broker_calls import s256
from redis_failover_support import Gateway

REDIRECT = "http://127.0.0.1:47222/cb"
SCOPE = "openid profile offline_access"
REUSED = "already exchanged once"
# The gateway's own refusal of a refresh token it does not hold (a provider's refusal means
# the gateway let the token through).
UNKNOWN = "unknown, expired or revoked refresh token"


@dataclass
class User:
    """A registered client and the tokens its user holds."""

    client_id: str
    verifier: str = field(default_factory=lambda: secrets.token_urlsafe(48))
    refresh: str = ""
    access: str = ""


class Traffic(Balancer):
    """The driver: `run()` until `stop()`, every answer in `answers`, every breach of a
    promise that a single exchange shows in `problems`."""

    def __init__(self, public: str, replicas: dict[str, Gateway]):
        super().__init__(public, replicas)
        self.live: list[User] = []  # signed in, told so, their current refresh token unused
        self.rotated: list[tuple[User, str]] = []  # refresh tokens rotated away (200)
        self.revoked: list[tuple[User, str]] = []  # refresh tokens whose revocation was 200
        self.cycles = 0
        self._stopping = asyncio.Event()

    # -- the OAuth steps ----------------------------------------------------------------------

    @property
    def mcp(self) -> str:
        return f"{self.public}/mcp"

    async def register(self) -> User | None:
        """A new client of the Broker."""
        url = f"{self.public}/.well-known/oauth-authorization-server/mcp/client-registration"
        body = {"client_name": "failover", "redirect_uris": [REDIRECT]}
        response = await self.retried(
            "register", lambda r: self.send("register", "POST", url, r, json=body)
        )
        if response is None or response.status_code != 201:
            self._refused("register", response)
            return None
        return User(response.json()["client_id"])

    async def sign_in(self, user: User) -> bool:
        """A whole sign-in; False (a problem recorded) when a step is refused."""
        params = {
            "response_type": "code",
            "client_id": user.client_id,
            "redirect_uri": REDIRECT,
            "state": "s",
            "code_challenge": s256(user.verifier),
            "code_challenge_method": "S256",
            "scope": SCOPE,
            "resource": self.mcp,
        }
        cookies: dict[str, str] = {}
        page = await self._page(
            "authorize", "GET", f"{self.mcp}/oauth/authorize?{urlencode(params)}", cookies
        )
        if page is None or page.status_code != 200:
            return self._refused("authorize", page)
        action, form = submission(page.text, "alice", "x", "allow")
        to_idp = await self._page(
            "consent",
            "POST",
            urljoin(self.mcp + "/", action),
            cookies,
            data=form,
            headers={"Origin": self.public},
        )
        if to_idp is None or to_idp.status_code != 302:
            return self._refused("consent", to_idp)
        callback = await at_provider(self.mcp, to_idp.headers["location"])
        back = await self._page("callback", "GET", callback, cookies)
        if back is None or back.status_code != 302:
            return self._refused("callback", back)
        query = dict(httpx.URL(back.headers["location"]).params)
        form = {
            "grant_type": "authorization_code",
            "code": query.get("code", ""),
            "client_id": user.client_id,
            "redirect_uri": REDIRECT,
            "code_verifier": user.verifier,
            "resource": self.mcp,
        }
        tokens = await self._token("redeem", form)
        if tokens is None or tokens.status_code != 200:
            return self._refused("redeem", tokens)
        user.refresh, user.access = tokens.json()["refresh_token"], tokens.json()["access_token"]
        return True

    async def _page(
        self, op: str, method: str, url: str, cookies: dict[str, str], **request
    ) -> httpx.Response | None:
        """A browser's request to the gateway, its cookies kept."""

        async def attempt(replica: str) -> tuple[str, httpx.Response | None]:
            headers = {**request.get("headers", {})}
            if cookies:
                headers["Cookie"] = "; ".join(f"{k}={v}" for k, v in cookies.items())
            sent = {**request, "headers": headers}
            return await self.send(op, method, url, replica, **sent)

        response = await self.retried(op, attempt)
        if response is not None:
            for line in response.headers.get_list("set-cookie"):
                name, _, value = line.split(";", 1)[0].partition("=")
                cookies[name.strip()] = value.strip()
        return response

    async def _token(self, op: str, form: dict[str, str]) -> httpx.Response | None:
        url = f"{self.mcp}/oauth/token"
        return await self.retried(op, lambda r: self.send(op, "POST", url, r, data=form))

    def refresh_form(self, user: User, token: str) -> dict[str, str]:
        return {
            "grant_type": "refresh_token",
            "refresh_token": token,
            "client_id": user.client_id,
            "resource": self.mcp,
        }

    async def signed_in(self) -> User:
        """A user signed in now (live: checked by `verify`)."""
        user = await self.register()
        assert user is not None
        assert await self.sign_in(user), self.problems
        self.live.append(user)
        return user

    async def refresh_once(self, user: User, replica: str) -> httpx.Response | None:
        """One refresh at `replica`, not sent again: a 200 rotates the user's token."""
        form = self.refresh_form(user, user.refresh)
        _, response = await self.send(
            "refresh", "POST", f"{self.mcp}/oauth/token", replica, data=form
        )
        if response is not None and response.status_code == 200:
            self.rotated.append((user, user.refresh))
            user.refresh, user.access = (
                response.json()["refresh_token"],
                response.json()["access_token"],
            )
        return response

    async def rotate(self, user: User) -> bool:
        """Refresh: the old token rotated away, the new one held (a refusal: a user signed out)."""
        old = user.refresh
        response = await self._token("refresh", self.refresh_form(user, old))
        if response is None or response.status_code != 200:
            self.problems.append(f"refresh: a signed-in user was refused: {_said(response)}")
            return False
        user.refresh, user.access = (
            response.json()["refresh_token"],
            response.json()["access_token"],
        )
        self.rotated.append((user, old))
        return True

    async def revoke(self, user: User) -> None:
        """Revoke the refresh token (sent again through 503s until answered)."""
        response = await self.retried("revoke", lambda r: self.revoke_once(user, r))
        if response is None or response.status_code != 200:
            self.problems.append(f"revoke: refused: {_said(response)}")

    async def revoke_once(self, user: User, replica: str) -> tuple[str, httpx.Response | None]:
        """One revocation at `replica`, not sent again: a 200 ends the user's sign-in."""
        url = f"{self.mcp}/oauth/revoke"
        form = {
            "token": user.refresh,
            "token_type_hint": "refresh_token",
            "client_id": user.client_id,
        }
        sent = await self.send("revoke", "POST", url, replica, data=form)
        if sent[1] is not None and sent[1].status_code == 200:
            self.revoked.append((user, user.refresh))
            if user in self.live:
                self.live.remove(user)
        return sent

    async def race(self, user: User) -> None:
        """The same refresh token at two replicas at once, each sent again through 503s:
        exactly one may have it."""
        form = self.refresh_form(user, user.refresh)
        names = sorted(self.replicas)[:2]
        answers = await asyncio.gather(
            *(
                self.retried(
                    "race",
                    lambda _, n=name: self.send(
                        "race", "POST", self.mcp + "/oauth/token", n, data=form
                    ),
                )
                for name in names
            )
        )
        won = [a for a in answers if a is not None and a.status_code == 200]
        if len(won) != 1:
            said = "; ".join(_said(a) for a in answers)
            self.problems.append(f"race: {len(won)} replicas accepted one refresh token: {said}")

    async def call_tool(self, user: User) -> None:
        """A tool call with a real MCP client (the `mcp` SDK) at the next replica."""
        replica = self._next()
        headers = {"Authorization": f"Bearer {user.access}"}
        try:
            async with (
                httpx2.AsyncClient(headers=headers, timeout=BOUND) as http,
                Client(
                    streamable_http_client(f"{self.replicas[replica].base}/mcp", http_client=http)
                ) as client,
            ):
                result = await client.call_tool("add", {"a": 2, "b": 3})
            text = result.content[0].text
            self.answers.append(Answer("tool", replica, 200, text))
            if text != "5":
                self.problems.append(f"tool at {replica}: answered {text!r}")
        except Exception as exc:  # the client's error is the record
            self.answers.append(Answer("tool", replica, None, error=f"{type(exc).__name__}: {exc}"))

    def _refused(self, op: str, response: httpx.Response | None) -> bool:
        self.problems.append(f"{op}: refused: {_said(response)}")
        return False

    # -- the workers --------------------------------------------------------------------------

    async def _cycle(self, turn: int) -> None:
        user = await self.register()
        if user is None or not await self.sign_in(user):
            return
        await self.call_tool(user)
        for _ in range(2):
            if not await self.rotate(user):
                return
        await self.call_tool(user)
        ending = turn % 3
        if ending == 0:
            self.live.append(user)
        elif ending == 1:
            await self.race(user)
        else:
            await self.revoke(user)
        self.cycles += 1

    async def _worker(self, first: int, workers: int) -> None:
        for turn in itertools.count(first, workers):
            if self._stopping.is_set():
                return
            try:
                await self._cycle(turn)
            except Exception as exc:  # recorded: the other workers drive on
                self.problems.append(f"worker: {type(exc).__name__}: {exc}")

    async def run(self, workers: int = 3) -> None:
        """Drive until `stop()`."""
        await asyncio.gather(*(self._worker(n, workers) for n in range(workers)))

    def stop(self) -> None:
        """Let every worker finish its cycle and end."""
        self._stopping.set()

    # -- what is checked once the failover is over --------------------------------------------

    async def verify(self) -> list[str]:
        """After the failover: every live user's refresh token still works; every token rotated
        away is refused as reused; every revoked token is refused. The breaches."""
        breaches = []
        for user in self.live:
            if not await self.rotate(user):
                breaches.append(f"a user told signed in lost the sign-in: {self.problems[-1]}")
        # Replays revoke families: only once every live user was checked.
        for user, token in self.rotated:
            replay = await self._token("replay", self.refresh_form(user, token))
            if replay is None or replay.status_code != 400 or REUSED not in replay.text:
                breaches.append(f"a rotated-away token was let through: {_said(replay)}")
        for user, token in self.revoked:
            replay = await self._token("replay", self.refresh_form(user, token))
            if replay is None or replay.status_code != 400 or UNKNOWN not in replay.text:
                breaches.append(f"a revoked refresh token was let through: {_said(replay)}")
        return breaches


async def at_provider(gateway: str, url: str) -> str:
    """The provider's login and consent pages, filled in as a person would: the URL the
    provider sends the browser back to the gateway with."""
    jar: dict[str, str] = {}
    async with httpx.AsyncClient(follow_redirects=False, timeout=BOUND) as browser:
        for _ in range(20):
            if url.startswith(gateway):
                return url
            headers = {"Cookie": "; ".join(f"{k}={v}" for k, v in jar.items())}
            response = await browser.get(url, headers=headers)
            _keep(jar, response)
            if response.status_code != 200:
                url = urljoin(url, response.headers["location"])
                continue
            action, form = submission(response.text, "alice", "x", "allow")
            origin = "{0.scheme}://{0.netloc}".format(urlsplit(url))
            response = await browser.post(
                urljoin(url, action), data=form, headers={"Origin": origin, **headers}
            )
            _keep(jar, response)
            url = urljoin(url, response.headers["location"])
    raise AssertionError("the provider's pages did not lead back to the gateway")


def _keep(jar: dict[str, str], response: httpx.Response) -> None:
    for line in response.headers.get_list("set-cookie"):
        name, _, value = line.split(";", 1)[0].partition("=")
        jar[name.strip()] = value.strip()


def _said(response: httpx.Response | None) -> str:
    if response is None:
        return "no answer"
    return f"HTTP {response.status_code} {response.text[:200]}"
