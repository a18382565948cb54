"""`serve` watches its resource files: a valid change swaps the snapshot without failing requests
in flight; an invalid one, or one that would let in a request the running configuration
refuses, keeps the running configuration and says why. A file its writer still holds open is
not read; a ConfigMap volume loads, and kubelet's swap of `..data` reloads it."""

from __future__ import annotations

import os
import threading
import uuid
from pathlib import Path

import httpx
import pytest

from configmap_support import subpath_file, write_configmap
from conftest import write_example
from support import Process, free_port, gateway_cmd, wait_for_keyset, wait_for_port, wait_until

INIT = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "t", "version": "1"},
    },
}


RULE = """        matchExpressions:
          - '"mcp-agent" in jwt.groups'
"""
# An Allow alternative added: wider, so refused.
LOOSER = (
    RULE
    + """          - '"outsiders" in jwt.groups'
"""
)
# All of the rule and another: narrower, so applied (alice passes, bob no longer does).
NARROWER = (
    RULE
    + """          - 'jwt.sub == "alice"'
"""
)


def example(stack_b, directory: Path) -> tuple[int, Path]:
    """examples/provider-b in `directory` against the stack's IdP and backend; its port."""
    port = free_port()
    ports = {
        "8080": str(port),
        "9000": stack_b.idp.rsplit(":", 1)[1],
        "8000": stack_b.backend.rsplit(":", 1)[1],
    }
    return port, write_example("provider-b", directory, ports)


def start(stack_b, logs, name: str, port: int, *paths: Path) -> tuple[str, Process]:
    """A gateway watching `paths` every 0.2 s, with /status; its base URL once it serves."""
    status_port = free_port()
    gateway = Process(
        name,
        [*gateway_cmd(*paths), "--watch-interval", "0.2", "--status-port", str(status_port)],
        logs,
    )
    wait_for_port(port, gateway)
    base = f"http://127.0.0.1:{port}"
    wait_for_keyset(base, stack_b.token())
    gateway.status_url = f"http://127.0.0.1:{status_port}/"
    return base, gateway


@pytest.fixture
def watched(stack_b, tmp_path, logs):
    port, config = example(stack_b, tmp_path / "cfg")
    base, gateway = start(stack_b, logs, f"gateway-reload-{tmp_path.name}", port, config)
    try:
        yield base, config, gateway
    finally:
        gateway.stop()


def live(gateway: Process) -> dict[str, object]:
    return httpx.get(gateway.status_url, timeout=10).json()


def watch_state(gateway: Process) -> dict[str, object]:
    """The watch's polls and the files it waits for ({} from a gateway that shows neither)."""
    return live(gateway).get("reload") or {}


def polls(gateway: Process) -> int:
    return int(watch_state(gateway).get("polls", 0))


def replace_file(path: Path, text: str) -> None:
    """Write `text` as `path`'s new content in one step, as an editor saving or a ConfigMap
    update does. `write_text` truncates first: a poll of the watcher (every 0.2 s) landing
    between the truncation and the write would load an empty policy.yaml, a route without
    a policy, and the test would see that snapshot instead of the one it wrote."""
    staged = path.with_name(f".{path.name}.new")
    staged.write_text(text)
    os.replace(staged, path)


def status(base: str, token: str) -> int:
    return httpx.post(
        f"{base}/mcp",
        json=INIT,
        timeout=10,
        headers={
            "Authorization": f"Bearer {token}",
            "Accept": "application/json, text/event-stream",
        },
    ).status_code


def test_valid_change_applies_without_failing_requests_in_flight(watched, stack_b):
    base, config, gateway = watched
    token = stack_b.token()
    probe = uuid.uuid4().hex
    result: dict[str, object] = {}

    def long_call() -> None:
        response = httpx.post(
            f"{base}/mcp",
            timeout=30,
            headers={
                "Authorization": f"Bearer {token}",
                "Accept": "application/json, text/event-stream",
                "MCP-Protocol-Version": "2026-07-28",
                "Mcp-Method": "tools/call",
                "Mcp-Name": "count",
                "Mcp-Param-Probe": probe,
            },
            json={
                "jsonrpc": "2.0",
                "id": 2,
                "method": "tools/call",
                "params": {
                    "name": "count",
                    "arguments": {"n": 15},
                    "_meta": {
                        "io.modelcontextprotocol/protocolVersion": "2026-07-28",
                        "io.modelcontextprotocol/clientCapabilities": {},
                        "io.modelcontextprotocol/clientInfo": {"name": "t", "version": "1"},
                    },
                },
            },
        )
        result["status"], result["text"] = response.status_code, response.text

    caller = threading.Thread(target=long_call)
    caller.start()
    wait_until(
        lambda: any(
            dict(r["headers"]).get("mcp-param-probe") == probe
            for r in httpx.get(f"http://{stack_b.backend}/debug/requests").json()
        ),
        30,
        "the long call to reach the backend",
    )
    policy = config / "policy.yaml"
    # Narrower (a reload may only narrow): all of the rule and one alice's token fails.
    replace_file(
        policy,
        policy.read_text()
        .replace(RULE, RULE + "          - '\"operators\" in jwt.groups'\n")
        .replace("action: Allow", "action: Require"),
    )
    wait_until(lambda: status(base, token) == 403, 30, "the new rule to apply")
    caller.join(30)
    assert result["status"] == 200, result
    assert "counted to 15" in str(result["text"])
    # Logged (from the logging thread) after the new snapshot is installed, so possibly after
    # the 403 above was already served.
    wait_until(lambda: "configuration reloaded" in gateway.log(), 30, "the reload to be logged")


def test_invalid_change_keeps_the_running_configuration(watched, stack_b):
    base, config, gateway = watched
    token = stack_b.token()
    policy = config / "policy.yaml"
    original = policy.read_text()
    replace_file(policy, original.replace("jwksPath: /application/o/mcp/jwks/", "jwksPth: x"))
    wait_until(
        lambda: (
            "configuration change rejected" in gateway.log()
            and "jwksPth: unknown field" in gateway.log()
        ),
        30,
        "the rejection, naming the field",
    )
    assert status(base, token) == 200, "still serving the previous configuration"
    live = httpx.get(gateway.status_url).json()
    assert "jwksPth: unknown field" in live["lastReloadError"]
    conditions = {c["type"]: c["status"] for c in live["policies"][0]["conditions"]}
    assert conditions == {"Accepted": "True", "Attached": "True", "ResolvedRefs": "True"}
    gateway_yaml = config / "gateway.yaml"
    replace_file(policy, original)
    replace_file(
        gateway_yaml,
        gateway_yaml.read_text().replace(f"port: {base.rsplit(':', 1)[1]}", f"port: {free_port()}"),
    )
    wait_until(
        lambda: "restart the gateway to apply that" in gateway.log(),
        30,
        "the listener change to be refused",
    )
    assert status(base, token) == 200


def test_a_change_that_would_serve_a_protected_route_without_a_token_is_refused(watched, stack_b):
    base, config, gateway = watched
    policy = config / "policy.yaml"
    original = policy.read_text()
    # What the watcher could read between an editor's truncation and its write, or between
    # two saves of a change made in two steps: the route stays, its policy is gone.
    replace_file(policy, "")
    wait_until(
        lambda: "would be served without a token by HTTPRoute" in gateway.log(),
        30,
        "the change to be refused",
    )
    anonymous = httpx.post(f"{base}/mcp", json=INIT, timeout=10)
    assert anonymous.status_code == 401, anonymous.text
    assert "restart to apply" in httpx.get(gateway.status_url).json()["lastReloadError"]
    replace_file(policy, original)
    wait_until(lambda: "configuration reloaded" in gateway.log(), 30, "the full files to load")
    assert status(base, stack_b.token()) == 200


def refused(base: str, token: str) -> bool:
    """The rule holds for `token` (asserted at every look: a request past it fails the test)."""
    code = status(base, token)
    assert code == 403, f"a request the rule refuses was answered {code}"
    return True


def test_a_writer_paused_mid_file_never_lets_a_request_past_the_missing_rule(watched, stack_b):
    base, config, gateway = watched
    outsider = stack_b.token(groups=["outsiders"])
    policy = config / "policy.yaml"
    text = policy.read_text()
    cut = text.index("    authorization:")
    reloads = gateway.log().count("configuration reloaded")
    with policy.open("w") as writer:
        # The first half is a valid policy whose authorization is not written yet.
        writer.write(text[:cut])
        writer.flush()
        seen = polls(gateway)
        wait_until(
            lambda: refused(base, outsider) and polls(gateway) >= seen + 2,
            30,
            "the gateway to poll twice while the writer pauses",
        )
        assert watch_state(gateway)["waitingFor"] == [str(policy)]
        assert refused(base, outsider)
        writer.write(text[cut:].replace("action: Allow", "action: Require").replace(RULE, NARROWER))
    wait_until(
        lambda: refused(base, outsider) and status(base, stack_b.token(sub="bob")) == 403,
        30,
        "the whole file to apply",
    )
    assert status(base, stack_b.token()) == 200
    # Logged from the logging thread, maybe after the new rule already answered.
    wait_until(
        lambda: gateway.log().count("configuration reloaded") == reloads + 1, 30, "the log line"
    )
    assert watch_state(gateway)["waitingFor"] == []


def test_a_loosening_reload_is_refused_and_a_narrowing_one_applied(watched, stack_b):
    base, config, gateway = watched
    outsider, bob = stack_b.token(groups=["outsiders"]), stack_b.token(sub="bob")
    policy = config / "policy.yaml"
    original = policy.read_text()
    replace_file(policy, original.replace(RULE, LOOSER))
    wait_until(
        lambda: refused(base, outsider) and live(gateway)["lastReloadError"] is not None,
        30,
        "the wider rule to be refused",
    )
    error = live(gateway)["lastReloadError"]
    assert error.startswith(
        "GatewayPolicy default/mcp-authn: spec.traffic.authorization: "
        'Allow rule `"outsiders" in jwt.groups` added or changed'
    ), error
    assert "restart to apply" in error
    assert "configuration change rejected" in gateway.log()
    assert status(base, bob) == 200  # the old rule holds, as it was
    replace_file(
        policy, original.replace(RULE, NARROWER).replace("action: Allow", "action: Require")
    )
    wait_until(lambda: status(base, bob) == 403, 30, "the narrower rule to apply")
    assert status(base, stack_b.token()) == 200
    assert refused(base, outsider)
    assert live(gateway)["lastReloadError"] is None


def configmap_payload(texts: dict[str, str], rule: str = RULE, action: str = "Allow"):
    policy = texts["policy.yaml"].replace(RULE, rule).replace("action: Allow", f"action: {action}")
    return {"gateway.yaml": texts["gateway.yaml"], "policy.yaml": policy}


def test_a_configmap_volume_loads_and_a_data_swap_reloads_it_once(stack_b, tmp_path, logs):
    port, staged = example(stack_b, tmp_path / "staged")
    service, policy = staged.joinpath("policy.yaml").read_text().split("\n---\n", 1)
    texts = {"gateway.yaml": staged.joinpath("gateway.yaml").read_text(), "policy.yaml": policy}
    # The Service in a key mounted with subPath: a plain file kubelet never updates.
    mounted = subpath_file(tmp_path / "etc" / "service.yaml", service)
    volume = tmp_path / "volume"
    write_configmap(volume, configmap_payload(texts))
    base, gateway = start(
        stack_b, logs, f"gateway-configmap-{tmp_path.name}", port, volume, mounted
    )
    try:
        outsider, bob = stack_b.token(groups=["outsiders"]), stack_b.token(sub="bob")
        assert status(base, bob) == 200
        assert refused(base, outsider)
        # A swap that would widen the rule is refused like any other change.
        write_configmap(volume, configmap_payload(texts, LOOSER))
        wait_until(
            lambda: refused(base, outsider) and live(gateway)["lastReloadError"] is not None,
            30,
            "the wider ConfigMap to be refused",
        )
        assert "GatewayPolicy default/mcp-authn: spec.traffic.authorization" in str(
            live(gateway)["lastReloadError"]
        )
        write_configmap(volume, configmap_payload(texts, NARROWER, "Require"))
        wait_until(lambda: status(base, bob) == 403, 30, "the narrower ConfigMap to apply")
        assert status(base, stack_b.token()) == 200
        wait_until(lambda: "configuration reloaded" in gateway.log(), 30, "the log line")
        seen = polls(gateway)
        wait_until(lambda: polls(gateway) >= seen + 2, 30, "two more polls")
        # Every file changed at once (the unchanged gateway.yaml too): read and applied once.
        assert gateway.log().count("configuration reloaded") == 1
        assert live(gateway)["lastReloadError"] is None
    finally:
        gateway.stop()
