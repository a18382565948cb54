"""DPoP through the whole gateway in process, across a configuration reload: the stages are
built anew from each snapshot, the proofs already accepted are not forgotten (the replay cache
is the process's, kept per policy), so a reload never opens a window for a replay."""

from __future__ import annotations

import dataclasses
import time
from types import MappingProxyType

from mcp_oauth_gateway.serving.app import GatewayApp
from unit.audit_support import audited_app, call, request, token
from unit.stages.dpop_requests import JKT, proof

URL = "http://gw.example:8080/mcp"


def reload(app: GatewayApp) -> None:
    """Install a snapshot equal to the running one but compiled again (its routes are new
    objects), so every pipeline is built anew."""
    snapshot = app.control.snapshot
    listeners = {
        port: tuple(dataclasses.replace(route) for route in routes)
        for port, routes in snapshot.listeners.items()
    }
    app.control.install(dataclasses.replace(snapshot, listeners=MappingProxyType(listeners)))


async def test_a_proof_accepted_before_a_reload_is_refused_after_it(tmp_path, monkeypatch):
    app, _, _ = audited_app(tmp_path, monkeypatch)
    bound = token(cnf={"jkt": JKT})
    headers = [
        ("authorization", f"DPoP {bound}"),
        ("dpop", proof(bound, htu=URL, iat=int(time.time())).decode()),
    ]
    before = app.tables[8080].entries[0].app
    assert (await request(app, body=call("echo"), headers=headers)).status_code == 200
    reload(app)
    assert app.tables[8080].entries[0].app is not before  # the pipeline was built again
    again = await request(app, body=call("echo"), headers=headers)
    assert again.status_code == 401
    assert "this DPoP proof was used already" in again.json()["error_description"]
