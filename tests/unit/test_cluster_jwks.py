"""The cluster's own service-account keys (workloadIdentity's `jwks.kubernetes`): read through
the controller's API server client, never through the fetch session; until that client is
connected, or while it fails, the keyset is unavailable and says why."""

from __future__ import annotations

from types import MappingProxyType

from mcp_oauth_gateway.controlplane import ControlPlane
from mcp_oauth_gateway.controlplane.jwks import CLUSTER_JWKS_PATH, CLUSTER_JWKS_URL
from mcp_oauth_gateway.controlplane.snapshot import KeysetSource, Snapshot
from support import jwks_of, new_key, wait_until_async

KEY = new_key("sa")


def _snapshot() -> Snapshot:
    empty = Snapshot.empty()
    source = KeysetSource(url=CLUSTER_JWKS_URL, refresh=300)
    return Snapshot(
        empty.listeners,
        (),
        (),
        MappingProxyType({CLUSTER_JWKS_URL: source}),
        MappingProxyType({}),
    )


async def test_the_keys_are_read_from_the_api_server_client():
    asked: list[str] = []

    async def document(path: str) -> object:
        asked.append(path)
        return jwks_of(KEY)

    control = ControlPlane(_snapshot())
    control.cluster_documents = document
    await control.start()
    try:
        holder = control.keysets[CLUSTER_JWKS_URL]
        await wait_until_async(lambda: holder.keyset is not None, what="the cluster's keys")
        assert holder.keyset is not None
        assert list(holder.keyset.by_kid) == ["sa"]
        assert asked[0] == CLUSTER_JWKS_PATH
    finally:
        await control.stop()


async def test_without_a_connected_api_server_the_keys_are_unavailable_and_say_why():
    control = ControlPlane(_snapshot())
    await control.start()
    try:
        holder = control.keysets[CLUSTER_JWKS_URL]
        await wait_until_async(lambda: holder.last_error is not None, what="a failed read")
        assert holder.keyset is None
        assert "API server is not connected" in (holder.last_error or "")
    finally:
        await control.stop()


async def test_an_api_server_refusal_is_reported_and_retried():
    calls = 0

    async def document(path: str) -> object:
        nonlocal calls
        calls += 1
        if calls == 1:
            raise RuntimeError("GET /openid/v1/jwks: HTTP 403 Forbidden")
        return jwks_of(KEY)

    control = ControlPlane(_snapshot())
    control.cluster_documents = document
    await control.start()
    try:
        holder = control.keysets[CLUSTER_JWKS_URL]
        await wait_until_async(lambda: holder.keyset is not None, what="the retried read")
        assert calls >= 2
    finally:
        await control.stop()
