"""The gateway's own listeners (`serve --admin-port`, `--health-port`): the health listener, which
a pod's probes reach on the pod's address, answers `/healthz` and `/readyz` and nothing else, and
its readiness says nothing of the configuration; the admin listener keeps `/config`, `/status`
and `/metrics`, on loopback unless told otherwise; bad flags are one line naming the flag."""

from __future__ import annotations

import asyncio

import httpx
import pytest

from mcp_oauth_gateway import server
from mcp_oauth_gateway.cli import main
from mcp_oauth_gateway.cli.flags import parser
from mcp_oauth_gateway.cli.serve import serve_options
from mcp_oauth_gateway.controlplane import ControlPlane, build_snapshot
from mcp_oauth_gateway.listeners import DynamicListeners
from mcp_oauth_gateway.resources import load_paths
from mcp_oauth_gateway.serving.app import GatewayApp
from mcp_oauth_gateway.serving.options import ServeOptions
from unit.resources_fixture import BASE, policy, write

ADMIN, HEALTH = 9901, 9902


def gateway(tmp_path) -> GatewayApp:
    """A gateway whose policy's keyset was never fetched (not ready), with both listeners."""
    snapshot = build_snapshot(load_paths([write(tmp_path, BASE + policy())]))
    return GatewayApp(ControlPlane(snapshot), ServeOptions(status_port=ADMIN, health_port=HEALTH))


async def get(app: GatewayApp, port: int, path: str) -> httpx.Response:
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(transport=transport, base_url=f"http://127.0.0.1:{port}") as c:
        return await c.get(path)


@pytest.mark.parametrize("path", ["/config", "/status", "/", "/metrics", "/mcp", "/readyz/x"])
async def test_the_health_listener_answers_the_two_probes_only(tmp_path, path):
    app = gateway(tmp_path)
    response = await get(app, HEALTH, path)
    assert response.status_code == 404
    assert response.json() == {
        "error": "not_found",
        "error_description": "the health listener answers /healthz and /readyz only",
    }
    assert (await get(app, ADMIN, "/config")).status_code == 200


async def test_readiness_on_the_health_listener_says_nothing_of_the_configuration(tmp_path):
    app = gateway(tmp_path)
    assert (await get(app, HEALTH, "/healthz")).json() == {"status": "ok"}
    ready = await get(app, HEALTH, "/readyz")
    # Not ready (the keyset was never fetched), and not why: that names the keyset's host.
    assert (ready.status_code, ready.json()) == (503, {"ready": False})
    detailed = await get(app, ADMIN, "/readyz")
    assert detailed.status_code == 503
    assert "not yet fetched" in detailed.json()["waitingFor"][0]


def options(*flags: str) -> ServeOptions:
    return serve_options(parser().parse_args(["serve", "-f", "gw.yaml", *flags]))


def test_both_listeners_are_on_loopback_unless_told_otherwise():
    chosen = options("--admin-port", "9090", "--health-port", "9091")
    assert (chosen.status_port, chosen.admin_host) == (9090, "127.0.0.1")
    assert (chosen.health_port, chosen.health_host) == (9091, "127.0.0.1")
    wide = options("--admin-port", "9090", "--health-port", "9091", "--health-host", "0.0.0.0")
    assert (wide.admin_host, wide.health_host) == ("127.0.0.1", "0.0.0.0")
    assert options().status_port is None
    assert options().health_port is None


@pytest.mark.parametrize(
    ("flags", "says"),
    [
        (("--admin-port", "9090", "--health-port", "9090"), "--health-port 9090 is --admin-port"),
        (("--status-port", "9090", "--health-port", "9090"), "--health-port 9090 is --admin-port"),
        (("--health-port", "0"), "--health-port '0': a port is a whole number from 1 to 65535"),
        (("--health-port", "65536"), "--health-port '65536': a port is a whole number"),
        (("--admin-port", "http"), "--admin-port 'http': a port is a whole number"),
        (("--admin-port", "-1"), "--admin-port '-1': a port is a whole number"),
        (("--admin-host", "0.0.0.0"), "--admin-host 0.0.0.0 needs --admin-port PORT"),
        (("--health-host", "0.0.0.0"), "--health-host 0.0.0.0 needs --health-port PORT"),
    ],
)
def test_bad_listener_flags_are_one_line_naming_the_flag(flags, says, capsys):
    assert main(["serve", "-f", "does-not-matter.yaml", *flags]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1
    assert err.startswith(f"error: {says}"), err


@pytest.mark.parametrize("flag", ["--admin-port", "--health-port"])
def test_a_gateway_listener_on_an_own_listeners_port_is_refused(
    tmp_path, flag, capsys, monkeypatch
):
    def served(*args: object) -> int:
        raise AssertionError("served with a port taken twice")

    monkeypatch.setattr(server, "serve", served)
    path = write(tmp_path, BASE + policy())
    port = next(iter(build_snapshot(load_paths([path])).listeners))
    assert main(["serve", "-f", str(path), flag, str(port)]) == 2
    err = capsys.readouterr().err
    holder = "admin" if flag == "--admin-port" else "health"
    assert err.startswith(f"error: port {port} is a Gateway listener's and the {holder} listener")


async def test_in_a_cluster_a_gateway_listener_on_an_own_listeners_port_is_not_bound():
    own = ServeOptions(status_port=ADMIN, health_port=HEALTH)
    listeners = DynamicListeners("127.0.0.1", asyncio.Protocol, [], server.reserved_ports(own))
    listeners.wanted = frozenset({ADMIN, HEALTH})
    await listeners.reconcile()
    listeners.close()
    assert listeners.bound == {}
    assert listeners.waiting() == [
        f"listener port {ADMIN}: port {ADMIN} is the admin listener's (--admin-port)",
        f"listener port {HEALTH}: port {HEALTH} is the health listener's (--health-port)",
    ]


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.0.0.2", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.0.0.7", False),
        ("gateway.example", False),
    ],
)
def test_an_admin_host_off_loopback_is_warned_about(host, loopback):
    # Off loopback, /config and /status reach whoever reaches the address: a warning at start.
    assert server.is_loopback(host) is loopback
