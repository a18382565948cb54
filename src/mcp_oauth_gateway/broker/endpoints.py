"""Broker mode: the gateway is the authorization server MCP clients see.

Clients register with the gateway (DCR or CIMD), authorize at the gateway (exact redirect URI,
PKCE S256, a consent page per client because every client reaches the provider through one
static client id), and get the gateway's own one-time code with `iss` = the gateway issuer
(RFC 9207). The gateway signs the user in at the provider as `mcp.clientId` with its own PKCE and
state, and hands the provider's token response over (with its own refresh token), so `/mcp`
validates exactly the same JWTs as in facade mode.

Handlers answer or raise `OAuthError`; `_guard` writes every error in one place.
"""

from __future__ import annotations

import asyncio
import hmac
import logging
import secrets
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Any
from urllib.parse import urlencode

import aiohttp
import orjson

from .. import pkce
from ..asgi import (
    ASGIApp,
    Headers,
    Receive,
    Scope,
    Send,
    read_body,
    request_origin,
    send_error,
    send_json,
)
from ..controlplane.fetch import FetchError, failure_text
from ..controlplane.snapshot import CompiledMcp
from ..oauth_scopes import scope_tokens
from ..providers import RegistrationError
from ..registration import parse_registration
from ..urls import (
    InvalidUri,
    navigable,
    parse_redirect_uri,
    redirect_matches,
    shown_url,
    with_query,
)
from . import consent, pages
from .clients import BrokerClient, ClientError, MetadataDocuments, issue_client_id, read_client_id
from .errors import OAuthError, method_not_allowed
from .identity import SignInProvider, pick_by_hint
from .refresh import RefreshGrant, RefreshReused, RefreshTokens
from .requests import cookies, form_params, query_params, scope_param
from .revocation import Revocation, revoke_at_provider
from .state import PENDING_TTL, BrokerState, IssuedCode, PendingAuthorization, UpstreamRequest
from .store import BrokerStore

log = logging.getLogger("mcp_oauth_gateway.broker")

CONSENT_DAYS = 30
MAX_FORM = 16 * 1024
UPSTREAM_TIMEOUT = 15.0
Handler = Callable[[Scope, Receive, Send], Any]


async def _redirect(send: Send, location: str, headers: Headers | None = None) -> None:
    await send(
        {
            "type": "http.response.start",
            "status": 302,
            "headers": [
                (b"location", location.encode()),
                (b"content-length", b"0"),
                (b"cache-control", b"no-store"),
                *(headers or ()),
            ],
        }
    )
    await send({"type": "http.response.body", "body": b""})


class Broker:
    """The broker's endpoints for one policy; stateless apart from `store`."""

    def __init__(
        self,
        mcp: CompiledMcp,
        providers: tuple[SignInProvider, ...],
        store: BrokerStore,
        documents: MetadataDocuments,
        session: Callable[[], aiohttp.ClientSession | None],
    ):
        self.mcp = mcp
        self.providers = providers
        self.store = store
        self.state = BrokerState(store)
        self.refresh = RefreshTokens(store)
        self.documents = documents
        self.session = session
        self.authorize_path = mcp.mcp_path + "/oauth/authorize"
        self.token_path = mcp.mcp_path + "/oauth/token"
        self.callback_path = mcp.mcp_path + "/oauth/callback"
        self.revoke_path = mcp.mcp_path + "/oauth/revoke"
        self.revocation = Revocation(store, self.refresh)
        self.scopes = " ".join(mcp.scopes_supported)

    def routes(self) -> dict[str, ASGIApp]:
        """Path → handler for what MCP clients call (the route's CORS applies)."""
        return {
            self.mcp.asm_path: self._guard(self.metadata, page=False),
            self.mcp.registration_path: self._guard(self.register, page=False),
            self.token_path: self._guard(self.token, page=False),
            self.revoke_path: self._guard(self.revoke, page=False),
        }

    def pages(self) -> dict[str, ASGIApp]:
        """Path → handler for the browser pages, which no CORS setting may expose to scripts
        of other sites."""
        return {
            self.authorize_path: self._guard(self.authorize, page=True),
            self.callback_path: self._guard(self.callback, page=True),
        }

    # --- errors, in one place ---------------------------------------------------------------

    def _guard(self, handler: Handler, page: bool) -> ASGIApp:
        async def guarded(scope: Scope, receive: Receive, send: Send) -> None:
            try:
                await handler(scope, receive, send)
            except OAuthError as exc:
                await self._write_error(scope, send, exc, page)

        return guarded

    async def _write_error(self, scope: Scope, send: Send, exc: OAuthError, page: bool) -> None:
        if exc.redirect_href is not None:
            params = {
                "error": exc.error,
                "error_description": exc.description,
                "iss": self._issuer(scope),
            }
            if exc.state is not None:
                params["state"] = exc.state
            await _redirect(send, with_query(exc.redirect_href, urlencode(params)))
        elif page:
            await pages.send_error_page(scope, send, exc.status, exc.error, exc.description)
        else:
            await send_error(send, exc.status, exc.error, exc.description, exc.headers)

    # --- helpers --------------------------------------------------------------------------

    def _issuer(self, scope: Scope) -> str:
        return request_origin(scope) + self.mcp.mcp_path

    def _signin(self, index: int) -> SignInProvider:
        """A provider by its providers[] index (records written by another configuration may
        name one that is gone)."""
        if not 0 <= index < len(self.providers):
            raise OAuthError(
                400,
                "invalid_grant",
                "the identity provider this sign-in went through is no longer configured; "
                "sign in again",
            )
        return self.providers[index]

    async def _provider(self, index: int = 0) -> dict[str, Any]:
        """A provider's metadata (502 when it cannot be had)."""
        discovery = self._signin(index).discovery
        try:
            if discovery is None:
                raise FetchError("no discovery document is configured for this provider")
            return await discovery.get()
        except FetchError as exc:
            raise OAuthError(
                502,
                "temporarily_unavailable",
                f"the identity provider's metadata is unavailable: {exc}",
            ) from exc

    async def _client(self, client_id: str) -> BrokerClient:
        client = read_client_id(await self.store.secret(), client_id)
        if client is not None:
            return client
        if client_id.startswith(("https://", "http://")):
            return await self.documents.resolve(client_id)
        raise ClientError(
            "invalid_client",
            f"client_id {client_id[:80]!r} is not registered "
            "with this gateway (register through the registration_endpoint or "
            "use a client metadata document URL)",
        )

    # --- metadata and registration --------------------------------------------------------

    async def metadata(self, scope: Scope, receive: Receive, send: Send) -> None:
        """RFC 8414 metadata of the gateway as authorization server."""
        if scope["method"] not in ("GET", "HEAD"):
            raise method_not_allowed("GET")
        origin = request_origin(scope)
        document: dict[str, Any] = {
            "issuer": origin + self.mcp.mcp_path,
            "authorization_endpoint": origin + self.authorize_path,
            "token_endpoint": origin + self.token_path,
            "revocation_endpoint": origin + self.revoke_path,
            "revocation_endpoint_auth_methods_supported": ["none"],
            "registration_endpoint": origin + self.mcp.registration_path,
            "response_types_supported": ["code"],
            "response_modes_supported": ["query"],
            "grant_types_supported": ["authorization_code", "refresh_token"],
            "token_endpoint_auth_methods_supported": ["none"],
            "code_challenge_methods_supported": ["S256"],
            "authorization_response_iss_parameter_supported": True,
            "client_id_metadata_document_supported": True,
        }
        if self.mcp.scopes_supported:
            document["scopes_supported"] = list(self.mcp.scopes_supported)
        await send_json(send, 200, document)

    async def register(self, scope: Scope, receive: Receive, send: Send) -> None:
        """DCR: a gateway client id bound to the submitted redirect URIs."""
        if scope["method"] != "POST":
            raise method_not_allowed("POST")
        raw = await read_body(receive, MAX_FORM * 4)
        if raw is None:
            raise OAuthError(413, "invalid_client_metadata", "registration body too large")
        try:
            metadata = parse_registration(raw)
        except RegistrationError as exc:
            raise OAuthError(exc.status, exc.error, exc.description) from exc
        if metadata.get("token_endpoint_auth_method", "none") != "none":
            raise OAuthError(
                400,
                "invalid_client_metadata",
                "only public clients (token_endpoint_auth_method none) can "
                "register; they prove themselves with PKCE",
            )
        redirect_uris = metadata["redirect_uris"]
        uris = [str(u) for u in redirect_uris] if isinstance(redirect_uris, list) else []
        given = metadata.get("client_name")
        name = given if isinstance(given, str) else "MCP client"
        client_id = issue_client_id(await self.store.secret(), name, uris)
        await send_json(
            send,
            201,
            {
                "client_id": client_id,
                "client_id_issued_at": int(time.time()),
                "client_name": name,
                "redirect_uris": uris,
                "token_endpoint_auth_method": "none",
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                **(
                    {"application_type": metadata["application_type"]}
                    if "application_type" in metadata
                    else {}
                ),
            },
        )

    # --- authorization --------------------------------------------------------------------

    async def authorize(self, scope: Scope, receive: Receive, send: Send) -> None:
        """GET: validate and ask for consent; POST: the consent decision."""
        if scope["method"] == "POST":
            await self._consent(scope, receive, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            raise method_not_allowed("GET, POST")
        client, pending = await self._authorization_request(scope)
        consent_name, browser_name, secure = consent.cookie_names(request_origin(scope))
        secret = await self.store.secret()
        if pending.provider is not None and consent.client_digest(
            client.client_id, pending.provider
        ) in consent.read_consent(secret, cookies(scope).get(consent_name)):
            await self._to_provider(scope, send, pending)
            return
        request_id = secrets.token_urlsafe(24)
        await self.state.put_pending(request_id, pending)
        cookie = (
            f"{browser_name}={pending.browser}; Path=/; HttpOnly; SameSite=Lax; "
            f"Max-Age={PENDING_TTL}{secure}"
        )
        choices = (
            [self.providers[pending.provider]]
            if pending.provider is not None
            else list(self.providers)
        )
        await pages.send_consent(
            send,
            action=self.authorize_path,
            request_id=request_id,
            client=client,
            redirect_href=pending.redirect_href,
            scopes=scope_tokens(pending.scope),
            cookie=cookie,
            provider_authorize=[await self._authorize_endpoint(p.index) for p in choices],
            choices=[(p.index, p.name) for p in choices] if len(self.providers) > 1 else [],
        )

    async def _authorize_endpoint(self, index: int) -> str | None:
        try:
            return navigable((await self._provider(index)).get("authorization_endpoint"))
        except OAuthError:
            return None  # the consent page still works; only its CSP is narrower

    async def _authorization_request(
        self, scope: Scope
    ) -> tuple[BrokerClient, PendingAuthorization]:
        """The client and its checked request. Until the redirect URI is known to be the
        client's, errors are answered in place: a redirect to an unchecked URI is how codes and
        errors leak."""
        params = query_params(scope)
        client = await self._client(params.get("client_id", ""))
        try:
            requested = parse_redirect_uri(params.get("redirect_uri", ""))
        except InvalidUri as exc:
            raise OAuthError(400, "invalid_request", str(exc)) from exc
        if not redirect_matches(client.redirect_uris, requested):
            raise OAuthError(
                400,
                "invalid_request",
                f"redirect_uri {requested.href!r} is not registered for this "
                f"client (registered: {list(client.redirect_uris)})",
            )
        state = params.get("state")
        if params.get("response_type") != "code":
            raise OAuthError(
                400,
                "unsupported_response_type",
                "only response_type=code is supported",
                redirect_href=requested.href,
                state=state,
            )
        challenge = params.get("code_challenge", "")
        if params.get("code_challenge_method") != "S256" or not 43 <= len(challenge) <= 128:
            raise OAuthError(
                400,
                "invalid_request",
                "PKCE is required: code_challenge with code_challenge_method=S256",
                redirect_href=requested.href,
                state=state,
            )
        _, browser_name, _ = consent.cookie_names(request_origin(scope))
        return client, PendingAuthorization(
            client_id=client.client_id,
            client_name=client.name,
            redirect_uri=params["redirect_uri"],
            redirect_href=requested.href,
            state=state,
            challenge=challenge,
            scope=scope_param(params.get("scope"), self.scopes, requested.href, state),
            resource=self._target(scope, params.get("resource"), requested.href, state),
            browser=cookies(scope).get(browser_name) or secrets.token_urlsafe(24),
            provider=pick_by_hint(self.providers, params.get("login_hint")),
            login_hint=params.get("login_hint"),
        )

    def _target(
        self,
        scope: Scope,
        given: str | None,
        redirect_href: str | None = None,
        state: str | None = None,
    ) -> str:
        """The resource a request is for: this route's (RFC 8707; MCP clients MUST send it on
        authorization and token requests, as the protected resource metadata names it)."""
        expected = self.mcp.resource or request_origin(scope) + self.mcp.mcp_path
        if given is not None and given.rstrip("/") != expected.rstrip("/"):
            raise OAuthError(
                400,
                "invalid_target",
                f"resource {given[:200]!r} is not served here; this authorization server "
                f"issues tokens for {expected!r} only",
                redirect_href=redirect_href,
                state=state,
            )
        return expected

    async def _consent(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Checked before anything is read or consumed: another site's form must not be able to
        # answer (or use up) a pending sign-in.
        foreign = consent.cross_origin(scope)
        if foreign is not None:
            raise OAuthError(403, "access_denied", foreign)
        form = form_params(await read_body(receive, MAX_FORM))
        pending = await self.state.take_pending(form.get("request", ""))
        if pending is None:
            raise OAuthError(
                400,
                "invalid_request",
                "unknown, expired or already answered "
                "authorization request; start the sign-in again",
            )
        consent_name, browser_name, secure = consent.cookie_names(request_origin(scope))
        jar = cookies(scope)
        if not hmac.compare_digest(jar.get(browser_name, ""), pending.browser):
            raise OAuthError(
                400,
                "invalid_request",
                "this consent was not given in the browser that started the sign-in; start again",
            )
        pending = self._decision(form.get("decision", ""), pending)
        secret = await self.store.secret()
        digests = consent.read_consent(secret, jar.get(consent_name))
        assert pending.provider is not None  # a decision that allows names its provider
        digest = consent.client_digest(pending.client_id, pending.provider)
        if digest not in digests:
            digests.append(digest)
        cookie = (
            f"{consent_name}={consent.write_consent(secret, digests)}; Path=/; "
            f"HttpOnly; SameSite=Lax; Max-Age={CONSENT_DAYS * 86400}{secure}"
        )
        await self._to_provider(scope, send, pending, [(b"set-cookie", cookie.encode())])

    def _decision(self, decision: str, pending: PendingAuthorization) -> PendingAuthorization:
        """The pending request with the provider the user allowed it at: `allow` when there
        was no choice, `allow-<index>` when there was one; anything else is a denial."""
        chosen = pending.provider
        if chosen is None and decision.startswith("allow-") and decision[6:].isdigit():
            index = int(decision[6:])
            if index < len(self.providers):
                return replace(pending, provider=index)
        if chosen is not None and decision in ("allow", f"allow-{chosen}"):
            return pending
        if decision.startswith("allow"):
            raise OAuthError(
                400,
                "invalid_request",
                "choose the identity provider to sign in with; start the sign-in again",
            )
        raise OAuthError(
            400,
            "access_denied",
            "the user denied the request",
            redirect_href=pending.redirect_href,
            state=pending.state,
        )

    async def _to_provider(
        self,
        scope: Scope,
        send: Send,
        pending: PendingAuthorization,
        headers: Headers | None = None,
    ) -> None:
        assert pending.provider is not None  # chosen by now: the only one, a hint or the user
        signin = self._signin(pending.provider)
        endpoint = navigable((await self._provider(signin.index)).get("authorization_endpoint"))
        if endpoint is None:
            raise OAuthError(
                502,
                "server_error",
                "the identity provider's metadata has no "
                "usable authorization_endpoint (an http or https URL)",
            )
        upstream_state = secrets.token_urlsafe(32)
        upstream = UpstreamRequest(
            pending,
            pkce.new_verifier(),
            request_origin(scope) + self.callback_path,
            signin.index,
        )
        await self.state.put_upstream(upstream_state, upstream)
        params = {
            "response_type": "code",
            "client_id": signin.client_id,
            "redirect_uri": upstream.callback,
            "scope": pending.scope,
            "state": upstream_state,
            "code_challenge": pkce.s256(upstream.verifier),
            "code_challenge_method": "S256",
        }
        if pending.resource and signin.forwards_resource:
            params["resource"] = pending.resource
        if pending.login_hint:
            params["login_hint"] = pending.login_hint
        await _redirect(send, with_query(endpoint, urlencode(params)), headers)

    async def callback(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The provider's redirect: check state and iss, exchange, hand the client a code."""
        params = query_params(scope)
        upstream = await self.state.take_upstream(params.get("state", ""))
        if upstream is None:
            raise OAuthError(
                400,
                "invalid_request",
                "unknown, expired or already used state; start the sign-in again",
            )
        provider = await self._provider(upstream.provider)
        expected_iss = provider.get("issuer")
        iss = params.get("iss")
        if (iss is not None and iss != expected_iss) or (
            iss is None and provider.get("authorization_response_iss_parameter_supported")
        ):
            raise OAuthError(
                400,
                "invalid_request",
                f"the authorization response iss {iss!r} "
                f"is not the provider issuer {expected_iss!r} (RFC 9207 mix-up "
                "defence)",
            )
        pending = upstream.pending
        if "error" in params:
            raise OAuthError(
                400,
                params["error"],
                params.get("error_description", "the provider refused"),
                redirect_href=pending.redirect_href,
                state=pending.state,
            )
        status, tokens = await self._provider_token(
            upstream.provider, provider, self._exchange_form(upstream, params.get("code", ""))
        )
        if status != 200 or not isinstance(tokens, dict) or "access_token" not in tokens:
            log.warning("provider code exchange failed: HTTP %s", status)
            raise OAuthError(
                502,
                "server_error",
                "the identity provider refused the code exchange",
                redirect_href=pending.redirect_href,
                state=pending.state,
            )
        code = secrets.token_urlsafe(32)
        await self.state.put_code(
            code,
            IssuedCode(
                pending.client_id,
                pending.redirect_uri,
                pending.challenge,
                tokens,
                upstream.provider,
            ),
        )
        out = {"code": code, "iss": self._issuer(scope)}
        if pending.state is not None:
            out["state"] = pending.state
        await _redirect(send, with_query(pending.redirect_href, urlencode(out)))

    def _exchange_form(self, upstream: UpstreamRequest, code: str) -> dict[str, str]:
        """The provider's code exchange, `resource` included if the provider takes it."""
        form = {
            "grant_type": "authorization_code",
            "code": code,
            "redirect_uri": upstream.callback,
            "code_verifier": upstream.verifier,
        }
        if upstream.pending.resource and self._signin(upstream.provider).forwards_resource:
            form["resource"] = upstream.pending.resource
        return form

    async def _provider_token(
        self, index: int, provider: dict[str, Any], form: dict[str, str]
    ) -> tuple[int, Any]:
        endpoint = provider.get("token_endpoint")
        session = self.session()
        if not isinstance(endpoint, str) or session is None:
            return 502, None
        try:
            async with asyncio.timeout(UPSTREAM_TIMEOUT):
                async with session.post(
                    endpoint,
                    data={"client_id": self._signin(index).client_id, **form},
                    headers={"Accept": "application/json"},
                ) as response:
                    body = await response.read()
                    try:
                        return response.status, orjson.loads(body)
                    except orjson.JSONDecodeError:
                        return 502, None
        except (TimeoutError, aiohttp.ClientError) as exc:
            why = failure_text(exc)
            log.warning("provider token endpoint %s unreachable: %s", shown_url(endpoint), why)
            return 502, None

    # --- token ----------------------------------------------------------------------------

    async def token(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Redeem the gateway's one-time code (PKCE checked) or rotate a refresh token."""
        if scope["method"] != "POST":
            raise method_not_allowed("POST")
        form = form_params(await read_body(receive, MAX_FORM))
        self._target(scope, form.get("resource"))
        grant = form.get("grant_type")
        if grant == "authorization_code":
            tokens, idp = await self._redeem(form)
        elif grant == "refresh_token":
            tokens, idp = await self._refresh(form)
        else:
            raise OAuthError(
                400,
                "unsupported_grant_type",
                f"grant_type {grant!r} is not supported (authorization_code, refresh_token)",
            )
        # Both grants checked client_id against the code or refresh token: it is the holder.
        await self.revocation.bind(form.get("client_id", ""), tokens, idp)
        await send_json(send, 200, tokens, [(b"pragma", b"no-cache")])

    async def revoke(self, scope: Scope, receive: Receive, send: Send) -> None:
        """RFC 7009: revoke a token this client holds, here and at the provider."""
        if scope["method"] != "POST":
            raise method_not_allowed("POST")
        form = form_params(await read_body(receive, MAX_FORM))
        client_id = form.get("client_id", "")
        if not client_id:
            raise OAuthError(
                400,
                "invalid_client",
                "client_id is required: a token can only be revoked by the client it was issued to",
            )
        await self._client(client_id)
        token = form.get("token")
        if not token:
            raise OAuthError(400, "invalid_request", "token is required")
        upstream = await self.revocation.revoke(client_id, token, form.get("token_type_hint"))
        if upstream is not None:
            revoked, kind, idp = upstream
            provider = await self._provider(idp)
            await revoke_at_provider(
                self.session(),
                provider.get("revocation_endpoint"),
                self._signin(idp).client_id,
                revoked,
                kind,
            )
        await send_json(send, 200, {}, [(b"pragma", b"no-cache")])

    async def _redeem(self, form: dict[str, str]) -> tuple[dict[str, Any], int]:
        issued = await self.state.take_code(form.get("code", ""))
        if issued is None:
            raise OAuthError(
                400, "invalid_grant", "unknown, expired or already used authorization code"
            )
        if not hmac.compare_digest(form.get("client_id", ""), issued.client_id):
            raise OAuthError(400, "invalid_grant", "the code was issued to another client")
        if not hmac.compare_digest(form.get("redirect_uri", ""), issued.redirect_uri):
            raise OAuthError(
                400, "invalid_grant", "redirect_uri does not match the authorization request"
            )
        if not pkce.verify(form.get("code_verifier", ""), issued.challenge):
            raise OAuthError(
                400,
                "invalid_grant",
                "PKCE verification failed (code_verifier does not match the code_challenge)",
            )
        tokens = await self.refresh.issue(issued.client_id, issued.tokens, idp=issued.provider)
        return tokens, issued.provider

    async def _refresh(self, form: dict[str, str]) -> tuple[dict[str, Any], int]:
        client_id = form.get("client_id", "")
        if not client_id:
            raise OAuthError(
                400,
                "invalid_client",
                "client_id is required: a refresh token "
                "can only be used by the client it was issued to",
            )
        await self._client(client_id)
        if not form.get("refresh_token"):
            raise OAuthError(400, "invalid_request", "refresh_token is required")
        narrowed = scope_param(form.get("scope"))  # refused before the refresh token is taken
        try:
            grant = await self.refresh.take(form["refresh_token"])
        except RefreshReused as exc:
            log.warning(
                "a rotated-away refresh token was presented for client %s; its sign-in was revoked",
                client_id[:80],
            )
            raise OAuthError(
                400,
                "invalid_grant",
                "this refresh token was already exchanged "
                "once; using it again revokes the sign-in (sign in again)",
            ) from exc
        if grant is None:
            raise OAuthError(400, "invalid_grant", "unknown, expired or revoked refresh token")
        if not hmac.compare_digest(grant.client_id, client_id):
            await self.refresh.put_back(grant)
            raise OAuthError(400, "invalid_grant", "the refresh token was issued to another client")
        try:
            provider = await self._provider(grant.idp)
        except OAuthError:
            await self.refresh.put_back(grant)  # the provider's fault: the token stays valid
            raise
        upstream = {"grant_type": "refresh_token", "refresh_token": grant.provider_token}
        if narrowed:
            upstream["scope"] = narrowed
        status, body = await self._provider_token(grant.idp, provider, upstream)
        if body is None or status >= 500:
            await self.refresh.put_back(grant)
            raise OAuthError(
                502,
                "temporarily_unavailable",
                "the identity provider's token "
                "endpoint did not answer; the refresh token is still valid, try "
                "again",
            )
        if status != 200 or not isinstance(body, dict) or "access_token" not in body:
            raise await self._refused_refresh(grant, status, body)
        return await self.refresh.rotate(grant, body), grant.idp

    async def _refused_refresh(self, grant: RefreshGrant, status: int, body: object) -> OAuthError:
        """The provider's refusal, passed on. invalid_grant means its token is gone; anything
        else (a scope it will not grant, say) leaves it valid, and so the client's."""
        error = body.get("error") if isinstance(body, dict) else None
        if error != "invalid_grant":
            await self.refresh.put_back(grant)
        description = body.get("error_description") if isinstance(body, dict) else None
        return OAuthError(
            status if 400 <= status < 500 else 502,
            error if isinstance(error, str) else "invalid_grant",
            description
            if isinstance(description, str)
            else "the identity provider refused the refresh",
        )
