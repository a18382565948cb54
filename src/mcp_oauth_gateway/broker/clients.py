"""Who may use the broker: clients registered through DCR (the client id is a signed, self-
contained record of its redirect URIs and of the Broker route it was registered at, so no storage
is needed and every replica can check it) and Client ID Metadata Documents (the client id is an
HTTPS URL, fetched and validated; the same client at every route)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import secrets
import time
from collections.abc import Mapping
from dataclasses import dataclass

import aiohttp
import orjson
from werkzeug.datastructures import ResponseCacheControl
from werkzeug.http import parse_cache_control_header, parse_date
from yarl import URL

from ..controlplane.fetch import failure_text, read_at_most
from ..registration import application_type_problem, validate_redirect_uri
from ..urls import InvalidUri, hostname_of, parse_document_url
from .addresses import AddressRefused, CheckedResolver, Lookup, checked_literal
from .errors import OAuthError

DCR_PREFIX = "mcpgw."
CIMD_MAX_BYTES = 64 * 1024
CIMD_TIMEOUT = 5.0
CIMD_CACHE = 300.0  # for a document that says nothing about caching
CIMD_CACHE_MAX = 86400.0  # a document is fetched again at least daily, whatever it says
CIMD_CACHE_ENTRIES = 1024


@dataclass(frozen=True)
class BrokerClient:
    client_id: str
    name: str
    redirect_uris: tuple[str, ...]
    kind: str  # "dcr" or "cimd"
    # The route key (`binding`) a DCR client was registered at; None for a metadata document
    # (valid at every route) and for a client id issued before client ids named their route.
    route: str | None = None


class ClientError(OAuthError):
    """The client cannot be used (400; `error` is the OAuth error code)."""

    def __init__(self, error: str, description: str):
        super().__init__(400, error, description)


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: bytes, body: str) -> str:
    return _b64(hmac.new(secret, body.encode(), hashlib.sha256).digest()[:24])


def issue_client_id(secret: bytes, name: str, redirect_uris: list[str], route: str) -> str:
    """A client id that carries (and signs) the client's name, redirect URIs and the route key
    of the Broker route it registered at."""
    # A random part makes every registration its own client (RFC 7591 §3.2.1: unique ids), so
    # what is bound to a client id (codes, refresh tokens) is bound to that registration.
    body = _b64(
        orjson.dumps(
            {
                "n": name[:100],
                "r": redirect_uris,
                "t": int(time.time()),
                "i": secrets.token_urlsafe(9),
                "a": route,
            }
        )
    )
    return f"{DCR_PREFIX}{body}.{_sign(secret, body)}"


def read_client_id(secret: bytes, client_id: str) -> BrokerClient | None:
    """The registered client behind a DCR client id, or None when it is not ours."""
    if not client_id.startswith(DCR_PREFIX):
        return None
    body, _, signature = client_id[len(DCR_PREFIX) :].rpartition(".")
    if not body or not hmac.compare_digest(signature, _sign(secret, body)):
        return None
    try:
        record = orjson.loads(_unb64(body))
    except (ValueError, orjson.JSONDecodeError):
        return None
    if not isinstance(record, dict):
        return None
    route = record.get("a")
    return BrokerClient(
        client_id=client_id,
        name=str(record.get("n") or "MCP client"),
        redirect_uris=tuple(record.get("r") or ()),
        kind="dcr",
        route=route if isinstance(route, str) else None,
    )


def cache_lifetime(headers: Mapping[str, str], now: float) -> float:
    """How long a fetched document may be reused (RFC 9111, as a shared cache): not at all for
    no-store, no-cache or private; else s-maxage, max-age, or Expires against Date; else 5
    minutes; never more than a day. An Expires that cannot be read means already expired."""
    control = parse_cache_control_header(headers.get("Cache-Control"), cls=ResponseCacheControl)
    if control.no_store or control.no_cache or control.private:
        return 0.0
    for seconds in (control.s_maxage, control.max_age):
        if seconds is not None:
            return max(0.0, min(float(seconds), CIMD_CACHE_MAX))
    if "Expires" in headers:
        expires = parse_date(headers["Expires"])
        if expires is None:
            return 0.0
        date = parse_date(headers.get("Date"))
        base = date.timestamp() if date is not None else now
        return max(0.0, min(expires.timestamp() - base, CIMD_CACHE_MAX))
    return CIMD_CACHE


class MetadataDocuments:
    """Fetches and caches Client ID Metadata Documents, refusing private addresses.

    Documents are fetched through a session of its own whose resolver checks every address it
    connects to (addresses.CheckedResolver), so the address checked is the address connected
    to. `lookup` replaces DNS in tests.
    """

    def __init__(self, allow_private: bool, lookup: Lookup | None = None):
        self.allow_private = allow_private
        self._cache: dict[str, tuple[float, BrokerClient]] = {}
        self._resolver = CheckedResolver(allow_private, lookup)
        self._session: aiohttp.ClientSession | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def resolve(self, url: str) -> BrokerClient:
        """Fetch and validate the document whose URL is the client id (with this object's own
        session: a shared one would resolve the host again and connect wherever that points)."""
        cached = self._cache.get(url)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        target = self._target(url)
        try:
            # aiohttp never asks its resolver about literal IPs, so they are checked here.
            checked_literal(target.raw_host or "", self.allow_private)
            async with asyncio.timeout(CIMD_TIMEOUT):
                async with self._client().get(
                    target, allow_redirects=False, headers={"Accept": "application/json"}
                ) as response:
                    if response.status != 200:
                        raise ClientError(
                            "invalid_client",
                            f"client metadata document {url} answered HTTP {response.status}",
                        )
                    body = await read_at_most(response.content, CIMD_MAX_BYTES)
                    lifetime = cache_lifetime(response.headers, time.time())
        except AddressRefused as exc:
            raise ClientError("invalid_client", f"client metadata host {exc}; refused") from exc
        except TimeoutError as exc:
            raise ClientError(
                "invalid_client",
                f"client metadata document {url} did not answer within {CIMD_TIMEOUT:g}s",
            ) from exc
        except aiohttp.ClientError as exc:
            raise ClientError(
                "invalid_client",
                f"client metadata document {url} could not be fetched: {failure_text(exc)}",
            ) from exc
        if len(body) > CIMD_MAX_BYTES:
            raise ClientError(
                "invalid_client",
                f"client metadata document {url} is larger than {CIMD_MAX_BYTES} bytes",
            )
        client = self._validate(url, body)
        self._cache.pop(url, None)
        if lifetime > 0:
            if len(self._cache) >= CIMD_CACHE_ENTRIES:
                del self._cache[next(iter(self._cache))]
            self._cache[url] = (time.monotonic() + lifetime, client)
        return client

    def _target(self, url: str) -> URL:
        """The URL to fetch, refused unless every parser reads the same host from it."""
        try:
            href = parse_document_url(url, allow_http=self.allow_private)
        except InvalidUri as exc:
            raise ClientError("invalid_client", str(exc)) from exc
        try:
            # aiohttp is handed this very URL object, so the host checked below is the host it
            # connects to; it must also be the host a browser would read.
            target = URL(href, encoded=True)
        except ValueError as exc:
            raise ClientError("invalid_client", f"client_id {url!r} is not a valid URL") from exc
        if (
            f"{target.scheme}:" != href.partition(":")[0] + ":"
            or not target.raw_host
            or target.user is not None
            or target.raw_host.strip("[]") != hostname_of(href).strip("[]")
        ):
            raise ClientError(
                "invalid_client",
                f"client_id {url!r} is read differently by "
                "URL parsers; write it plainly (https, a host, a path)",
            )
        return target

    def _client(self) -> aiohttp.ClientSession:
        loop = asyncio.get_running_loop()
        if self._session is None or self._session.closed or self._loop is not loop:
            # A session belongs to the loop it was made in; a new loop (tests, a restarted
            # app) needs a new one.
            self._session = aiohttp.ClientSession(
                connector=aiohttp.TCPConnector(
                    resolver=self._resolver, use_dns_cache=False, limit=16
                ),
                cookie_jar=aiohttp.DummyCookieJar(),
                # No proxy from the environment: a proxy would resolve the host itself,
                # past the check.
                trust_env=False,
                timeout=aiohttp.ClientTimeout(total=None, sock_connect=CIMD_TIMEOUT),
            )
            self._loop = loop
        return self._session

    async def close(self) -> None:
        """Close the session documents are fetched with."""
        if self._session is not None:
            await self._session.close()
            self._session = None
        await self._resolver.close()

    @staticmethod
    def _validate(url: str, body: bytes) -> BrokerClient:
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise ClientError(
                "invalid_client", f"client metadata document {url} is not JSON"
            ) from exc
        if not isinstance(document, dict):
            raise ClientError(
                "invalid_client", f"client metadata document {url} is not a JSON object"
            )
        if document.get("client_id") != url:
            raise ClientError(
                "invalid_client",
                f"client metadata document {url} names "
                f"client_id {document.get('client_id')!r}, not its own URL",
            )
        uris = document.get("redirect_uris")
        if not isinstance(uris, list) or not uris:
            raise ClientError(
                "invalid_client", f"client metadata document {url} has no redirect_uris"
            )
        for uri in uris:
            problem = validate_redirect_uri(uri)
            if problem:
                raise ClientError("invalid_client", f"client metadata document {url}: {problem}")
        problem = application_type_problem(document.get("application_type"), uris)
        if problem:
            raise ClientError("invalid_client", f"client metadata document {url}: {problem}")
        name = document.get("client_name")
        return BrokerClient(
            client_id=url,
            name=name if isinstance(name, str) else url,
            redirect_uris=tuple(uris),
            kind="cimd",
        )
