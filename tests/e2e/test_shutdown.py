"""SIGTERM with streams open, on real processes: a GET stream only waiting for events ends at
once, between two events, and is logged as answered; a stream stuck inside an event when the
grace period ends is cut: ended for its client without a made-up end of event, named in one log
line each, no tracebacks, and the process exits 0."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import httpx

from resource_yaml import route
from support import PEERS, Process, free_port, gateway_cmd, wait_for_port, wait_until

STREAMS = 3


def write_config(path: Path, port: int, backend: str) -> Path:
    """A Gateway on `port` with two routes to the fault backend: a GET stream that only waits
    for events and a POST stream that stops inside one."""
    path.write_text(
        f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec: {{listeners: [{{name: http, port: {port}}}]}}
"""
        + route("forever", "/sse-forever", backend)
        + route("partial", "/sse-partial", backend)
    )
    return path


def flowing_streams(port: int, ended: dict[str, list[bytes]]) -> list[threading.Thread]:
    """STREAMS clients of each route, returned once every stream has begun to flow; each puts
    the last bytes it got into `ended[method]` when its stream ends."""
    flowing = threading.Semaphore(0)

    def listen(method: str, path: str) -> None:
        tail = b""
        with httpx.stream(method, f"http://127.0.0.1:{port}{path}", timeout=30) as response:
            assert response.status_code == 200
            for chunk in response.iter_raw():
                if not tail:
                    flowing.release()
                tail = (tail + chunk)[-64:]
        ended[method].append(tail)

    clients = [
        threading.Thread(target=listen, args=(method, path), daemon=True)
        for method, path in [("GET", "/sse-forever"), ("POST", "/sse-partial")]
        for _ in range(STREAMS)
    ]
    for client in clients:
        client.start()
    for _ in clients:
        assert flowing.acquire(timeout=20), "a stream never started"
    return clients


def test_streams_cut_at_shutdown_are_logged_once_each(logs: Path, tmp_path):
    backend_port, port = free_port(), free_port()
    backend = Process(
        "shutdown-backend",
        [sys.executable, str(PEERS / "fault_backend.py"), str(backend_port)],
        logs,
    )
    config = write_config(tmp_path / "gateway.yaml", port, f"127.0.0.1:{backend_port}")
    gateway = Process("gateway-shutdown", [*gateway_cmd(config), "--grace-period", "1"], logs)
    try:
        wait_for_port(backend_port, backend)
        wait_for_port(port, gateway)
        ended: dict[str, list[bytes]] = {"GET": [], "POST": []}
        clients = flowing_streams(port, ended)
        gateway.popen.send_signal(signal.SIGTERM)
        assert gateway.popen.wait(30) == 0
        for client in clients:
            client.join(30)
        wait_until(
            lambda: len(ended["GET"]) == len(ended["POST"]) == STREAMS,
            10,
            "every client to see its stream end",
        )
        # Ended between two events, the client asked to come back soon (elsewhere).
        assert all(tail.endswith(b"\n\nretry: 500\n\n") for tail in ended["GET"]), ended
        # Cut inside an event: nothing added that would complete it.
        assert all(tail.endswith(b"data: 0\n\ndata: half") for tail in ended["POST"]), ended
        log = gateway.log()
        assert log.count("cut at shutdown") == STREAMS, log[-3000:]
        assert log.count("POST /sse-partial 200 cut at shutdown") == STREAMS, log[-3000:]
        assert log.count("GET /sse-forever 200 ") == STREAMS, log[-3000:]
        assert "draining: 0 requests, 6 streams in flight" in log
        assert "3 streams end at their next event boundary" in log
        assert "s: 3 requests cut at the grace period's end" in log
        for noise in ("Traceback", "Exception in ASGI application", "returned without completing"):
            assert noise not in log, log[-3000:]
    finally:
        gateway.stop()
        backend.stop()
