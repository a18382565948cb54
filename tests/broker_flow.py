"""A Broker-mode client spoken with plain HTTP, one OAuth step at a time: register with the
gateway, authorize (the sign-in completed headlessly on the provider's own pages), redeem the
gateway's code, refresh and revoke. Each step returns what the gateway answered, so tests can
stop between steps (at the provider's redirect to the gateway, say) and change what is sent.

`provider_refresh_token` reads what a gateway refresh token stands for out of the Broker's Redis
store: the provider's own refresh token, which clients never see, so that a test can present it
to the provider directly."""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlencode

import httpx
import redis
from headless_login import Jar, sign_in, submission

from broker_calls import s256
from mcp_oauth_gateway.broker.refresh import digest
from mcp_oauth_gateway.broker.store import PREFIX, TAKEN

REDIRECT = "http://127.0.0.1:47111/cb"


@dataclass
class BrokerClient:
    """One client of the gateway's Broker route at `mcp` (the route's issuer and resource).

    `redirect`: its redirect URI. `via`: the base URL of the replica its own requests go to,
    with `mcp`'s host as their Host header, as a load balancer in front of replicas sends them
    (the browser's sign-in goes to `mcp`'s host). `replace(client, mcp=…)` is the same client
    at another route; `replace(client, via=…)` the same client through another replica."""

    mcp: str
    client_id: str = ""
    verifier: str = field(default_factory=lambda: secrets.token_urlsafe(48))
    redirect: str = REDIRECT
    via: str | None = None

    @property
    def callback(self) -> str:
        """Where the provider sends the browser back to the gateway."""
        return f"{self.mcp}/oauth/callback"

    @property
    def registration_endpoint(self) -> str:
        """The route's registration endpoint (RFC 8414 path form of its issuer)."""
        url = httpx.URL(self.mcp)
        return (
            f"{url.scheme}://{url.netloc.decode()}/.well-known/oauth-authorization-server"
            f"{url.path}/client-registration"
        )

    def _send(self, method: str, url: str, **request: Any) -> httpx.Response:
        """One request of the client's own (not the browser's), through `via` when set."""
        if self.via is not None:
            public = httpx.URL(url)
            request["headers"] = {"Host": public.netloc.decode(), **request.get("headers", {})}
            url = str(httpx.URL(self.via).join(public.raw_path.decode()))
        return httpx.request(method, url, **request)

    def register(self, *redirects: str) -> BrokerClient:
        uris = list(redirects) or [self.redirect]
        response = self._send(
            "POST",
            self.registration_endpoint,
            json={"client_name": "Broker e2e", "redirect_uris": uris},
        )
        assert response.status_code == 201, response.text
        self.client_id = response.json()["client_id"]
        return self

    def authorize_url(self, scope: str = "openid profile", **extra: str) -> str:
        params = {
            "response_type": "code",
            "client_id": self.client_id,
            "redirect_uri": self.redirect,
            "state": "client-state",
            "code_challenge": s256(self.verifier),
            "code_challenge_method": "S256",
            "scope": scope,
            "resource": self.mcp,
            **extra,
        }
        return f"{self.mcp}/oauth/authorize?{urlencode(params)}"

    async def provider_redirect(self, user: str, password: str) -> dict[str, str]:
        """Sign in up to the provider's redirect to the gateway: its query (code, state, iss…),
        not yet delivered."""
        return await sign_in(self.authorize_url(), user, password, self.callback)

    def deliver(self, query: dict[str, str]) -> httpx.Response:
        """Bring the provider's redirect to the gateway's callback, as the browser would."""
        return self._send("GET", f"{self.callback}?{urlencode(query)}", follow_redirects=False)

    async def code(
        self,
        user: str,
        password: str,
        scope: str = "openid profile",
        jar: Jar | None = None,
        met: list[str] | None = None,
    ) -> dict[str, str]:
        """A whole sign-in (in browser `jar`, when given, listing the pages it met in `met`):
        the query the gateway redirects the client's callback with."""
        return await sign_in(
            self.authorize_url(scope), user, password, self.redirect, jar=jar, met=met
        )

    def redeem(self, code: str) -> httpx.Response:
        return self._send(
            "POST",
            f"{self.mcp}/oauth/token",
            data={
                "grant_type": "authorization_code",
                "code": code,
                "client_id": self.client_id,
                "redirect_uri": self.redirect,
                "code_verifier": self.verifier,
                "resource": self.mcp,
            },
        )

    async def tokens(
        self, user: str, password: str, scope: str = "openid profile"
    ) -> dict[str, str]:
        """Sign in and redeem the code: the gateway's token response."""
        query = await self.code(user, password, scope)
        assert "code" in query, query
        response = self.redeem(query["code"])
        assert response.status_code == 200, response.text
        tokens: dict[str, str] = response.json()
        return tokens

    def refresh(self, refresh_token: str, scope: str | None = None) -> httpx.Response:
        form = {
            "grant_type": "refresh_token",
            "refresh_token": refresh_token,
            "client_id": self.client_id,
            "resource": self.mcp,
        }
        if scope is not None:
            form["scope"] = scope
        return self._send("POST", f"{self.mcp}/oauth/token", data=form)

    def revoke(self, token: str, hint: str) -> httpx.Response:
        return self._send(
            "POST",
            f"{self.mcp}/oauth/revoke",
            data={"token": token, "token_type_hint": hint, "client_id": self.client_id},
        )


def provider_refresh_token(redis_url: str, gateway_refresh_token: str) -> str:
    """The provider's refresh token that a live gateway refresh token stands for (kept under
    the key of the Broker route that issued it, whichever that is)."""
    with redis.Redis.from_url(redis_url) as store:
        keys = list(store.scan_iter(f"{PREFIX}refresh:*:{digest(gateway_refresh_token)}"))
        assert len(keys) == 1, f"the gateway refresh token is not in the Broker's store: {keys}"
        raw = store.get(keys[0])
    assert isinstance(raw, bytes), "the gateway refresh token is no longer in the Broker's store"
    assert not raw.startswith(TAKEN), "the gateway refresh token has been used"
    token: str = json.loads(raw)["provider"]
    return token


async def deny_at_provider(url: str, user: str, password: str, stop_at: str) -> dict[str, str]:
    """Sign in at the provider but refuse its consent page (Keycloak's `cancel` button), as a
    person would; the query of the provider's redirect to `stop_at`, not delivered."""
    jar: dict[str, str] = {}  # every cookie, Secure ones included (Keycloak on http loopback)
    async with httpx.AsyncClient(follow_redirects=False, timeout=20) as browser:
        for _ in range(20):
            if url.startswith(stop_at):
                return dict(httpx.URL(url).params)
            response = await browser.get(url, headers=_cookie(jar))
            _keep(jar, response)
            if response.is_redirect:
                url = str(response.url.join(response.headers["location"]))
                continue
            action, form = submission(response.text, user, password, "allow")
            if "accept" in form:  # the provider's consent page: say no
                del form["accept"]
                form["cancel"] = "No"
            target = response.url.join(action)
            origin = f"{response.url.scheme}://{response.url.netloc.decode()}"
            response = await browser.post(
                target, data=form, headers={"Origin": origin, **_cookie(jar)}
            )
            _keep(jar, response)
            assert response.is_redirect, f"{target} answered {response.status_code}"
            url = str(response.url.join(response.headers["location"]))
    raise AssertionError(f"the sign-in did not reach {stop_at}")


def _keep(jar: dict[str, str], response: httpx.Response) -> None:
    for line in response.headers.get_list("set-cookie"):
        name, _, value = line.split(";", 1)[0].partition("=")
        jar[name.strip()] = value.strip()


def _cookie(jar: dict[str, str]) -> dict[str, str]:
    return {"Cookie": "; ".join(f"{k}={v}" for k, v in jar.items())} if jar else {}
