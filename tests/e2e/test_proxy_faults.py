"""The proxy when the backend misbehaves: down → 502, slow → 504, a stream that breaks ends
cleanly for the client, a client that leaves stops the backend's stream; the gateway stays up.
Responses without a body (HEAD, 204) come back promptly with one `Date`, and `Expect` is not
passed on."""

from __future__ import annotations

import sys
from pathlib import Path

import httpx
import pytest

from resource_yaml import route
from support import PEERS, Process, free_port, gateway_cmd, wait_for_port, wait_until


@pytest.fixture(scope="module")
def faulty(logs: Path, tmp_path_factory):
    backend_port = free_port()
    backend = Process(
        "fault-backend", [sys.executable, str(PEERS / "fault_backend.py"), str(backend_port)], logs
    )
    wait_for_port(backend_port, backend)
    port = free_port()
    up, down = f"127.0.0.1:{backend_port}", f"127.0.0.1:{free_port()}"
    config = tmp_path_factory.mktemp("faults") / "gateway.yaml"
    config.write_text(
        f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec: {{listeners: [{{name: http, port: {port}}}]}}
"""
        + route("slow", "/slow", up, "\n      timeouts: {backendRequest: 1s}")
        + route("breaks", "/sse-break", up)
        + route("forever", "/sse-forever", up)
        + route("down", "/down", down)
        + route("plain", "/plain", up)
        + route("no-content", "/no-content", up)
        + route("echo-headers", "/echo-headers", up)
    )
    gateway = Process("gateway-faults", gateway_cmd(config), logs)
    wait_for_port(port, gateway)
    try:
        yield f"http://127.0.0.1:{port}", f"http://{up}", gateway
    finally:
        gateway.stop()
        backend.stop()


def healthy(base: str) -> bool:
    return httpx.get(f"{base}/down", timeout=5).status_code == 502


def test_backend_down_is_502_json(faulty):
    base, _, _ = faulty
    response = httpx.get(f"{base}/down", timeout=10)
    assert response.status_code == 502
    assert response.json()["error"] == "bad_gateway"
    assert "unreachable" in response.json()["error_description"]


def test_slow_backend_is_504_json(faulty):
    base, _, _ = faulty
    response = httpx.get(f"{base}/slow", timeout=10)
    assert response.status_code == 504
    assert response.json() == {
        "error": "gateway_timeout",
        "error_description": "the MCP backend 127.0.0.1:"
        f"{faulty[1].rsplit(':', 1)[1]} did not answer within 1s",
    }
    assert healthy(base)


def test_stream_broken_by_the_backend_ends_for_the_client(faulty):
    base, _, gateway = faulty
    received = b""
    with httpx.stream("GET", f"{base}/sse-break", timeout=10) as response:
        assert response.status_code == 200
        # The stream ends (it does not hang); the events sent before the break arrive.
        for chunk in response.iter_raw():
            received += chunk
    assert b"data: 0" in received
    assert b"data: 1" in received
    assert healthy(base)
    assert "Traceback" not in gateway.log()


def test_client_leaving_a_stream_stops_the_backend_stream(faulty):
    base, backend, _ = faulty
    before = httpx.get(f"{backend}/stats").json()
    with httpx.stream("GET", f"{base}/sse-forever", timeout=10) as response:
        for chunk in response.iter_raw():
            if b"data: 3" in chunk:
                break
    wait_until(
        lambda: httpx.get(f"{backend}/stats").json()["disconnects"] > before["disconnects"],
        15,
        "the backend to see the client leave",
    )
    assert healthy(base)


# Failure bound, not a timing assertion: a HEAD used to hang until the backend's keep-alive
# timeout (5 s) closed the connection under the gateway.
BOUND = 3


def test_head_answers_with_the_backends_headers_and_no_body(faulty):
    base, backend, gateway = faulty
    with httpx.Client(timeout=BOUND) as http:
        direct = http.head(f"{backend}/plain")
        response = http.head(f"{base}/plain")
        assert response.status_code == 200
        assert response.headers["x-backend"] == "fault"
        assert response.headers["content-type"] == "application/json"
        assert response.headers["content-length"] == direct.headers["content-length"]
        assert response.content == b""
        assert len(response.headers.get_list("date")) == 1
        # The same client connection goes on: it used to stall behind a HEAD answer the
        # gateway never finished (the client has all it needs from a HEAD at the headers).
        for _ in range(2):
            follow = http.get(f"{base}/plain")
            assert follow.json() == {"plain": True}
            assert len(follow.headers.get_list("date")) == 1
    assert "Traceback" not in gateway.log()


def test_no_content_is_answered_promptly_with_one_date(faulty):
    base, _, gateway = faulty
    with httpx.Client(timeout=BOUND) as http:
        for method in ("GET", "HEAD", "GET"):
            response = http.request(method, f"{base}/no-content")
            assert response.status_code == 204
            assert response.headers["x-backend"] == "fault"
            assert response.content == b""
            assert len(response.headers.get_list("date")) == 1
    assert "Traceback" not in gateway.log()


def test_expect_is_not_passed_to_the_backend(faulty):
    base, _, _ = faulty
    response = httpx.post(
        f"{base}/echo-headers",
        content=b"{}",
        timeout=BOUND,
        headers={"Expect": "100-continue", "X-Kept": "yes"},
    )
    received = {name for name, _ in response.json()}
    assert "x-kept" in received
    assert "expect" not in received
