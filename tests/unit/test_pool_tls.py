"""The upstream pool over TLS, against real uvicorn servers on 127.0.0.1 in the same event loop
with certificates of a CA made in the test: the certificate is verified against the target's
CAs and name, a connection verified for one target's trust is never handed to another, and a
failed handshake is an UpstreamTlsError saying why."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from pathlib import Path

import pytest
import uvicorn

from mcp_oauth_gateway.controlplane.backend_tls import client_context
from mcp_oauth_gateway.controlplane.snapshot import TargetTls
from mcp_oauth_gateway.proxy.pool import RawUpstream
from mcp_oauth_gateway.proxy.upstream import UpstreamError, UpstreamTlsError
from support import free_port
from tls_support import TestCa

NAME = "mcp.tls.test"
HOST = [(b"host", b"127.0.0.1")]


async def echo(scope, receive, send):
    """Answers the client's port and the Host header it got."""
    if scope["type"] != "http":
        return
    while (await receive()).get("more_body"):
        pass
    headers = dict(scope["headers"])
    payload = {"client": scope["client"][1], "host": headers[b"host"].decode()}
    await send({"type": "http.response.start", "status": 200, "headers": []})
    await send({"type": "http.response.body", "body": json.dumps(payload).encode()})


async def serve(**tls: str) -> AsyncIterator[str]:
    """uvicorn on a free loopback port (`ssl_certfile`, `ssl_keyfile`: over TLS)."""
    port = free_port()
    config = uvicorn.Config(
        echo, host="127.0.0.1", port=port, log_level="critical", lifespan="off", **tls
    )
    server = uvicorn.Server(config)
    task = asyncio.create_task(server.serve())
    while not server.started:
        await asyncio.sleep(0.01)
    yield f"127.0.0.1:{port}"
    server.should_exit = True
    await task


@pytest.fixture(scope="module")
def ca() -> TestCa:
    return TestCa("pool test CA")


@pytest.fixture
async def tls_server(ca: TestCa, tmp_path: Path) -> AsyncIterator[str]:
    """`host:port` of a server whose certificate names NAME only."""
    files = ca.issue(tmp_path, "server", NAME)
    async for address in serve(ssl_certfile=str(files.cert), ssl_keyfile=str(files.key)):
        yield address


@pytest.fixture
async def plain_server() -> AsyncIterator[str]:
    async for address in serve():
        yield address


def trusting(ca_pem: bytes | None, name: str = NAME) -> TargetTls:
    return TargetTls(name, ca_pem, client_context(ca_pem))


async def get(pool: RawUpstream, url: str, tls: TargetTls | None) -> dict[str, object]:
    response = await pool.request("GET", url, HOST, b"", 10, tls=tls)
    body = b"".join([chunk async for chunk in response.chunks()])
    response.release()
    assert response.status == 200
    return json.loads(body)


async def test_a_request_over_tls_reaches_the_server_and_its_connection_is_reused(ca, tls_server):
    pool = RawUpstream()
    tls = trusting(ca.pem)
    try:
        first = await get(pool, f"https://{tls_server}/mcp", tls)
        second = await get(pool, f"https://{tls_server}/mcp", tls)
    finally:
        await pool.close()
    assert first["host"] == "127.0.0.1"  # the Host header given, not the server name
    assert first["client"] == second["client"]


async def test_a_target_trusting_other_cas_never_gets_a_connection_verified_for_another(
    ca, tls_server
):
    pool = RawUpstream()
    url = f"https://{tls_server}/mcp"
    try:
        await get(pool, url, trusting(ca.pem))  # leaves a verified connection idle in the pool
        with pytest.raises(UpstreamTlsError, match="certificate verify failed"):
            await get(pool, url, trusting(TestCa("another CA").pem))
        with pytest.raises(UpstreamTlsError, match="certificate verify failed"):
            await get(pool, url, trusting(ca.pem, "elsewhere.test"))
    finally:
        await pool.close()


@pytest.mark.parametrize(
    ("name", "trusted", "why"),
    [
        (NAME, False, "certificate verify failed: unable to get local issuer certificate"),
        ("elsewhere.test", True, "certificate verify failed: Hostname mismatch"),
        # The default server name is the host connected to; the certificate does not hold it.
        ("127.0.0.1", True, "certificate verify failed: IP address mismatch"),
    ],
)
async def test_a_certificate_that_is_not_trusted_or_not_for_the_name_is_refused(
    ca, tls_server, name, trusted, why
):
    pool = RawUpstream()
    host, port = tls_server.split(":")
    try:
        with pytest.raises(UpstreamTlsError) as refused:
            await get(
                pool, f"https://{tls_server}/mcp", trusting(ca.pem if trusted else None, name)
            )
    finally:
        await pool.close()
    assert str(refused.value).startswith(f"the TLS handshake with {host}:{port} failed: {why}")


async def test_tls_to_a_server_that_speaks_plain_http_is_a_tls_failure(plain_server):
    pool = RawUpstream()
    try:
        with pytest.raises(UpstreamTlsError, match=f"TLS handshake with {plain_server} failed"):
            await get(pool, f"https://{plain_server}/mcp", trusting(None, "127.0.0.1"))
    finally:
        await pool.close()


async def test_https_is_never_spoken_in_the_clear_nor_tls_settings_left_unused(ca, plain_server):
    pool = RawUpstream()
    try:
        with pytest.raises(UpstreamError, match="without TLS"):
            await get(pool, f"https://{plain_server}/mcp", None)
        with pytest.raises(UpstreamError, match="with TLS"):
            await get(pool, f"http://{plain_server}/mcp", trusting(ca.pem))
        assert (await get(pool, f"http://{plain_server}/mcp", None))["host"] == "127.0.0.1"
    finally:
        await pool.close()
