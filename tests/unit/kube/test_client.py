"""The API client's pure parts: paths, refusals, and splitting a watch stream into events."""

from __future__ import annotations

import json

from mcp_oauth_gateway.kube.client import collection_path, object_path, status_error, watch_lines
from mcp_oauth_gateway.kube.kinds import GATEWAY_CLASS, GATEWAY_POLICY, LEASE, SERVICE


def test_paths_of_group_core_namespaced_and_cluster_scoped_kinds() -> None:
    assert collection_path(GATEWAY_POLICY) == "/apis/mcp-oauth-gateway.dev/v1alpha1/gatewaypolicies"
    assert collection_path(SERVICE) == "/api/v1/services"
    assert (
        object_path(GATEWAY_POLICY, "apps", "p", "status")
        == "/apis/mcp-oauth-gateway.dev/v1alpha1/namespaces/apps/gatewaypolicies/p/status"
    )
    assert (
        object_path(GATEWAY_CLASS, "", "mcp")
        == "/apis/gateway.networking.k8s.io/v1/gatewayclasses/mcp"
    )
    assert collection_path(LEASE, "ns") == "/apis/coordination.k8s.io/v1/namespaces/ns/leases"


def test_names_are_escaped_in_paths() -> None:
    assert object_path(GATEWAY_POLICY, "a/b", "c?d").endswith(
        "/namespaces/a%2Fb/gatewaypolicies/c%3Fd"
    )


def test_status_error_reads_the_status_body_or_the_raw_text() -> None:
    body = json.dumps({"kind": "Status", "reason": "Conflict", "message": "changed"}).encode()
    exc = status_error(409, body, "update", "/p")
    assert (exc.status, exc.reason, exc.message) == (409, "Conflict", "changed")
    assert "update /p: HTTP 409 Conflict: changed" in str(exc)
    assert status_error(502, b"<html>bad gateway</html>", "list", "/p").message == (
        "<html>bad gateway</html>"
    )


def test_watch_stream_split_into_lines_across_chunk_boundaries() -> None:
    buffer = bytearray()
    assert watch_lines(buffer, b'{"type":"ADDED"') == []
    assert watch_lines(buffer, b'}\n{"type":"MOD') == [b'{"type":"ADDED"}']
    assert watch_lines(buffer, b'IFIED"}\n\n{"a":1}\n') == [b'{"type":"MODIFIED"}', b'{"a":1}']
    assert buffer == bytearray()
