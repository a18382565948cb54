"""The pages behind a connect link, on the route's own path (`<MCP path>/connect...`):

1. `connect?id=…`: the link the MCP client showed. Sends the browser to sign in at the route's
   provider; a cookie ties the rest of the flow to this browser.
2. `connect/signed-in`: back from the provider. Whoever signed in must be the caller the link
   was made for (the MCP specification's phishing check); anyone else is refused, whatever the
   link. Then the browser goes to the upstream's authorization server (PKCE S256, `state`, RFC
   8707 `resource`).
3. `connect/callback`: back from the upstream (RFC 9207 `iss` checked). The code is redeemed,
   the tokens stored encrypted under the caller's grant key, the client's waiting GET streams
   told, and the user shown "connected". The tokens never reach the browser."""

from __future__ import annotations

import logging
import secrets
import time
from collections.abc import Awaitable, Callable, Mapping

import aiohttp

from .. import audit, pkce
from ..asgi import ASGIApp, Receive, Scope, Send, send_error
from ..gateway_cookies import CONNECT_COOKIE
from ..html_pages import send_redirect
from ..usertokens.locking import StoreError
from .access import Upstream, granted
from .browser import (
    FLOW_LIFETIME,
    PageError,
    cookie_flow,
    digest,
    holds,
    query,
    send_message_page,
    wants_html,
)
from .connections_page import ConnectionsPage
from .connects import Asked
from .discovery import DiscoveryError
from .oauth_client import TokenAnswer, UpstreamOAuthError, authorization_url, check_iss
from .oauth_client import exchange_code as redeem
from .runtime import UserOAuthRuntime
from .signin import SIGNED_IN, NotVerified, SignIn, redirect_uri, start

STAGE = "connect-pages"
UPSTREAM = "connect-upstream"
CALLBACK = "/connect/callback"
_EXPIRED = PageError(
    400,
    "Link expired",
    "This connect link is unknown, already used or expired. Ask your MCP client again: its "
    "next call gives a new link.",
)
Page = Callable[[Scope, Receive, Send], Awaitable[None]]

log = logging.getLogger("mcp_oauth_gateway.useroauth")


class ConnectPages:
    """One route's connect pages; `upstreams`: its userOAuth backends by grant backend key."""

    def __init__(
        self,
        runtime: UserOAuthRuntime,
        signin: SignIn,
        upstreams: Mapping[str, Upstream],
        mcp_path: str,
    ):
        self.runtime = runtime
        self.signin = signin
        self.upstreams = dict(upstreams)
        self.mcp_path = mcp_path
        self.connections = ConnectionsPage(runtime, signin, self.upstreams, mcp_path)

    def routes(self) -> dict[str, ASGIApp]:
        """Path → page."""
        base = self.mcp_path
        return {
            base + "/connect": _guarded(self.connect),
            base + SIGNED_IN: _guarded(self.signed_in),
            base + CALLBACK: _guarded(self.callback),
            base + "/connections": _guarded(self.connections.serve, methods=("GET", "POST")),
        }

    async def connect(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The link: sign in first, to learn who opened it."""
        asked = await self.runtime.connects.find(query(scope).get("id", ""))
        if asked is None or asked.key.backend not in self.upstreams:
            raise _EXPIRED
        flow: dict[str, object] = {"purpose": "connect", "eid": asked.id}
        await start(
            scope, send, self.runtime.keys, self.signin, self.mcp_path, flow, asked.key.issuer
        )

    async def signed_in(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Back from the provider: check who it is, then on to the upstream."""
        params = query(scope)
        flow = self._signin_flow(scope, params)
        issuer = str(flow.get("issuer", ""))
        server = await self.signin.server(issuer)
        check_iss(server, params.get("iss"))
        answer = await redeem(
            self._session(),
            server,
            self.signin.client_id,
            None,
            params.get("code", ""),
            redirect_uri(scope, self.mcp_path, SIGNED_IN),
            str(flow.get("verifier", "")),
            None,
        )
        who = await self._who(answer)
        if flow.get("purpose") == "connections":
            await self.connections.opened(scope, send, who)
            return
        asked = await self.runtime.connects.find(str(flow.get("eid", "")))
        if asked is None or asked.key.backend not in self.upstreams:
            raise _EXPIRED
        if who != (asked.key.issuer, asked.key.subject):
            audit.deny(scope, STAGE, "a connect link was opened by a user it was not made for")
            raise PageError(
                403,
                "Not your link",
                "This link was made for another user's MCP client, so it cannot connect your "
                "account. Ask your own MCP client for a link.",
            )
        await self._to_upstream(scope, send, asked, str(flow.get("browser", "")))

    async def _to_upstream(self, scope: Scope, send: Send, asked: Asked, browser: str) -> None:
        upstream = self.upstreams[asked.key.backend]
        server = await self.runtime.servers.of(upstream.oauth, upstream.url)
        verifier = pkce.new_verifier()
        state = secrets.token_urlsafe(24)
        kept = {"eid": asked.id, "verifier": verifier, "browser": browser}
        await self.runtime.store.put_pending(UPSTREAM, state, kept, FLOW_LIFETIME)
        url = authorization_url(
            server,
            upstream.oauth.client_id,
            redirect_uri(scope, self.mcp_path, CALLBACK),
            state,
            pkce.s256(verifier),
            upstream.oauth.scopes,
            upstream.oauth.resource or server.resource,
        )
        await send_redirect(send, url)

    async def callback(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Back from the upstream: keep the tokens, say so."""
        params = query(scope)
        flow = await self._flow(scope, UPSTREAM, params)
        asked = await self.runtime.connects.find(str(flow.get("eid", "")))
        if asked is None or asked.key.backend not in self.upstreams:
            raise _EXPIRED
        upstream = self.upstreams[asked.key.backend]
        server = await self.runtime.servers.of(upstream.oauth, upstream.url)
        check_iss(server, params.get("iss"))
        answer = await redeem(
            self._session(),
            server,
            upstream.oauth.client_id,
            upstream.oauth.client_secret,
            params.get("code", ""),
            redirect_uri(scope, self.mcp_path, CALLBACK),
            str(flow.get("verifier", "")),
            upstream.oauth.resource or server.resource,
        )
        await self.runtime.store.put(asked.key, granted(answer, time.time(), None, server.issuer))
        await self.runtime.connects.finish(asked)
        self.runtime.streams.wake(asked.key.text())
        audit.acting_user(scope, {"iss": asked.key.issuer, "sub": asked.key.subject})
        audit.event(scope, "upstream-connected", detail=f"{upstream.service} connected")
        await send_message_page(
            send,
            200,
            f"{upstream.service} is connected",
            f"Go back to your MCP client: it can use {upstream.service} now. You can see and "
            f"disconnect your connections at {self.mcp_path}/connections.",
        )

    def _signin_flow(self, scope: Scope, params: Mapping[str, str]) -> dict[str, object]:
        """The sign-in this browser started (kept in its own sealed cookie): the gateway keeps
        nothing for a browser that has not signed in yet."""
        found = cookie_flow(scope, self.runtime.keys, params.get("state", ""))
        if found is None:
            audit.deny(scope, STAGE, "a sign-in came back without its flow in this browser")
            raise PageError(
                403,
                "Sign-in not started here",
                "This sign-in was started in another browser, or it expired. Open the link "
                "from your MCP client again, in this browser.",
            )
        flow, value = found
        _refused_by_provider(params)
        return {**flow, "browser": digest(value)}

    async def _flow(self, scope: Scope, kind: str, params: Mapping[str, str]) -> dict[str, object]:
        """The flow a redirect back belongs to, taken once, from the browser that started it."""
        state = params.get("state", "")
        flow = await self.runtime.store.take_pending(kind, state) if state else None
        if flow is None:
            raise _EXPIRED
        if not holds(scope, CONNECT_COOKIE, flow.get("browser")):
            audit.deny(scope, STAGE, "the flow came back to another browser than started it")
            raise PageError(
                403,
                "Wrong browser",
                "This sign-in was started in another browser. Open the link from your MCP "
                "client in this browser.",
            )
        _refused_by_provider(params)
        return flow

    async def _who(self, answer: TokenAnswer) -> tuple[str, str]:
        try:
            claims = await self.signin.verify(answer.access_token)
        except NotVerified as exc:
            raise PageError(403, "Sign-in not accepted", str(exc)) from None
        iss, sub = claims.get("iss"), claims.get("sub")
        if not isinstance(iss, str) or not isinstance(sub, str):
            raise PageError(403, "Sign-in not accepted", "the token names no user (iss, sub)")
        return iss, sub

    def _session(self) -> aiohttp.ClientSession:
        session = self.runtime.session()
        if session is None:
            raise PageError(503, "Unavailable", "The gateway is shutting down; try again.")
        return session


def _refused_by_provider(params: Mapping[str, str]) -> None:
    if "error" in params:
        said = params.get("error_description") or params["error"]
        raise PageError(403, "Not connected", f"The sign-in was not completed: {said[:200]}")


def _guarded(page: Page, methods: tuple[str, ...] = ("GET",)) -> ASGIApp:
    """A page that answers its refusals as pages (JSON to programs), never as an exception."""

    async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["method"] not in methods:
            allow = ", ".join(methods).encode()
            why = f"this page answers {', '.join(methods)}"
            await send_error(send, 405, "method_not_allowed", why, [(b"allow", allow)])
            return
        try:
            await page(scope, receive, send)
            audit.allow(scope, STAGE)
        except PageError as exc:
            await _refuse(scope, send, exc.status, exc.title, exc.text)
        except (DiscoveryError, UpstreamOAuthError) as exc:
            why = f"the authorization server did not complete the sign-in: {exc}"
            await _refuse(scope, send, 502, "Not connected", why)
        except StoreError as exc:
            log.warning("user token store unavailable at %s: %s", scope["path"][:200], exc)
            why = "the gateway cannot reach its store of connections now; try again shortly"
            await _refuse(scope, send, 503, "Unavailable", why)

    return guarded


async def _refuse(scope: Scope, send: Send, status: int, title: str, text: str) -> None:
    audit.deny(scope, STAGE, text)
    if wants_html(scope):
        await send_message_page(send, status, title, text)
    else:
        await send_error(send, status, "connect_failed", text)
