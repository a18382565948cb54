"""The Secrets the controller reads (kube/secrets.py): a watch per namespace some policy's
`secretRef` points into, opened and closed as references come and go; of a namespace's Secrets
only those a policy names are kept; a refusal forgets what was read and says what to grant.
The API client is a stand-in that answers per namespace (tests/e2e/test_secret_refs.py runs the
real server with RBAC)."""

from __future__ import annotations

import asyncio
import base64
from collections.abc import AsyncIterator
from typing import Any

from mcp_oauth_gateway.controlplane.cluster_secrets import SECRET_READER_ROLE
from mcp_oauth_gateway.kube.client import ApiError, Listing, WatchEvent
from mcp_oauth_gateway.kube.kinds import SECRET, Kind
from mcp_oauth_gateway.kube.secrets import NamespaceSecrets, SecretWatches
from mcp_oauth_gateway.kube.watch import refusal_advice
from support import wait_until_async

Json = dict[str, Any]


def secret(name: str, namespace: str = "tenant-a", **data: str) -> Json:
    encoded = {k: base64.b64encode(v.encode()).decode() for k, v in data.items()}
    return {"kind": "Secret", "metadata": {"name": name, "namespace": namespace}, "data": encoded}


class Server:
    """Lists each namespace's Secrets; its watches stream what is put on that namespace's
    queue; a namespace in `forbidden` answers 403. Records every call with its namespace."""

    def __init__(self, stored: dict[str, list[Json]], forbidden: frozenset[str] = frozenset()):
        self.stored = stored
        self.forbidden = forbidden
        self.queues: dict[str, asyncio.Queue[WatchEvent]] = {}
        self.asked: list[tuple[str, str | None]] = []
        self.server = "https://127.0.0.1:6443"

    async def list(self, kind: Kind, namespace: str | None = None) -> Listing:
        self.asked.append(("list", namespace))
        if namespace in self.forbidden:
            raise ApiError(403, "Forbidden", "secrets is forbidden", "list", "/api/v1/...")
        return Listing(list(self.stored.get(namespace or "", [])), "1")

    async def watch(
        self, kind: Kind, resource_version: str, opened: Any = None, namespace: str | None = None
    ) -> AsyncIterator[WatchEvent]:
        self.asked.append(("watch", namespace))
        if opened is not None:
            opened()
        queue = self.queues.setdefault(namespace or "", asyncio.Queue())
        while True:
            yield await queue.get()


def test_of_a_namespaces_secrets_only_those_a_policy_names_are_kept() -> None:
    changed = asyncio.Event()
    feed = NamespaceSecrets("tenant-a", frozenset({"keys"}), changed)
    feed.replace_all(SECRET, [secret("keys", api="v1"), secret("db", password="p")], "1")
    assert feed.synced
    assert feed.data == {"keys": {"api": b"v1"}}
    changed.clear()
    feed.apply(SECRET, "ADDED", secret("other", token="t"))
    assert not changed.is_set()
    assert "other" not in feed.data
    feed.apply(SECRET, "MODIFIED", secret("keys", api="v2"))
    assert changed.is_set()
    assert feed.data == {"keys": {"api": b"v2"}}
    feed.apply(SECRET, "DELETED", secret("keys"))
    assert feed.data == {}
    assert "v2" not in repr(feed)


def test_a_refusal_forgets_what_was_read_and_a_failure_keeps_it() -> None:
    feed = NamespaceSecrets("tenant-a", frozenset({"keys"}), asyncio.Event())
    feed.replace_all(SECRET, [secret("keys", api="v1")], "1")
    assert not feed.refused(SECRET, "HTTP 500", 500)
    assert feed.data == {"keys": {"api": b"v1"}}
    assert feed.refused(SECRET, "may not read", 403)
    assert (feed.data, feed.synced, feed.unreadable) == ({}, True, "may not read")


def test_a_forbidden_namespace_is_advised_to_bind_the_secret_reader_role() -> None:
    exc = ApiError(403, "Forbidden", 'secrets is forbidden: User "x" cannot list', "list", "/p")
    advice = refusal_advice(SECRET, exc, "tenant-a")
    assert "may not read Secrets in namespace tenant-a" in advice
    assert f"RoleBinding there to the ClusterRole {SECRET_READER_ROLE}" in advice


async def test_watches_follow_the_references_and_never_list_all_namespaces() -> None:
    server = Server(
        {
            "tenant-a": [secret("keys", api="a-1"), secret("db", password="not-for-policies")],
            "shared": [secret("keys", api="s-1")],
        },
        forbidden=frozenset({"closed"}),
    )
    watches = SecretWatches(server, asyncio.Event())  # type: ignore[arg-type]
    try:
        watches.want({"tenant-a": frozenset({"keys"})})
        await wait_until_async(lambda: watches.synced, 5, "tenant-a listed")
        view = watches.view()
        assert dict(view.data) == {("tenant-a", "keys"): {"api": b"a-1"}}
        assert view.listed == {"tenant-a"}

        # A grant (or a new policy) makes another namespace's Secret usable: watched too.
        version = watches.version
        watches.want({"tenant-a": frozenset({"keys"}), "shared": frozenset({"keys"})})
        assert not watches.synced
        await wait_until_async(lambda: watches.synced, 5, "shared listed")
        assert watches.version != version
        assert ("shared", "keys") in watches.view().data

        # A rotation arrives through the namespace's watch.
        server.queues["tenant-a"].put_nowait(WatchEvent("MODIFIED", secret("keys", api="a-2")))
        await wait_until_async(
            lambda: watches.view().data[("tenant-a", "keys")] == {"api": b"a-2"}, 5, "rotation"
        )

        # A name not kept so far lists its namespace again; the grant gone closes `shared`.
        server.asked.clear()
        watches.want({"tenant-a": frozenset({"keys", "db"})})
        await wait_until_async(lambda: watches.synced, 5, "tenant-a listed again")
        assert ("list", "tenant-a") in server.asked
        assert set(watches.view().data) == {("tenant-a", "keys"), ("tenant-a", "db")}
        assert "shared" not in watches.view().listed

        # The controller may not read a namespace: the policies there say what to grant.
        watches.want({"closed": frozenset({"keys"})})
        await wait_until_async(lambda: watches.synced, 5, "closed refused")
        view = watches.view()
        assert dict(view.data) == {}
        assert "may not read Secrets in namespace closed" in view.unreadable["closed"]
        assert watches.state() == {"closed": {"secrets": [], "error": view.unreadable["closed"]}}
    finally:
        await watches.stop()
    assert {namespace for _, namespace in server.asked} <= {"tenant-a", "shared", "closed"}
    assert None not in {namespace for _, namespace in server.asked}


async def test_a_watch_that_dies_of_a_bug_fails_its_policies_closed_without_holding_others() -> (
    None
):
    server = Server({"tenant-a": [secret("keys", api="a-1")]})

    async def broken_list(kind: Kind, namespace: str | None = None) -> Listing:
        raise RuntimeError("a bug, quoting a-1")

    server.list = broken_list  # type: ignore[method-assign]
    watches = SecretWatches(server, asyncio.Event())  # type: ignore[arg-type]
    try:
        watches.want({"tenant-a": frozenset({"keys"})})
        await wait_until_async(lambda: watches.synced, 5, "the namespace given up")
        why = watches.view().unreadable["tenant-a"]
        assert why == "reading the Secrets of tenant-a failed (RuntimeError)"
    finally:
        await watches.stop()
