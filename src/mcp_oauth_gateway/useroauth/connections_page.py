"""`<MCP path>/connections`: a signed-in user's connections to this route's upstreams, each with
a Disconnect button (revoked at the upstream when it has RFC 7009, then forgotten). Signing in
sets a short-lived cookie for this page only; its forms carry a token only the page knows and
are refused from other sites."""

from __future__ import annotations

import hmac
import logging
import secrets
import time
from collections.abc import Mapping
from html import escape

from .. import audit
from ..asgi import BodyTooLarge, Receive, Scope, Send, header, read_body, request_origin
from ..gateway_cookies import CONNECTIONS_COOKIE
from ..html_pages import html, send_page, send_redirect
from ..usertokens.grants import Grant, GrantKey
from .access import Upstream
from .browser import FLOW_LIFETIME, PageError, cookie_values, params_of
from .discovery import DiscoveryError
from .oauth_client import UpstreamOAuthError, revoke
from .runtime import UserOAuthRuntime
from .signin import SignIn, start

log = logging.getLogger("mcp_oauth_gateway.useroauth")
PAGE = "connections-page"
MAX_FORM = 4096
_CSP = b"default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'"


class ConnectionsPage:
    """One route's connections page."""

    def __init__(
        self,
        runtime: UserOAuthRuntime,
        signin: SignIn,
        upstreams: Mapping[str, Upstream],
        mcp_path: str,
    ):
        self.runtime = runtime
        self.signin = signin
        self.backends = sorted(upstreams)
        self.upstreams = upstreams
        self.path = mcp_path + "/connections"
        self.mcp_path = mcp_path

    async def serve(self, scope: Scope, receive: Receive, send: Send) -> None:
        """GET: the list (after signing in); POST: disconnect one."""
        session = await self._session(scope)
        if session is None:
            if scope["method"] == "POST":
                raise PageError(403, "Signed out", "Your sign-in for this page has expired.")
            flow: dict[str, object] = {"purpose": "connections"}
            issuer = self.signin.first_issuer
            await start(scope, send, self.runtime.keys, self.signin, self.mcp_path, flow, issuer)
            return
        iss, sub, csrf = session
        if scope["method"] == "POST":
            await self._disconnect(scope, receive, (iss, sub), csrf)
            await send_redirect(send, self.path)
            return
        await self._list(send, iss, sub, csrf)

    async def opened(self, scope: Scope, send: Send, who: tuple[str, str]) -> None:
        """Signed in for this page: a cookie for it, and back to it."""
        sid = secrets.token_urlsafe(24)
        kept = {"iss": who[0], "sub": who[1], "csrf": secrets.token_urlsafe(24)}
        await self.runtime.store.put_pending(PAGE, sid, kept, FLOW_LIFETIME)
        secure = "; Secure" if request_origin(scope).startswith("https:") else ""
        cookie = (
            f"{CONNECTIONS_COOKIE}={sid}; Path={self.path}; Max-Age={FLOW_LIFETIME}; "
            f"HttpOnly; SameSite=Lax{secure}"
        )
        await send_redirect(send, self.path, [(b"set-cookie", cookie.encode("latin-1"))])

    async def _session(self, scope: Scope) -> tuple[str, str, str] | None:
        for sid in cookie_values(scope, CONNECTIONS_COOKIE)[:4]:
            kept = await self.runtime.store.get_pending(PAGE, sid) if len(sid) < 64 else None
            if kept is not None:
                iss, sub, csrf = kept.get("iss"), kept.get("sub"), kept.get("csrf")
                if isinstance(iss, str) and isinstance(sub, str) and isinstance(csrf, str):
                    return iss, sub, csrf
        return None

    async def _list(self, send: Send, iss: str, sub: str, csrf: str) -> None:
        rows = []
        for index, backend in enumerate(self.backends):
            grant = await self.runtime.store.get(GrantKey(iss, sub, backend))
            rows.append(self._row(index, self.upstreams[backend], grant, csrf))
        body = html(
            "Your connections",
            "<h1>Your connections</h1><p>Services this MCP server uses on your behalf.</p>"
            f"<table>{''.join(rows)}</table>",
        )
        await send_page(send, 200, body, csp=_CSP)

    def _row(self, index: int, upstream: Upstream, grant: Grant | None, csrf: str) -> str:
        name = escape(upstream.service)
        if grant is None:
            return f"<tr><td>{name}</td><td>not connected</td><td></td></tr>"
        since = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(grant.obtained_at))
        scope = escape(grant.scope or "")
        form = (
            f'<form method="post" action="{escape(self.path)}">'
            f'<input type="hidden" name="backend" value="{index}"/>'
            f'<input type="hidden" name="csrf" value="{escape(csrf)}"/>'
            '<button type="submit">Disconnect</button></form>'
        )
        return f"<tr><td>{name}</td><td>connected since {since} {scope}</td><td>{form}</td></tr>"

    async def _disconnect(
        self, scope: Scope, receive: Receive, user: tuple[str, str], csrf: str
    ) -> None:
        """Forget the signed-in user's grant at the backend the form names (`user`: issuer
        and subject of the page's sign-in, never of the form)."""
        origin = header(scope, b"origin")
        if origin is not None and origin.decode("latin-1") != request_origin(scope):
            raise PageError(403, "Refused", "This form was sent from another site.")
        try:
            raw = await read_body(receive, MAX_FORM, "of this page's form (fixed)")
        except BodyTooLarge as exc:
            # A page for a browser, not JSON: the same words, shown to a person.
            raise PageError(413, "Too large", str(exc)) from None
        form = params_of((raw or b"").decode("utf-8", "replace"))
        if not hmac.compare_digest(form.get("csrf", ""), csrf):
            raise PageError(403, "Refused", "This form is out of date: reload the page.")
        index = form.get("backend", "")
        if not index.isdigit() or int(index) >= len(self.backends):
            raise PageError(400, "Unknown connection", "Reload the page and try again.")
        backend = self.backends[int(index)]
        issuer, subject = user
        key = GrantKey(issuer, subject, backend)
        grant = await self.runtime.store.get(key)
        if grant is not None:
            await self._revoke(self.upstreams[backend], grant)
        await self.runtime.store.delete(key)
        audit.acting_user(scope, {"iss": issuer, "sub": subject})
        service = self.upstreams[backend].service
        audit.event(scope, "upstream-disconnected", detail=f"{service} disconnected")

    async def _revoke(self, upstream: Upstream, grant: Grant) -> None:
        """Revoke at the upstream when it can (RFC 7009); forgetting the grant does not wait
        for it to agree."""
        session = self.runtime.session()
        if session is None:
            return
        try:
            server = await self.runtime.servers.of(upstream.oauth, upstream.url)
            if server.revocation_endpoint is None:
                return
            token, hint = (
                (grant.refresh_token, "refresh_token")
                if grant.refresh_token
                else (grant.access_token, "access_token")
            )
            await revoke(
                session, server, upstream.oauth.client_id, upstream.oauth.client_secret, token, hint
            )
        except (DiscoveryError, UpstreamOAuthError) as exc:
            log.warning(
                "%s: revocation at the upstream failed (%s); grant forgotten", upstream.service, exc
            )
