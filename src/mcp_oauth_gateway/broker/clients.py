"""Who may use the broker: clients registered through DCR (the client id is a signed, self-
contained record of its redirect URIs, so no storage is needed and every replica can check it)
and Client ID Metadata Documents (the client id is an HTTPS URL, fetched and validated)."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import hmac
import ipaddress
import socket
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

import aiohttp
import orjson

from ..registration import validate_redirect_uri

DCR_PREFIX = "mcpgw."
CIMD_MAX_BYTES = 64 * 1024
CIMD_TIMEOUT = 5.0
CIMD_CACHE = 300.0
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "[::1]", "::1"})


@dataclass(frozen=True)
class BrokerClient:
    client_id: str
    name: str
    redirect_uris: tuple[str, ...]
    kind: str  # "dcr" or "cimd"


class ClientError(Exception):
    """The client cannot be used; `error` is the OAuth error code."""

    def __init__(self, error: str, description: str):
        super().__init__(description)
        self.error = error
        self.description = description


def _b64(data: bytes) -> str:
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def _unb64(text: str) -> bytes:
    return base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))


def _sign(secret: bytes, body: str) -> str:
    return _b64(hmac.new(secret, body.encode(), hashlib.sha256).digest()[:24])


def issue_client_id(secret: bytes, name: str, redirect_uris: list[str]) -> str:
    """A client id that carries (and signs) the client's name and redirect URIs."""
    body = _b64(orjson.dumps({"n": name[:100], "r": redirect_uris, "t": int(time.time())}))
    return f"{DCR_PREFIX}{body}.{_sign(secret, body)}"


def read_client_id(secret: bytes, client_id: str) -> BrokerClient | None:
    """The registered client behind a DCR client id, or None when it is not ours."""
    if not client_id.startswith(DCR_PREFIX):
        return None
    body, _, signature = client_id[len(DCR_PREFIX):].rpartition(".")
    if not body or not hmac.compare_digest(signature, _sign(secret, body)):
        return None
    try:
        record = orjson.loads(_unb64(body))
    except (ValueError, orjson.JSONDecodeError):
        return None
    return BrokerClient(client_id=client_id, name=str(record.get("n") or "MCP client"),
                        redirect_uris=tuple(record.get("r") or ()), kind="dcr")


def is_loopback_redirect(uri: str) -> bool:
    """An http loopback redirect (RFC 8252 §7.3: any port allowed at request time)."""
    parts = urlsplit(uri)
    return parts.scheme == "http" and (parts.hostname or "") in LOOPBACK_HOSTS | {"::1"}


def redirect_matches(registered: tuple[str, ...], requested: str) -> bool:
    """Exact match, except that loopback redirects may change port (RFC 8252)."""
    if requested in registered:
        return True
    if not is_loopback_redirect(requested):
        return False
    wanted = urlsplit(requested)
    for uri in registered:
        have = urlsplit(uri)
        if is_loopback_redirect(uri) and have.hostname == wanted.hostname and \
                have.path == wanted.path and have.query == wanted.query:
            return True
    return False


def _public(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return not (ip.is_private or ip.is_loopback or ip.is_link_local or ip.is_reserved or
                ip.is_multicast or ip.is_unspecified)


class MetadataDocuments:
    """Fetches and caches Client ID Metadata Documents, refusing private addresses."""

    def __init__(self, allow_private: bool):
        self.allow_private = allow_private
        self._cache: dict[str, tuple[float, BrokerClient]] = {}

    async def resolve(self, url: str, session: aiohttp.ClientSession | None) -> BrokerClient:
        """Fetch and validate the document whose URL is the client id."""
        cached = self._cache.get(url)
        if cached and cached[0] > time.monotonic():
            return cached[1]
        parts = urlsplit(url)
        local = self.allow_private and parts.scheme == "http"
        if (parts.scheme != "https" and not local) or not parts.hostname or \
                parts.path in ("", "/") or parts.fragment or parts.username:
            raise ClientError("invalid_client", f"client_id {url!r} is not a valid client "
                              "metadata document URL (https, with a path, no fragment)")
        await self._check_address(parts.hostname, parts.port or (443 if parts.scheme ==
                                                                   "https" else 80))
        if session is None:
            raise ClientError("invalid_client", "client metadata cannot be fetched right now")
        try:
            async with asyncio.timeout(CIMD_TIMEOUT):
                async with session.get(url, allow_redirects=False,
                                       headers={"Accept": "application/json"}) as response:
                    if response.status != 200:
                        raise ClientError("invalid_client", f"client metadata document {url} "
                                          f"answered HTTP {response.status}")
                    body = await response.content.read(CIMD_MAX_BYTES + 1)
        except TimeoutError as exc:
            raise ClientError("invalid_client", f"client metadata document {url} did not "
                              f"answer within {CIMD_TIMEOUT:g}s") from exc
        except aiohttp.ClientError as exc:
            raise ClientError("invalid_client", f"client metadata document {url} could not "
                              f"be fetched: {exc}") from exc
        if len(body) > CIMD_MAX_BYTES:
            raise ClientError("invalid_client", f"client metadata document {url} is larger "
                              f"than {CIMD_MAX_BYTES} bytes")
        client = self._validate(url, body)
        self._cache[url] = (time.monotonic() + CIMD_CACHE, client)
        return client

    async def _check_address(self, host: str, port: int) -> None:
        if self.allow_private:
            return
        try:
            infos = await asyncio.get_running_loop().getaddrinfo(host, port,
                                                                 type=socket.SOCK_STREAM)
        except OSError as exc:
            raise ClientError("invalid_client", f"client metadata host {host} does not "
                              f"resolve: {exc}") from exc
        for info in infos:
            if not _public(str(info[4][0])):
                raise ClientError("invalid_client", f"client metadata host {host} resolves to "
                                  f"the non-public address {info[4][0]}; refused")

    @staticmethod
    def _validate(url: str, body: bytes) -> BrokerClient:
        try:
            document = orjson.loads(body)
        except orjson.JSONDecodeError as exc:
            raise ClientError("invalid_client", f"client metadata document {url} is not "
                              "JSON") from exc
        if not isinstance(document, dict):
            raise ClientError("invalid_client", f"client metadata document {url} is not a "
                              "JSON object")
        if document.get("client_id") != url:
            raise ClientError("invalid_client", f"client metadata document {url} names "
                              f"client_id {document.get('client_id')!r}, not its own URL")
        uris = document.get("redirect_uris")
        if not isinstance(uris, list) or not uris:
            raise ClientError("invalid_client", f"client metadata document {url} has no "
                              "redirect_uris")
        for uri in uris:
            problem = validate_redirect_uri(uri)
            if problem:
                raise ClientError("invalid_client", f"client metadata document {url}: "
                                  f"{problem}")
        name = document.get("client_name")
        return BrokerClient(client_id=url, name=name if isinstance(name, str) else url,
                            redirect_uris=tuple(uris), kind="cimd")
