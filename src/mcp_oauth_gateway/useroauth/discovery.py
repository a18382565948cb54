"""Finding a third-party MCP server's authorization server the way an MCP client does
(MCP authorization, 2025-11-25 and 2026-07-28):

1. an unauthenticated `ping` to the backend, whose 401 `WWW-Authenticate` may name its
   protected resource metadata (`resource_metadata`, RFC 9728 §5.1);
2. that document, else the RFC 9728 well-known URLs (path form, then root); its `resource` must
   name the backend, and its first `authorization_servers` entry is the issuer;
3. that issuer's metadata: RFC 8414 path insertion, then OpenID Connect (path insertion, then
   appending), whose `issuer` must be the one the URL was built from.

A configured `issuer` starts at step 3; explicit endpoints skip discovery. Every document is
fetched within a time and size limit, must be a JSON object, and every endpoint must be an
https URL (http only on loopback). A step that fails raises `DiscoveryError` saying which step,
which URL, what came back and what to set instead."""

from __future__ import annotations

import dataclasses
import logging

import ada_url
import aiohttp

from .. import jsonrpc
from ..mcp_methods import PING
from ..oauth_scopes import scope_tokens
from ..urls import shown_url
from . import www_authenticate
from .metadata import (
    AuthServer,
    Endpoints,
    MetadataProblem,
    ResourceMetadata,
    endpoint_url,
    from_endpoints,
    issuer_url,
    read_resource_metadata,
    read_server_metadata,
)
from .transport import Reply, Unreachable, exchange

log = logging.getLogger("mcp_oauth_gateway.useroauth")

DISCOVERY_TIMEOUT = 10.0
PROTOCOL_VERSION = "2025-11-25"
PRM_SUFFIX = "/.well-known/oauth-protected-resource"
RFC8414_SUFFIX = "/.well-known/oauth-authorization-server"
OIDC_SUFFIX = "/.well-known/openid-configuration"
FIX_SKIP = "set userOAuth.issuer, or userOAuth.authorizationEndpoint and tokenEndpoint"
_PING = jsonrpc.request(1, PING, None)
_MCP_HEADERS = {
    "Accept": "application/json, text/event-stream",
    "Content-Type": "application/json",
    "MCP-Protocol-Version": PROTOCOL_VERSION,
}


class DiscoveryError(Exception):
    """Discovery failed; the message says which step, which URL, what came back and the fix."""


def _origin_and_path(url: str, what: str) -> tuple[str, str, str]:
    """(`scheme://host[:port]`, path without trailing slashes, query) of an absolute URL."""
    try:
        parsed = ada_url.URL(url)
    except ValueError as exc:
        raise DiscoveryError(f"{what} {shown_url(url)!r} is not an absolute URL") from exc
    return f"{parsed.protocol}//{parsed.host}", parsed.pathname.rstrip("/"), parsed.search


def resource_metadata_url(www_authenticate_header: str | None, backend_url: str) -> list[str]:
    """Where the backend's protected resource metadata may be, in the order to try: the URL its
    challenge names (alone: a server that names one serves it there), else the RFC 9728 §3.1
    path form and the root."""
    named = www_authenticate.parameter(www_authenticate_header, "resource_metadata")
    if len(named) > 1:
        raise DiscoveryError(
            f"step 1 (the backend's 401): POST {shown_url(backend_url)} answered a "
            f"WWW-Authenticate naming {len(named)} different resource_metadata URLs "
            f"({', '.join(shown_url(u) for u in named)}); the gateway will not guess: {FIX_SKIP}"
        )
    if named:
        try:
            href = endpoint_url(named[0], "the resource_metadata URL", allow_http=True)
        except MetadataProblem as exc:
            raise DiscoveryError(
                f"step 1 (the backend's 401): POST {shown_url(backend_url)} answered a "
                f"WWW-Authenticate whose {exc}; {FIX_SKIP}"
            ) from exc
        origin, _, _ = _origin_and_path(backend_url, "the backend URL")
        if href.startswith("http:") and origin.startswith("https:"):
            raise DiscoveryError(
                f"step 1 (the backend's 401): the https backend {shown_url(backend_url)} names "
                f"its metadata at the http URL {shown_url(href)}, which anyone on the way "
                f"could answer; {FIX_SKIP}"
            )
        return [href]
    origin, path, query = _origin_and_path(backend_url, "the backend URL")
    root = origin + PRM_SUFFIX
    return [root] if not path and not query else [origin + PRM_SUFFIX + path + query, root]


def authorization_server_metadata_urls(issuer: str) -> list[str]:
    """The metadata URLs of an issuer in the MCP order: RFC 8414 path insertion, then OpenID
    Connect path insertion and appending (a root issuer has one of each); the issuer's
    trailing slash is dropped before a suffix goes after its path."""
    origin, path, _ = _origin_and_path(issuer, "the issuer")
    if not path:
        return [origin + RFC8414_SUFFIX, origin + OIDC_SUFFIX]
    return [
        origin + RFC8414_SUFFIX + path,
        origin + OIDC_SUFFIX + path,
        origin + path + OIDC_SUFFIX,
    ]


async def discover(
    session: aiohttp.ClientSession,
    backend_url: str,
    *,
    issuer: str | None,
    explicit: Endpoints | None,
    limit: float = DISCOVERY_TIMEOUT,
    allow_http: bool = False,
) -> AuthServer:
    """The backend's authorization server: from `explicit` endpoints (no request at all; an
    `issuer` given too is the one RFC 9207 `iss` is checked against), from the metadata of a
    configured `issuer`, or discovered from the backend itself. `limit` bounds each request;
    `allow_http` allows http endpoints on hosts that are not loopback."""
    if explicit is not None:
        try:
            return from_endpoints(explicit, issuer, allow_http)
        except MetadataProblem as exc:
            raise DiscoveryError(f"userOAuth endpoints: {exc}") from exc
    if issuer is not None:
        return await _server_metadata(session, issuer, "userOAuth.issuer", limit, allow_http)
    challenge = await _probe(session, backend_url, limit)
    document, where = await _resource_metadata(session, backend_url, challenge, limit)
    servers = document.authorization_servers
    source = f"authorization_servers[0] of {shown_url(where)}"
    if len(servers) > 1:
        source += (
            f" (it lists {len(servers)}: the gateway takes the first; set userOAuth.issuer "
            "to take another)"
        )
    server = await _server_metadata(session, servers[0], source, limit, allow_http)
    asked = www_authenticate.bearer_parameter(challenge, "scope")
    scopes = tuple(scope_tokens(asked[0])) if asked else document.scopes_supported
    return dataclasses.replace(server, resource=document.resource, resource_scopes=scopes)


async def _probe(session: aiohttp.ClientSession, backend_url: str, limit: float) -> str | None:
    """Step 1: the backend's WWW-Authenticate for a request without a token (None if absent)."""
    try:
        reply = await exchange(
            session, "POST", backend_url, headers=_MCP_HEADERS, body=_PING, limit=limit
        )
    except Unreachable as exc:
        raise DiscoveryError(
            f"step 1 (the backend's 401): POST {shown_url(backend_url)} failed: {exc}; check "
            f"the backend's address, or {FIX_SKIP}"
        ) from exc
    if reply.status != 401:
        # Not a challenge: its metadata may still be at the well-known URLs.
        log.info("user OAuth: %s answered HTTP %d, not 401", shown_url(backend_url), reply.status)
        return None
    return reply.www_authenticate


async def _resource_metadata(
    session: aiohttp.ClientSession, backend_url: str, challenge: str | None, limit: float
) -> tuple[ResourceMetadata, str]:
    """Step 2: the first protected resource metadata document found, and its URL."""
    tried: list[str] = []
    for url in resource_metadata_url(challenge, backend_url):
        reply = await _get(session, url, limit, PROTOCOL_VERSION)
        document = reply.json_object() if isinstance(reply, Reply) else None
        if document is None or isinstance(reply, str) or reply.status != 200:
            tried.append(f"GET {shown_url(url)}: {_what(reply)}")
            continue
        try:
            return read_resource_metadata(document, backend_url), url
        except MetadataProblem as exc:
            raise DiscoveryError(
                f"step 2 (protected resource metadata, RFC 9728): GET {shown_url(url)}: {exc}; "
                f"reach the backend at the URL it names as its resource, or {FIX_SKIP}"
            ) from exc
    raise DiscoveryError(
        "step 2 (protected resource metadata, RFC 9728): the backend names no usable "
        f"document ({'; '.join(tried)}); {FIX_SKIP}"
    )


async def _server_metadata(
    session: aiohttp.ClientSession, issuer: str, source: str, limit: float, allow_http: bool
) -> AuthServer:
    """Step 3: the issuer's metadata, from the first of its URLs that serves a document."""
    step = "step 3 (authorization server metadata, RFC 8414 / OpenID Connect)"
    try:
        issuer = issuer_url(issuer, f"the issuer ({source})", allow_http)
    except MetadataProblem as exc:
        raise DiscoveryError(f"{step}: {exc}; {FIX_SKIP}") from exc
    tried: list[str] = []
    for url in authorization_server_metadata_urls(issuer):
        reply = await _get(session, url, limit)
        document = reply.json_object() if isinstance(reply, Reply) else None
        if document is None or isinstance(reply, str) or reply.status != 200:
            tried.append(f"GET {shown_url(url)}: {_what(reply)}")
            continue
        try:
            return read_server_metadata(document, issuer, allow_http)
        except MetadataProblem as exc:
            raise DiscoveryError(
                f"{step}: GET {shown_url(url)} (issuer {shown_url(issuer)}, {source}): {exc}; "
                f"{FIX_SKIP}"
            ) from exc
    raise DiscoveryError(
        f"{step}: no metadata document for the issuer {shown_url(issuer)} ({source}): "
        f"{'; '.join(tried)}; {FIX_SKIP}"
    )


async def _get(
    session: aiohttp.ClientSession, url: str, limit: float, protocol: str | None = None
) -> Reply | str:
    """GET a metadata document: the reply, or why there was none."""
    headers = {"Accept": "application/json"}
    if protocol is not None:
        headers["MCP-Protocol-Version"] = protocol
    try:
        return await exchange(session, "GET", url, headers=headers, limit=limit)
    except Unreachable as exc:
        return f"failed: {exc}"


def _what(reply: Reply | str) -> str:
    return reply if isinstance(reply, str) else reply.described()
