"""Broker mode: the gateway is the authorization server MCP clients see.

Clients register with the gateway (DCR or CIMD), authorize at the gateway (exact redirect URI,
PKCE S256, a consent page per client because every client reaches the provider through one
static client id), and get the gateway's own one-time code with `iss` = the gateway issuer
(RFC 9207). The gateway signs the user in at the provider as `mcp.clientId` with its own PKCE and
state, and hands the provider's token response over unchanged, so `/mcp` validates exactly the
same JWTs as in facade mode.
"""

from __future__ import annotations

import asyncio
import hashlib
import hmac
import logging
import secrets
import time
from collections.abc import Callable
from http.cookies import SimpleCookie
from typing import Any
from urllib.parse import parse_qsl, urlencode

import aiohttp
import orjson

from .. import pkce
from ..controlplane.discovery import DiscoveryCache
from ..controlplane.fetch import FetchError
from ..controlplane.snapshot import CompiledMcp
from ..dataplane.asgi import Headers, Receive, Scope, Send, header
from ..dataplane.oauth_endpoints import read_body
from ..dataplane.origin import request_origin
from ..dataplane.responses import send_error, send_json
from ..providers import RegistrationError
from ..registration import parse_registration
from ..urls import InvalidUri, navigable, parse_redirect_uri, redirect_matches, with_query
from . import pages
from .clients import (
    BrokerClient,
    ClientError,
    MetadataDocuments,
    issue_client_id,
    read_client_id,
)
from .refresh import RefreshReused, RefreshTokens
from .store import BrokerStore

log = logging.getLogger("mcp_oauth_gateway.broker")

PENDING_TTL = 600
CODE_TTL = 300
CONSENT_DAYS = 30
MAX_FORM = 16 * 1024
UPSTREAM_TIMEOUT = 15.0


class RepeatedParameter(ValueError):
    """RFC 6749 §3.1: a request parameter appears more than once."""


def single_params(text: str) -> dict[str, str]:
    """Query or form parameters; a repeated one is refused rather than resolved, since the
    gateway and the provider could pick different copies."""
    pairs = parse_qsl(text, keep_blank_values=True)
    params = dict(pairs)
    if len(params) != len(pairs):
        seen: set[str] = set()
        for name, _ in pairs:
            if name in seen:
                raise RepeatedParameter(f"the parameter {name[:40]!r} appears more than once; "
                                        "send each parameter once (RFC 6749 §3.1)")
            seen.add(name)
    return params


def _query(scope: Scope) -> dict[str, str]:
    return single_params(scope.get("query_string", b"").decode("latin-1"))


def _cookies(scope: Scope) -> dict[str, str]:
    raw = header(scope, b"cookie")
    if not raw:
        return {}
    jar: SimpleCookie = SimpleCookie()
    try:
        jar.load(raw.decode("latin-1"))
    except Exception:  # a malformed Cookie header is treated as no cookies
        return {}
    return {name: morsel.value for name, morsel in jar.items()}


async def _redirect(send: Send, location: str, headers: Headers = ()) -> None:
    await send({"type": "http.response.start", "status": 302,
                "headers": [(b"location", location.encode()), (b"content-length", b"0"),
                            (b"cache-control", b"no-store"), *headers]})
    await send({"type": "http.response.body", "body": b""})


class Broker:
    """The broker's endpoints for one policy; stateless apart from `store`."""

    def __init__(self, mcp: CompiledMcp, discovery: DiscoveryCache | None, store: BrokerStore,
                 documents: MetadataDocuments,
                 session: Callable[[], aiohttp.ClientSession | None], trust_forwarded: bool):
        self.mcp = mcp
        self.discovery = discovery
        self.store = store
        self.refresh = RefreshTokens(store)
        self.documents = documents
        self.session = session
        self.trust_forwarded = trust_forwarded
        self.authorize_path = mcp.mcp_path + "/oauth/authorize"
        self.token_path = mcp.mcp_path + "/oauth/token"
        self.callback_path = mcp.mcp_path + "/oauth/callback"
        self.scopes = " ".join(mcp.scopes_supported)

    def routes(self) -> dict[str, Callable[[Scope, Receive, Send], Any]]:
        """Path → handler for what MCP clients call (the route's CORS applies)."""
        return {
            self.mcp.asm_path: self.metadata,
            self.mcp.registration_path: self.register,
            self.token_path: self.token,
        }

    def pages(self) -> dict[str, Callable[[Scope, Receive, Send], Any]]:
        """Path → handler for the browser pages, which no CORS setting may expose to scripts
        of other sites."""
        return {self.authorize_path: self.authorize, self.callback_path: self.callback}

    # --- helpers --------------------------------------------------------------------------

    def _origin(self, scope: Scope) -> str:
        return request_origin(scope, self.trust_forwarded)

    def _issuer(self, scope: Scope) -> str:
        return self._origin(scope) + self.mcp.mcp_path

    def _cookie_names(self, scope: Scope) -> tuple[str, str, str]:
        # `__Host-` needs Secure, which browsers only keep for https origins.
        secure = self._origin(scope).startswith("https://")
        prefix = "__Host-" if secure else ""
        return f"{prefix}mcp-consent", f"{prefix}mcp-authz", "; Secure" if secure else ""

    async def _provider(self) -> dict[str, Any]:
        if self.discovery is None:
            raise FetchError("no discovery document is configured for this provider")
        return await self.discovery.get()

    async def _provider_or_502(self, send: Send) -> dict[str, Any] | None:
        """The provider's metadata, or None after answering 502 (the provider is down)."""
        try:
            return await self._provider()
        except FetchError as exc:
            await send_error(send, 502, "temporarily_unavailable",
                             f"the identity provider's metadata is unavailable: {exc}")
            return None

    async def _client(self, client_id: str) -> BrokerClient:
        client = read_client_id(await self.store.secret(), client_id)
        if client is not None:
            return client
        if client_id.startswith(("https://", "http://")):
            return await self.documents.resolve(client_id)
        raise ClientError("invalid_client", f"client_id {client_id[:80]!r} is not registered "
                          "with this gateway (register through the registration_endpoint or "
                          "use a client metadata document URL)")

    async def _error_to_client(self, send: Send, scope: Scope, redirect_href: str, state: str |
                               None, error: str, description: str) -> None:
        """An OAuth error sent back to the client, only ever to a redirect URI that matched."""
        params = {"error": error, "error_description": description, "iss": self._issuer(scope)}
        if state is not None:
            params["state"] = state
        await _redirect(send, with_query(redirect_href, urlencode(params)))

    def _consent_digest(self, client_id: str) -> str:
        return hashlib.sha256(client_id.encode()).hexdigest()[:16]

    def _read_consent(self, secret: bytes, value: str | None) -> list[str]:
        if not value or "." not in value:
            return []
        body, _, signature = value.rpartition(".")
        expected = hmac.new(secret, body.encode(), hashlib.sha256).hexdigest()[:32]
        if not hmac.compare_digest(signature, expected):
            return []
        return [d for d in body.split("-") if d]

    def _write_consent(self, secret: bytes, digests: list[str]) -> str:
        body = "-".join(digests[-20:])
        return f"{body}.{hmac.new(secret, body.encode(), hashlib.sha256).hexdigest()[:32]}"

    # --- metadata and registration --------------------------------------------------------

    async def metadata(self, scope: Scope, receive: Receive, send: Send) -> None:
        """RFC 8414 metadata of the gateway as authorization server."""
        if scope["method"] not in ("GET", "HEAD"):
            await send_error(send, 405, "invalid_request", "use GET", [(b"allow", b"GET")])
            return
        origin = self._origin(scope)
        document: dict[str, Any] = {
            "issuer": origin + self.mcp.mcp_path,
            "authorization_endpoint": origin + self.authorize_path,
            "token_endpoint": origin + self.token_path,
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
            await send_error(send, 405, "invalid_request", "use POST", [(b"allow", b"POST")])
            return
        raw = await read_body(receive, MAX_FORM * 4)
        if raw is None:
            await send_error(send, 413, "invalid_client_metadata", "registration body too large")
            return
        try:
            metadata = parse_registration(raw)
        except RegistrationError as exc:
            await send_error(send, exc.status, exc.error, exc.description)
            return
        if metadata.get("token_endpoint_auth_method", "none") != "none":
            await send_error(send, 400, "invalid_client_metadata",
                             "only public clients (token_endpoint_auth_method none) can "
                             "register; they prove themselves with PKCE")
            return
        uris = [str(u) for u in metadata["redirect_uris"]]  # type: ignore[union-attr]
        name = metadata.get("client_name") if isinstance(metadata.get("client_name"), str) \
            else "MCP client"
        client_id = issue_client_id(await self.store.secret(), str(name), uris)
        await send_json(send, 201, {
            "client_id": client_id, "client_id_issued_at": int(time.time()),
            "client_name": name, "redirect_uris": uris, "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"]})

    # --- authorization --------------------------------------------------------------------

    async def authorize(self, scope: Scope, receive: Receive, send: Send) -> None:
        """GET: validate and ask for consent; POST: the consent decision."""
        if scope["method"] == "POST":
            await self._consent(scope, receive, send)
            return
        if scope["method"] not in ("GET", "HEAD"):
            await send_error(send, 405, "invalid_request", "use GET", [(b"allow", b"GET, POST")])
            return
        # Until the redirect URI is known to be the client's, every error is answered here,
        # never redirected: a redirect to an unchecked URI is how codes and errors leak.
        try:
            params = _query(scope)
            client = await self._client(params.get("client_id", ""))
            requested = parse_redirect_uri(params.get("redirect_uri", ""))
        except (RepeatedParameter, InvalidUri) as exc:
            await pages.send_error_page(scope, send, 400, "invalid_request", str(exc))
            return
        except ClientError as exc:
            await pages.send_error_page(scope, send, 400, exc.error, exc.description)
            return
        if not redirect_matches(client.redirect_uris, requested):
            await pages.send_error_page(
                scope, send, 400, "invalid_request",
                f"redirect_uri {requested.href!r} is not registered for this client "
                f"(registered: {list(client.redirect_uris)})")
            return
        state = params.get("state")
        if params.get("response_type") != "code":
            await self._error_to_client(send, scope, requested.href, state,
                                        "unsupported_response_type",
                                        "only response_type=code is supported")
            return
        challenge = params.get("code_challenge", "")
        if params.get("code_challenge_method") != "S256" or not 43 <= len(challenge) <= 128:
            await self._error_to_client(send, scope, requested.href, state, "invalid_request",
                                        "PKCE is required: code_challenge with "
                                        "code_challenge_method=S256")
            return
        consent_name, browser_name, secure = self._cookie_names(scope)
        cookies = _cookies(scope)
        secret = await self.store.secret()
        browser = cookies.get(browser_name) or secrets.token_urlsafe(24)
        request_id = secrets.token_urlsafe(24)
        # `redirect_uri` as the client sent it (the token request must repeat it exactly),
        # `redirect_href` as a browser reads it (where the user is sent back).
        pending = {"client_id": client.client_id, "client_name": client.name,
                   "redirect_uri": params["redirect_uri"], "redirect_href": requested.href,
                   "state": state, "challenge": challenge,
                   "scope": params.get("scope") or self.scopes,
                   "resource": params.get("resource") or self.mcp.resource,
                   "browser": browser}
        consented = self._consent_digest(client.client_id) in self._read_consent(
            secret, cookies.get(consent_name))
        if consented:
            await self._to_provider(scope, send, pending)
            return
        await self.store.put("authz", request_id, pending, PENDING_TTL)
        cookie = (f"{browser_name}={browser}; Path=/; HttpOnly; SameSite=Lax; "
                  f"Max-Age={PENDING_TTL}{secure}")
        try:
            authorize_at = (await self._provider()).get("authorization_endpoint")
        except FetchError:
            authorize_at = None
        await pages.send_consent(send, action=self.authorize_path, request_id=request_id,
                                 client=client, redirect_href=requested.href,
                                 scopes=pending["scope"].split(), cookie=cookie,
                                 provider_authorize=navigable(authorize_at))

    def _cross_origin(self, scope: Scope) -> str | None:
        """Why a consent POST did not come from the gateway's own page, or None."""
        origin = header(scope, b"origin")
        own = self._origin(scope)
        if origin is None:
            # Browsers that send no Origin still send Fetch Metadata, which pages cannot forge.
            if header(scope, b"sec-fetch-site") == b"same-origin":
                return None
            return ("the consent form must be posted from the gateway's own page (no Origin "
                    "header and no Sec-Fetch-Site: same-origin)")
        if origin.decode("latin-1") == own:
            return None
        hint = ""
        if origin.decode("latin-1").partition("://")[2] == own.partition("://")[2]:
            hint = ("; if a proxy in front of the gateway terminates TLS, start the gateway with "
                    "--trust-forwarded-headers")
        return (f"the consent form was posted from {origin.decode('latin-1')[:100]!r}, not from "
                f"the gateway's own origin {own!r}{hint}")

    async def _consent(self, scope: Scope, receive: Receive, send: Send) -> None:
        # Checked before anything is read or consumed: another site's form must not be able to
        # answer (or use up) a pending sign-in.
        foreign = self._cross_origin(scope)
        if foreign is not None:
            await pages.send_error_page(scope, send, 403, "access_denied", foreign)
            return
        raw = await read_body(receive, MAX_FORM)
        try:
            form = single_params((raw or b"").decode("utf-8", "replace"))
        except RepeatedParameter as exc:
            await pages.send_error_page(scope, send, 400, "invalid_request", str(exc))
            return
        pending = await self.store.take("authz", form.get("request", ""))
        if pending is None:
            await pages.send_error_page(scope, send, 400, "invalid_request",
                                        "unknown, expired or already answered authorization "
                                        "request; start the sign-in again")
            return
        consent_name, browser_name, secure = self._cookie_names(scope)
        cookies = _cookies(scope)
        if not hmac.compare_digest(cookies.get(browser_name, ""), pending["browser"]):
            await pages.send_error_page(scope, send, 400, "invalid_request",
                                        "this consent was not given in the browser that "
                                        "started the sign-in; start again")
            return
        if form.get("decision") != "allow":
            await self._error_to_client(send, scope, pending["redirect_href"], pending["state"],
                                        "access_denied", "the user denied the request")
            return
        secret = await self.store.secret()
        digests = self._read_consent(secret, cookies.get(consent_name))
        digest = self._consent_digest(pending["client_id"])
        if digest not in digests:
            digests.append(digest)
        cookie = (f"{consent_name}={self._write_consent(secret, digests)}; Path=/; HttpOnly; "
                  f"SameSite=Lax; Max-Age={CONSENT_DAYS * 86400}{secure}")
        await self._to_provider(scope, send, pending, [(b"set-cookie", cookie.encode())])

    async def _to_provider(self, scope: Scope, send: Send, pending: dict[str, Any],
                           headers: Headers = ()) -> None:
        provider = await self._provider_or_502(send)
        if provider is None:
            return
        endpoint = navigable(provider.get("authorization_endpoint"))
        if endpoint is None:
            await send_error(send, 502, "server_error", "the identity provider's metadata has "
                             "no usable authorization_endpoint (an http or https URL)")
            return
        upstream_state = secrets.token_urlsafe(32)
        verifier = pkce.new_verifier()
        # Kept with the state so the replica that receives the callback exchanges the code
        # with the very redirect URI the provider saw.
        callback = self._origin(scope) + self.callback_path
        await self.store.put("upstream", upstream_state,
                             {**pending, "verifier": verifier, "callback": callback},
                             PENDING_TTL)
        params = {"response_type": "code", "client_id": self.mcp.client_id or "",
                  "redirect_uri": callback,
                  "scope": pending["scope"], "state": upstream_state,
                  "code_challenge": pkce.s256(verifier), "code_challenge_method": "S256"}
        if pending.get("resource"):
            params["resource"] = pending["resource"]
        await _redirect(send, with_query(endpoint, urlencode(params)), headers)

    async def callback(self, scope: Scope, receive: Receive, send: Send) -> None:
        """The provider's redirect: check state and iss, exchange, hand the client a code."""
        try:
            params = _query(scope)
        except RepeatedParameter as exc:
            await pages.send_error_page(scope, send, 400, "invalid_request", str(exc))
            return
        pending = await self.store.take("upstream", params.get("state", ""))
        if pending is None:
            await pages.send_error_page(scope, send, 400, "invalid_request",
                                        "unknown, expired or already used state; start the "
                                        "sign-in again")
            return
        provider = await self._provider_or_502(send)
        if provider is None:
            return
        expected_iss = provider.get("issuer")
        iss = params.get("iss")
        if (iss is not None and iss != expected_iss) or (
                iss is None and provider.get("authorization_response_iss_parameter_supported")):
            await pages.send_error_page(scope, send, 400, "invalid_request",
                                        f"the authorization response iss {iss!r} is not the "
                                        f"provider issuer {expected_iss!r} (RFC 9207 mix-up "
                                        "defence)")
            return
        if "error" in params:
            await self._error_to_client(send, scope, pending["redirect_href"], pending["state"],
                                        params["error"], params.get("error_description",
                                                                    "the provider refused"))
            return
        status, tokens = await self._provider_token(provider, {
            "grant_type": "authorization_code", "code": params.get("code", ""),
            "redirect_uri": pending["callback"], "code_verifier": pending["verifier"],
            **({"resource": pending["resource"]} if pending.get("resource") else {})})
        if status != 200 or not isinstance(tokens, dict) or "access_token" not in tokens:
            log.warning("provider code exchange failed: HTTP %s", status)
            await self._error_to_client(send, scope, pending["redirect_href"], pending["state"],
                                        "server_error", "the identity provider refused the "
                                        "code exchange")
            return
        code = secrets.token_urlsafe(32)
        await self.store.put("code", code, {
            "client_id": pending["client_id"], "redirect_uri": pending["redirect_uri"],
            "challenge": pending["challenge"], "tokens": tokens}, CODE_TTL)
        out = {"code": code, "iss": self._issuer(scope)}
        if pending["state"] is not None:
            out["state"] = pending["state"]
        await _redirect(send, with_query(pending["redirect_href"], urlencode(out)))

    async def _provider_token(self, provider: dict[str, Any],
                              form: dict[str, str]) -> tuple[int, Any]:
        endpoint = provider.get("token_endpoint")
        session = self.session()
        if not isinstance(endpoint, str) or session is None:
            return 502, None
        try:
            async with asyncio.timeout(UPSTREAM_TIMEOUT):
                async with session.post(endpoint, data={"client_id": self.mcp.client_id or "",
                                                        **form},
                                        headers={"Accept": "application/json"}) as response:
                    body = await response.read()
                    try:
                        return response.status, orjson.loads(body)
                    except orjson.JSONDecodeError:
                        return 502, None
        except (TimeoutError, aiohttp.ClientError) as exc:
            log.warning("provider token endpoint %s unreachable: %s", endpoint, exc)
            return 502, None

    # --- token ----------------------------------------------------------------------------

    async def token(self, scope: Scope, receive: Receive, send: Send) -> None:
        """Redeem the gateway's one-time code (PKCE checked) or rotate a refresh token."""
        if scope["method"] != "POST":
            await send_error(send, 405, "invalid_request", "use POST", [(b"allow", b"POST")])
            return
        raw = await read_body(receive, MAX_FORM)
        try:
            form = single_params((raw or b"").decode("utf-8", "replace"))
        except RepeatedParameter as exc:
            await send_error(send, 400, "invalid_request", str(exc))
            return
        grant = form.get("grant_type")
        if grant == "authorization_code":
            await self._redeem(form, send)
        elif grant == "refresh_token":
            await self._refresh(form, send)
        else:
            await send_error(send, 400, "unsupported_grant_type",
                             f"grant_type {grant!r} is not supported (authorization_code, "
                             "refresh_token)")

    async def _redeem(self, form: dict[str, str], send: Send) -> None:
        record = await self.store.take("code", form.get("code", ""))
        if record is None:
            await send_error(send, 400, "invalid_grant", "unknown, expired or already used "
                             "authorization code")
            return
        if not hmac.compare_digest(form.get("client_id", ""), record["client_id"]):
            await send_error(send, 400, "invalid_grant", "the code was issued to another client")
            return
        if not hmac.compare_digest(form.get("redirect_uri", ""), record["redirect_uri"]):
            await send_error(send, 400, "invalid_grant", "redirect_uri does not match the "
                             "authorization request")
            return
        if not pkce.verify(form.get("code_verifier", ""), record["challenge"]):
            await send_error(send, 400, "invalid_grant", "PKCE verification failed "
                             "(code_verifier does not match the code_challenge)")
            return
        tokens = await self.refresh.issue(record["client_id"], record["tokens"])
        await send_json(send, 200, tokens, [(b"pragma", b"no-cache")])

    async def _refresh(self, form: dict[str, str], send: Send) -> None:
        client_id = form.get("client_id", "")
        if not client_id:
            await send_error(send, 400, "invalid_client", "client_id is required: a refresh "
                             "token can only be used by the client it was issued to")
            return
        try:
            await self._client(client_id)
        except ClientError as exc:
            await send_error(send, 400, "invalid_client", exc.description)
            return
        if not form.get("refresh_token"):
            await send_error(send, 400, "invalid_request", "refresh_token is required")
            return
        # The provider first: a claimed token is then only put back for the provider's faults.
        provider = await self._provider_or_502(send)
        if provider is None:
            return
        try:
            grant = await self.refresh.take(form["refresh_token"])
        except RefreshReused:
            log.warning("a rotated-away refresh token was presented for client %s; its sign-in "
                        "was revoked", client_id[:80])
            await send_error(send, 400, "invalid_grant", "this refresh token was already "
                             "exchanged once; using it again revokes the sign-in (sign in "
                             "again)")
            return
        if grant is None:
            await send_error(send, 400, "invalid_grant", "unknown, expired or revoked refresh "
                             "token")
            return
        if not hmac.compare_digest(grant.client_id, client_id):
            await self.refresh.put_back(grant)
            await send_error(send, 400, "invalid_grant", "the refresh token was issued to "
                             "another client")
            return
        upstream = {"grant_type": "refresh_token", "refresh_token": grant.provider_token}
        if form.get("scope"):
            upstream["scope"] = form["scope"]
        status, body = await self._provider_token(provider, upstream)
        if body is None or status >= 500:
            await self.refresh.put_back(grant)
            await send_error(send, 502, "temporarily_unavailable",
                             "the identity provider's token endpoint did not answer; the "
                             "refresh token is still valid, try again")
            return
        if status != 200 or not isinstance(body, dict) or "access_token" not in body:
            # invalid_grant means the provider's token is gone; anything else (a scope it will
            # not grant, say) leaves it valid, and so the client's.
            if not (isinstance(body, dict) and body.get("error") == "invalid_grant"):
                await self.refresh.put_back(grant)
            await send_json(send, status, body, [(b"pragma", b"no-cache")])
            return
        await send_json(send, 200, await self.refresh.rotate(grant, body),
                        [(b"pragma", b"no-cache")])
