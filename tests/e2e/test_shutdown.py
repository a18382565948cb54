"""SIGTERM with streams still open when the grace period ends: each is ended for its client and
named in one log line, no tracebacks, and the process exits 0."""

from __future__ import annotations

import signal
import sys
import threading
from pathlib import Path

import httpx

from resource_yaml import route
from support import PEERS, Process, free_port, gateway_cmd, wait_for_port, wait_until

STREAMS = 3


def test_streams_cut_at_shutdown_are_logged_once_each(logs: Path, tmp_path):
    backend_port, port = free_port(), free_port()
    backend = Process(
        "shutdown-backend",
        [sys.executable, str(PEERS / "fault_backend.py"), str(backend_port)],
        logs,
    )
    config = tmp_path / "gateway.yaml"
    config.write_text(
        f"""
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw}}
spec: {{listeners: [{{name: http, port: {port}}}]}}
"""
        + route("forever", "/sse-forever", f"127.0.0.1:{backend_port}")
    )
    gateway = Process("gateway-shutdown", [*gateway_cmd(config), "--grace-period", "1"], logs)
    try:
        wait_for_port(backend_port, backend)
        wait_for_port(port, gateway)
        flowing = threading.Semaphore(0)
        ended: list[bytes] = []

        def listen() -> None:
            tail = b""
            with httpx.stream(
                "GET", f"http://127.0.0.1:{port}/sse-forever", timeout=30
            ) as response:
                assert response.status_code == 200
                for chunk in response.iter_raw():
                    if not tail:
                        flowing.release()
                    tail = (tail + chunk)[-64:]
            ended.append(tail)

        clients = [threading.Thread(target=listen, daemon=True) for _ in range(STREAMS)]
        for client in clients:
            client.start()
        for _ in range(STREAMS):
            assert flowing.acquire(timeout=20), "a stream never started"
        gateway.popen.send_signal(signal.SIGTERM)
        assert gateway.popen.wait(30) == 0
        for client in clients:
            client.join(30)
        wait_until(lambda: len(ended) == STREAMS, 10, "every client to see its stream end")
        log = gateway.log()
        assert log.count("cut at shutdown") == STREAMS, log[-3000:]
        assert "GET /sse-forever 200 cut at shutdown" in log
        for noise in ("Traceback", "Exception in ASGI application", "returned without completing"):
            assert noise not in log, log[-3000:]
    finally:
        gateway.stop()
        backend.stop()
