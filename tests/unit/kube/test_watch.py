"""The list-and-watch loop of one kind, driven by a stand-in for the API client that replays
what the real server does (tests/e2e/test_kubernetes_restarts.py runs the real one): events
after a resourceVersion, `410 Gone` when that version is compacted away, a dropped connection."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from mcp_oauth_gateway.kube import watch as watch_module
from mcp_oauth_gateway.kube.cache import ObjectCache
from mcp_oauth_gateway.kube.client import ApiError, Listing, WatchEvent
from mcp_oauth_gateway.kube.kinds import GATEWAY_POLICY, REFERENCE_GRANT, SERVICE, Kind
from mcp_oauth_gateway.kube.watch import KindWatch


def policy(name: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": "mcp-oauth-gateway.dev/v1alpha1",
        "kind": "GatewayPolicy",
        "metadata": {"name": name, "namespace": "apps", "resourceVersion": version},
        "spec": {"targetRefs": [{"kind": "HTTPRoute", "name": "r"}]},
    }


class ScriptedServer:
    """Answers list and watch calls from a script; records what was asked."""

    def __init__(self, lists: list[Listing], watches: list[list[WatchEvent] | BaseException]):
        self.lists = lists
        self.watches = watches
        self.asked: list[tuple[str, str]] = []
        self.server = "https://127.0.0.1:6443"

    async def list(self, kind: Kind, namespace: str | None = None) -> Listing:
        self.asked.append(("list", namespace or ""))
        if not self.lists:
            raise asyncio.CancelledError
        return self.lists.pop(0)

    async def watch(
        self, kind: Kind, resource_version: str, opened: Any = None, namespace: str | None = None
    ) -> AsyncIterator[WatchEvent]:
        self.asked.append(("watch", resource_version))
        if not self.watches:
            raise asyncio.CancelledError
        script = self.watches.pop(0)
        if isinstance(script, BaseException):
            raise script
        if opened is not None:
            opened()
        for event in script:
            yield event


@pytest.fixture(autouse=True)
def no_waiting(monkeypatch: pytest.MonkeyPatch) -> None:
    async def instant(_: float) -> None:
        return None

    monkeypatch.setattr(watch_module.asyncio, "sleep", instant)


async def run(server: ScriptedServer, kind: Kind = GATEWAY_POLICY) -> ObjectCache:
    cache = ObjectCache([kind])
    with pytest.raises(asyncio.CancelledError):
        await KindWatch(server, cache, kind).run()  # type: ignore[arg-type]
    return cache


async def test_a_watch_resumes_from_the_last_version_after_the_server_ends_it() -> None:
    server = ScriptedServer(
        [Listing([policy("a", "5")], "10")],
        [
            [WatchEvent("ADDED", policy("b", "11")), WatchEvent("BOOKMARK", policy("", "15"))],
            [WatchEvent("DELETED", policy("a", "16"))],
        ],
    )
    cache = await run(server)
    assert server.asked == [("list", ""), ("watch", "10"), ("watch", "15"), ("watch", "16")]
    assert cache.raw(GATEWAY_POLICY, "apps", "a") is None
    assert cache.raw(GATEWAY_POLICY, "apps", "b") is not None


async def test_gone_lists_again_and_a_lost_connection_does_not() -> None:
    server = ScriptedServer(
        [Listing([policy("a", "5")], "10"), Listing([policy("c", "30")], "31")],
        [
            aiohttp.ServerDisconnectedError(),
            ApiError(410, "Expired", "too old resource version: 10 (25)", "watch", "/p"),
        ],
    )
    cache = await run(server)
    # The dropped connection resumed from version 10; only the 410 listed again.
    assert server.asked == [
        ("list", ""),
        ("watch", "10"),
        ("watch", "10"),
        ("list", ""),
        ("watch", "31"),
    ]
    # The relist replaced what the cache held: an object deleted meanwhile is gone.
    assert cache.raw(GATEWAY_POLICY, "apps", "a") is None
    assert cache.raw(GATEWAY_POLICY, "apps", "c") is not None


async def test_an_optional_kind_the_server_does_not_serve_counts_as_listed() -> None:
    server = ScriptedServer([], [])

    async def not_served(kind: Kind, namespace: str | None = None) -> Listing:
        server.asked.append(("list", ""))
        if len(server.asked) > 1:
            raise asyncio.CancelledError
        raise ApiError(
            404,
            "NotFound",
            "the server could not find the requested resource",
            "list",
            "/api/v1/services",
        )

    server.list = not_served  # type: ignore[method-assign]
    cache = await run(server, SERVICE)
    assert cache.synced
    assert not cache.available(SERVICE)


def grant(name: str, version: str) -> dict[str, Any]:
    return {
        "apiVersion": "gateway.networking.k8s.io/v1beta1",
        "kind": "ReferenceGrant",
        "metadata": {"name": name, "namespace": "tools", "resourceVersion": version},
        "spec": {
            "from": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "namespace": "a"}],
            "to": [{"group": "mcp-oauth-gateway.dev", "kind": "GatewayBackend"}],
        },
    }


async def test_a_refused_list_never_forgets_what_was_listed() -> None:
    # An API server restarting answers 404 for a moment: the grants stay known meanwhile
    # (issue 25, item 3: every grant was dropped for minutes), and the kind is listed again.
    not_found = ApiError(404, "NotFound", "the server could not find it", "list", "/p")
    server = ScriptedServer([Listing([grant("g", "5")], "10")], [not_found])
    listed: list[int] = []
    real_list = server.list

    async def list_then_refuse(kind: Kind, namespace: str | None = None) -> Listing:
        listed.append(len(cache.kinds[REFERENCE_GRANT.kind].objects))
        if len(listed) == 2:
            server.asked.append(("list", ""))
            raise not_found
        return await real_list(kind)

    cache = ObjectCache([REFERENCE_GRANT])
    server.list = list_then_refuse  # type: ignore[method-assign]
    with pytest.raises(asyncio.CancelledError):
        await KindWatch(server, cache, REFERENCE_GRANT).run()  # type: ignore[arg-type]
    assert cache.raw(REFERENCE_GRANT, "tools", "g") is not None
    assert cache.available(REFERENCE_GRANT)
    # The watch's 404 made it list again, and the refused list did not empty the cache either.
    assert listed == [0, 1, 1]


async def test_retries_are_short_jittered_and_start_over_once_a_watch_opens(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    slept: list[float] = []

    async def record(delay: float) -> None:
        slept.append(delay)

    monkeypatch.setattr(watch_module.asyncio, "sleep", record)
    lost = aiohttp.ServerDisconnectedError()
    server = ScriptedServer([Listing([], "1")], [lost] * 8 + [[]] + [lost])
    await run(server)
    assert all(0 < d <= watch_module.MAX_DELAY for d in slept)
    assert len(set(slept)) == len(slept)  # jittered: replicas do not retry in step
    # The quiet watch that opened reset the delay: the failure after it waited the first one.
    assert slept[-1] <= watch_module.FIRST_DELAY
