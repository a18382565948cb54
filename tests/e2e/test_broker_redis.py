"""Two gateway replicas share broker state through a real redis-server: a sign-in started on
one finishes on the other, and a code redeemed on one cannot be replayed on the other. Like
replicas behind one load balancer, they have one configuration (the resource is the public URL,
replica b's here, whose host every request names) but for the port each listens on."""

from __future__ import annotations

from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from headless_login import sign_in

from broker_calls import CALLBACK, VERIFIER, authorize_url, register
from conftest import use_broker, write_example
from support import Process, free_port, gateway_cmd, wait_for_port


class Replica:
    def __init__(self, base: str):
        self.gateway = base
        self.mcp = f"{base}/mcp"


@pytest.fixture(scope="module")
def replicas(redis_url, broker_b, tmp_path_factory, logs) -> Iterator[tuple[Replica, Replica]]:
    idp_port = broker_b.idp.rsplit(":", 1)[1]
    backend_port = broker_b.backend.rsplit(":", 1)[1]
    procs, out = [], []
    ports = {"a": free_port(), "b": free_port()}
    shared = f"resource: http://127.0.0.1:{ports['b']}/mcp"
    try:
        for name, port in ports.items():
            config = use_broker(
                write_example(
                    "provider-b",
                    tmp_path_factory.mktemp(f"replica-{name}"),
                    {"8080": str(port), "9000": idp_port, "8000": backend_port},
                )
            )
            policy = config / "policy.yaml"
            own = f"resource: http://127.0.0.1:{port}/mcp"
            policy.write_text(policy.read_text().replace(own, shared))
            proc = Process(
                f"gateway-replica-{name}",
                gateway_cmd(config),
                logs,
                env={"MCP_OAUTH_GATEWAY_REDIS_URL": redis_url},
            )
            procs.append(proc)
            wait_for_port(port, proc)
            out.append(Replica(f"http://127.0.0.1:{port}"))
        yield out[0], out[1]
    finally:
        for proc in procs:
            proc.stop()


async def test_sign_in_started_on_one_replica_finishes_on_the_other(replicas):
    a, b = replicas
    public = {"Host": urlsplit(b.gateway).netloc}  # what the load balancer passes on
    client_id = register(a, headers=public)  # signed with the secret both replicas share
    with httpx.Client() as browser:
        consent = browser.get(authorize_url(b, client_id))
        assert consent.status_code == 200, consent.text
        request_id = consent.text.split('name="request" value="')[1].split('"')[0]
        to_idp = browser.post(
            f"{b.gateway}/mcp/oauth/authorize",
            data={"request": request_id, "decision": "allow"},
            headers={"Origin": b.gateway},
        )
        assert to_idp.status_code == 302, to_idp.text
    provider_callback = f"{b.gateway}/mcp/oauth/callback"
    answer = await sign_in(to_idp.headers["location"], "alice", "x", provider_callback)
    # The load balancer sends the provider's redirect to the other replica (same public host).
    finished = httpx.get(
        f"{a.gateway}/mcp/oauth/callback",
        params=answer,
        headers=public,
    )
    assert finished.status_code == 302, finished.text
    query = parse_qs(urlsplit(finished.headers["location"]).query)
    assert query["iss"] == [f"{b.gateway}/mcp"]
    code = query["code"][0]
    form = {
        "grant_type": "authorization_code",
        "code": code,
        "client_id": client_id,
        "redirect_uri": CALLBACK,
        "code_verifier": VERIFIER,
    }
    tokens = httpx.post(f"{b.gateway}/mcp/oauth/token", data=form)
    assert tokens.status_code == 200, tokens.text
    assert tokens.json()["access_token"]
    replay = httpx.post(f"{a.gateway}/mcp/oauth/token", data=form, headers=public)
    assert replay.status_code == 400
    assert replay.json()["error"] == "invalid_grant"
