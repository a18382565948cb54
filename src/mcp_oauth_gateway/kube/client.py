"""The few Kubernetes API calls the controller makes, as JSON in and out.

`kubernetes_asyncio` supplies configuration (kubeconfig or in-cluster service account), TLS and
authentication; the calls address objects by path, so a custom kind needs no generated model and
the objects stay exactly as the server sent them. Every call is recorded as the RBAC verb and
resource it needs, which the test of the install manifests compares with the ClusterRole.
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import quote

import aiohttp
import yaml

from ..urls import shown_url
from .kinds import Kind

if TYPE_CHECKING:
    from kubernetes_asyncio.client import ApiClient, Configuration

log = logging.getLogger("mcp_oauth_gateway.kube")

Json = dict[str, Any]
# A list call pages through at most this many objects a response.
PAGE_SIZE = 500
# How long one call (not a watch) may take.
CALL_TIMEOUT = 30.0
# The server ends a watch after about this long; the client then resumes it.
WATCH_SECONDS = 240
# A watch that sends nothing (not even a bookmark) for this long is a dead connection.
WATCH_SILENCE = WATCH_SECONDS + 60


class ConnectError(Exception):
    """The API server's configuration could not be loaded; the message says what to fix."""


class ApiError(Exception):
    """The API server refused a call."""

    def __init__(self, status: int, reason: str, message: str, verb: str, path: str):
        super().__init__(f"{verb} {path}: HTTP {status} {reason}: {message}")
        self.status = status
        self.reason = reason
        self.message = message


@dataclass(frozen=True, slots=True)
class Call:
    """One kind of call the controller made, as RBAC names it."""

    verb: str
    group: str
    resource: str  # `plural` or `plural/subresource`


@dataclass(frozen=True, slots=True)
class Listing:
    """A list response: the objects and the `resourceVersion` to watch from."""

    items: list[Json]
    resource_version: str


@dataclass(frozen=True, slots=True)
class WatchEvent:
    """`ADDED`, `MODIFIED`, `DELETED` or `BOOKMARK`, and the object."""

    type: str
    object: Json


def collection_path(kind: Kind, namespace: str | None = None) -> str:
    """The URL path of a kind's objects (all namespaces when `namespace` is None)."""
    base = f"/apis/{kind.group}/{kind.version}" if kind.group else f"/api/{kind.version}"
    if namespace is not None and kind.namespaced:
        return f"{base}/namespaces/{quote(namespace, safe='')}/{kind.plural}"
    return f"{base}/{kind.plural}"


def object_path(kind: Kind, namespace: str, name: str, subresource: str = "") -> str:
    """The URL path of one object (or of its subresource)."""
    path = f"{collection_path(kind, namespace)}/{quote(name, safe='')}"
    return f"{path}/{subresource}" if subresource else path


def status_error(status: int, body: bytes, verb: str, path: str) -> ApiError:
    """An ApiError from a refusal's `Status` body (or its raw text when it is not one)."""
    try:
        document = json.loads(body)
    except ValueError:
        document = None
    if isinstance(document, dict) and document.get("kind") == "Status":
        reason = str(document.get("reason") or "")
        message = str(document.get("message") or "")
    else:
        reason, message = "", body[:300].decode("utf-8", "replace").strip()
    return ApiError(status, reason, message, verb, path)


def watch_lines(buffer: bytearray, chunk: bytes) -> list[bytes]:
    """Append `chunk`; take out the complete lines (one JSON event each) it finishes."""
    buffer.extend(chunk)
    end = buffer.rfind(b"\n")
    if end < 0:
        return []
    lines = bytes(buffer[:end]).split(b"\n")
    del buffer[: end + 1]
    return [line for line in lines if line.strip()]


class KubeClient:
    """The controller's calls to one API server."""

    def __init__(self, api: ApiClient, server: str):
        self.api = api
        self.server = server  # for people (logs, /status), never connected to
        self.calls: set[Call] = set()

    async def close(self) -> None:
        """Close the connection pool."""
        await self.api.close()

    async def _request(
        self,
        call: Call,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Json | None = None,
        limit: aiohttp.ClientTimeout | None = None,
        accept: str = "application/json",
    ) -> aiohttp.ClientResponse:
        self.calls.add(call)
        response: aiohttp.ClientResponse = await self.api.call_api(
            path,
            method,
            query_params=query or [],
            header_params={"Accept": accept, "Content-Type": "application/json"},
            body=body,
            auth_settings=["BearerToken"],
            _preload_content=False,
            _request_timeout=limit or aiohttp.ClientTimeout(total=CALL_TIMEOUT),
        )
        if not 200 <= response.status < 300:
            content = await response.read()
            response.release()
            raise status_error(response.status, content, call.verb, path)
        return response

    async def _json(
        self,
        call: Call,
        method: str,
        path: str,
        query: list[tuple[str, str]] | None = None,
        body: Json | None = None,
        accept: str = "application/json",
    ) -> Json:
        response = await self._request(call, method, path, query, body, accept=accept)
        try:
            document = await response.json(content_type=None)
        finally:
            response.release()
        if not isinstance(document, dict):
            raise ApiError(
                response.status, "", "the response is not a JSON object", call.verb, path
            )
        return document

    async def list(self, kind: Kind, namespace: str | None = None) -> Listing:
        """Every object of `kind` in every namespace (or in `namespace`), page by page."""
        items: list[Json] = []
        token = ""
        path = collection_path(kind, namespace)
        while True:
            query = [("limit", str(PAGE_SIZE))] + ([("continue", token)] if token else [])
            page = await self._json(Call("list", kind.group, kind.plural), "GET", path, query)
            for item in page.get("items") or []:
                # List items carry no kind; the controller indexes objects by it.
                items.append({**item, "apiVersion": kind.api_version, "kind": kind.kind})
            metadata = page.get("metadata") or {}
            token = str(metadata.get("continue") or "")
            if not token:
                return Listing(items, str(metadata.get("resourceVersion") or ""))

    async def watch(
        self,
        kind: Kind,
        resource_version: str,
        opened: Callable[[], object] | None = None,
        namespace: str | None = None,
    ) -> AsyncIterator[WatchEvent]:
        """Changes to `kind` (in every namespace, or in `namespace`) after `resource_version`
        until the server ends the watch; ApiError with status 410 when that version is too old
        (list again). `opened` is called once the server has accepted the watch."""
        query = [
            ("watch", "true"),
            ("allowWatchBookmarks", "true"),
            ("resourceVersion", resource_version),
            ("timeoutSeconds", str(WATCH_SECONDS)),
        ]
        timeout = aiohttp.ClientTimeout(
            total=None, sock_connect=CALL_TIMEOUT, sock_read=WATCH_SILENCE
        )
        path = collection_path(kind, namespace)
        response = await self._request(
            Call("watch", kind.group, kind.plural), "GET", path, query, limit=timeout
        )
        if opened is not None:
            opened()
        buffer = bytearray()
        try:
            async for chunk in response.content.iter_any():
                for line in watch_lines(buffer, chunk):
                    yield self._event(line, kind, path)
        finally:
            response.release()

    @staticmethod
    def _event(line: bytes, kind: Kind, path: str) -> WatchEvent:
        event = json.loads(line)
        kind_of_event, obj = event.get("type"), event.get("object") or {}
        if kind_of_event == "ERROR":
            # The server reports an expired resourceVersion inside the stream.
            code = int(obj.get("code") or 500)
            raise ApiError(
                code, str(obj.get("reason") or ""), str(obj.get("message") or ""), "watch", path
            )
        return WatchEvent(
            str(kind_of_event), {**obj, "apiVersion": kind.api_version, "kind": kind.kind}
        )

    async def document(self, path: str) -> Json:
        """A JSON document the API server serves at a non-resource path (the service-account
        issuer's `/openid/v1/jwks`: every ServiceAccount may read it by default). The JWKS is
        served only as `application/jwk-set+json`: asked for as JSON it is a 406."""
        accept = "application/jwk-set+json, application/json"
        return await self._json(Call("get", "", path), "GET", path, accept=accept)

    async def get(self, kind: Kind, namespace: str, name: str) -> Json | None:
        """One object, or None when it does not exist."""
        try:
            return await self._json(
                Call("get", kind.group, kind.plural), "GET", object_path(kind, namespace, name)
            )
        except ApiError as exc:
            if exc.status == 404:
                return None
            raise

    async def create(self, kind: Kind, namespace: str, body: Json) -> Json:
        """Create an object (ApiError 409 when it exists)."""
        return await self._json(
            Call("create", kind.group, kind.plural),
            "POST",
            collection_path(kind, namespace),
            body=body,
        )

    async def replace(self, kind: Kind, body: Json) -> Json:
        """Replace an object; its `metadata.resourceVersion` makes it conditional (409)."""
        metadata = body["metadata"]
        path = object_path(kind, metadata.get("namespace") or "", metadata["name"])
        return await self._json(Call("update", kind.group, kind.plural), "PUT", path, body=body)

    async def replace_status(self, kind: Kind, body: Json) -> Json:
        """Replace an object's status through the status subresource (409 when the object
        changed since `metadata.resourceVersion`)."""
        metadata = body["metadata"]
        path = object_path(kind, metadata.get("namespace") or "", metadata["name"], "status")
        return await self._json(
            Call("update", kind.group, f"{kind.plural}/status"), "PUT", path, body=body
        )


def _kubeconfig_shape(path: str) -> None:
    """Refuse a file that is not a kubeconfig at all, before the loader fails obscurely."""
    try:
        document = yaml.safe_load(Path(path).read_text())
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        why = " ".join(str(exc).split())
        raise ConnectError(f"--kubeconfig {path}: cannot read it as YAML: {why}") from exc
    if not isinstance(document, dict) or document.get("kind", "Config") != "Config":
        raise ConnectError(
            f"--kubeconfig {path}: not a kubeconfig (a YAML mapping of kind Config with "
            "clusters, users and contexts)"
        )


async def _configuration(kubeconfig: str | None) -> tuple[Configuration, str]:
    # Loaded on first use: the Kubernetes client is a thousand modules (a second of start-up
    # and 35 MB) that a file-mode gateway, which imports this module's flags, never needs.
    from kubernetes_asyncio.client import Configuration
    from kubernetes_asyncio.config import ConfigException, load_incluster_config, load_kube_config

    if kubeconfig is not None:
        _kubeconfig_shape(kubeconfig)
    configuration = Configuration()
    try:
        if kubeconfig is None:
            load_incluster_config(client_configuration=configuration)  # type: ignore[no-untyped-call]
            where = "the pod's service account"
        else:
            await load_kube_config(
                config_file=kubeconfig, client_configuration=configuration, persist_config=False
            )
            where = kubeconfig
    except (ConfigException, OSError, ValueError, KeyError, TypeError) as exc:
        flag = "in-cluster configuration" if kubeconfig is None else f"--kubeconfig {kubeconfig}"
        why = " ".join(str(exc).split()) or type(exc).__name__
        raise ConnectError(f"{flag}: cannot load the API server configuration: {why}") from exc
    return configuration, where


def check_kubeconfig(kubeconfig: str) -> str:
    """The API server a kubeconfig names; ConnectError saying what is wrong with the file."""
    configuration, _ = asyncio.run(_configuration(kubeconfig))
    return str(configuration.host)


async def connect(kubeconfig: str | None) -> KubeClient:
    """A client from a kubeconfig file, or (None) from the pod's service account."""
    configuration, where = await _configuration(kubeconfig)
    # Shown in logs and /status only; the ApiClient connects with the configuration itself.
    server = shown_url(str(configuration.host))
    log.info("API server %s (credentials from %s)", server, where)
    from kubernetes_asyncio.client import ApiClient

    api = ApiClient(configuration)
    # Named in the objects' managedFields and the API server's audit log.
    api.user_agent = f"mcp-oauth-gateway/{version('mcp-oauth-gateway')}"
    return KubeClient(api, server)
