"""Helpers for tests that start real processes on loopback: ports, processes, keys, tokens."""

from __future__ import annotations

import asyncio
import base64
import json
import os
import re
import secrets
import shutil
import socket
import subprocess
import sys
import time
from collections import deque
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import ModuleType
from typing import Any

import httpx
from joserfc import jwt
from joserfc.jwk import RSAKey

ROOT = Path(__file__).resolve().parent.parent
NODE_DIR = ROOT / "tests" / "node"
PEERS = ROOT / "tests" / "peers"
EXAMPLES = ROOT / "examples"


def yaml_load(text: str) -> Any:
    """One YAML document, parsed by libyaml (PyYAML's C binding: the documents yaml.safe_load
    makes, several times faster; the suite parses thousands)."""
    import yaml

    return yaml.load(text, Loader=yaml.CSafeLoader)


def yaml_load_all(text: str) -> list[Any]:
    """Every YAML document of `text`, parsed as `yaml_load` does."""
    import yaml

    return list(yaml.load_all(text, Loader=yaml.CSafeLoader))


def _rules(role: dict) -> set[tuple[str, str, str]]:
    return {
        (verb, group, resource)
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def deploy_rbac_rules() -> set[tuple[str, str, str]]:
    """(verb, apiGroup, resource) granted by the roles deploy/rbac.yaml binds to the gateway's
    ServiceAccount (not the Secret-reading ClusterRole, which a namespace binds to opt in)."""
    import yaml

    docs = [d for d in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()) if d]
    bound = {(d["roleRef"]["kind"], d["roleRef"]["name"]) for d in docs if "roleRef" in d}
    granted = set()
    for doc in docs:
        if (
            doc["kind"] in ("ClusterRole", "Role")
            and (doc["kind"], doc["metadata"]["name"]) in bound
        ):
            granted |= _rules(doc)
    return granted


def deploy_secret_reader_rules() -> set[tuple[str, str, str]]:
    """(verb, apiGroup, resource) of deploy/rbac.yaml's Secret-reading ClusterRole."""
    import yaml

    from mcp_oauth_gateway.controlplane.cluster_secrets import SECRET_READER_ROLE

    for doc in yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml").read_text()):
        if doc and doc["kind"] == "ClusterRole" and doc["metadata"]["name"] == SECRET_READER_ROLE:
            return _rules(doc)
    raise AssertionError(f"deploy/rbac.yaml has no ClusterRole {SECRET_READER_ROLE}")


def controller_rbac_calls() -> set[tuple[str, str, str]]:
    """Every (verb, apiGroup, resource) the controller's code can ask the API server for."""
    from mcp_oauth_gateway.kube.kinds import LEASE, SECRET, WATCHED

    calls = {(verb, kind.group, kind.plural) for kind in WATCHED for verb in ("list", "watch")}
    calls |= {
        ("update", kind.group, f"{kind.plural}/status") for kind in WATCHED if kind.writes_status
    }
    calls |= {(verb, SECRET.group, SECRET.plural) for verb in ("list", "watch")}
    return calls | {(verb, LEASE.group, LEASE.plural) for verb in ("get", "create", "update")}


# Where this process hands out ports (`claim_ports`); while empty, the kernel chooses.
_SHARE: deque[int] = deque()
_HANDED_OUT: set[int] = set()
# The kernel gives ports from its ephemeral range to bind(0) and to every outgoing connection,
# so a port it chose may be taken by another process before the server binds it. Ports below
# that range it never gives out by itself; above 10080, the last port browsers and Node's fetch
# refuse to connect to (the Fetch standard's bad ports).
_PRIVATE_FROM = 10100


def claim_ports(index: int, count: int) -> None:
    """Hand out ports from slice `index` of `count` of the loopback ports below the kernel's
    ephemeral range: each xdist worker its own slice, so two workers never pick one port for
    servers they start at the same time (tests/xdist_scheduling.py calls this)."""
    ephemeral = Path("/proc/sys/net/ipv4/ip_local_port_range")
    low = int(ephemeral.read_text().split()[0]) if ephemeral.exists() else 32768
    size = (low - _PRIVATE_FROM) // count
    if size < 500:  # a system whose ephemeral range starts low: take the kernel's choice
        return
    start = _PRIVATE_FROM + index * size
    # From a random place in the slice: two test runs at once rarely walk in step.
    _SHARE.clear()
    _SHARE.extend(range(start, start + size))
    _SHARE.rotate(secrets.randbelow(size))


def _bindable(port: int) -> bool:
    with socket.socket() as sock:
        try:
            sock.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port() -> int:
    """A TCP port on 127.0.0.1 that nothing listens on right now, and that this process has not
    handed out lately: a port just closed may still be in use by its server's last connections,
    and two servers of one test would then collide. From this process's share of ports when it
    has one (`claim_ports`), in turn, else from the kernel."""
    if _SHARE:
        for _ in range(len(_SHARE)):
            port = _SHARE[0]
            _SHARE.rotate(-1)
            if _bindable(port):
                return port
        raise AssertionError("no free TCP port on 127.0.0.1 in this worker's share")
    for _ in range(100):
        with socket.socket() as sock:
            sock.bind(("127.0.0.1", 0))
            port = sock.getsockname()[1]
        if port not in _HANDED_OUT:
            _HANDED_OUT.add(port)
            return port
    raise AssertionError("no fresh TCP port on 127.0.0.1 after 100 tries")


def with_ports(text: str, ports: Mapping[str, int]) -> str:
    """`text` with each documented port (a key of `ports`, as a whole number) replaced by the
    test's, in one pass: one replacement after another would also rewrite a port already put
    in (a gateway given 18000 became 111522 once the backend's 8000 was replaced next)."""
    if not ports:
        return text
    pattern = re.compile(r"(?<!\d)(" + "|".join(map(re.escape, ports)) + r")(?!\d)")
    return pattern.sub(lambda match: str(ports[match[1]]), text)


def wait_for_port(port: int, proc: Process | None = None, timeout: float = 30.0) -> None:
    """Block until 127.0.0.1:port accepts connections (or fail with the process log)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.popen.poll() is not None:
            raise AssertionError(f"{proc.name} exited with {proc.popen.returncode}:\n{proc.log()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    log = proc.log() if proc else ""
    raise AssertionError(f"nothing listens on 127.0.0.1:{port} after {timeout}s\n{log}")


class Process:
    """A child process whose output goes to a log file; always stopped by the fixture."""

    def __init__(
        self,
        name: str,
        cmd: Sequence[str],
        log_dir: Path,
        env: Mapping[str, str] | None = None,
        cwd: Path | None = None,
    ):
        self.name = name
        self.log_path = log_dir / f"{name}.log"
        self._log = self.log_path.open("wb")
        self.popen = subprocess.Popen(
            list(cmd),
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=cwd,
            env={**os.environ, **(env or {})},
            stdin=subprocess.DEVNULL,
        )

    def log(self) -> str:
        """Everything the process printed so far."""
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def stop(self, timeout: float = 10.0) -> int:
        """SIGTERM, then SIGKILL after `timeout`; returns the exit code."""
        if self.popen.poll() is None:
            self.popen.terminate()
            try:
                self.popen.wait(timeout)
            except subprocess.TimeoutExpired:
                self.popen.kill()
                self.popen.wait(5)
        self._log.close()
        return self.popen.returncode


def node() -> str:
    """The node binary; the test command installs the node peers first."""
    binary = shutil.which("node")
    assert binary, "node is required for the end-to-end tests (install Node.js 20+)"
    assert (NODE_DIR / "node_modules").is_dir(), (
        "tests/node/node_modules is missing: run `make test` (it runs `npm ci` in tests/node)"
    )
    return binary


def gateway_cmd(*paths: Path | str) -> list[str]:
    """The command line for `mcp-oauth-gateway serve -f PATH…`."""
    cmd = [sys.executable, "-m", "mcp_oauth_gateway", "serve"]
    for path in paths:
        cmd += ["-f", str(path)]
    return cmd


def new_key(kid: str) -> RSAKey:
    """A fresh RS256 signing key."""
    return RSAKey.generate_key(2048, parameters={"kid": kid, "alg": "RS256", "use": "sig"})


def jwks_of(*keys: RSAKey) -> dict[str, object]:
    """The public JWKS of these keys."""
    return {"keys": [k.as_dict(private=False) for k in keys]}


def mint(
    key: RSAKey,
    claims: Mapping[str, object],
    header: Mapping[str, object] | None = None,
    alg: str = "RS256",
) -> str:
    """Sign `claims` with `key` (kid from the key unless the header says otherwise)."""
    head = {"alg": alg, "kid": key.kid, "typ": "at+jwt", **(header or {})}
    return jwt.encode(head, dict(claims), key, algorithms=[alg])


def b64url(data: bytes) -> str:
    """Unpadded base64url."""
    return base64.urlsafe_b64encode(data).rstrip(b"=").decode()


def unsigned(header: Mapping[str, object], claims: Mapping[str, object], sig: bytes = b"") -> str:
    """A token assembled by hand (for malformed and `alg: none` cases)."""
    return ".".join(
        [b64url(json.dumps(header).encode()), b64url(json.dumps(claims).encode()), b64url(sig)]
    )


def claims_for(
    issuer: str,
    audience: str,
    sub: str = "alice",
    groups: Sequence[str] = ("mcp-agent", "users"),
    ttl: int = 24 * 3600,
    **extra: object,
) -> dict[str, object]:
    """A valid claim set for `issuer` and `audience`. Valid for a day by default: tokens made
    when tests are collected (parametrize tables) are used after the whole e2e tree ran."""
    now = int(time.time())
    return {
        "iss": issuer,
        "aud": audience,
        "sub": sub,
        "iat": now,
        "exp": now + ttl,
        "groups": list(groups),
        **extra,
    }


# An MCP initialize request (2025-11-25) and the headers a streamable HTTP client sends with it.
INITIALIZE = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "initialize",
    "params": {
        "protocolVersion": "2025-11-25",
        "capabilities": {},
        "clientInfo": {"name": "gateway-test", "version": "1"},
    },
}


def mcp_headers(token: str | None = None, **extra: str) -> dict[str, str]:
    """What an MCP client sends with a request, with the bearer token when given."""
    headers = {"Accept": "application/json, text/event-stream", **extra}
    if token is not None:
        headers["Authorization"] = f"Bearer {token}"
    return headers


def wait_until(predicate, timeout: float = 30.0, what: str = "condition") -> None:
    """Poll `predicate` until it returns true."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        time.sleep(0.1)
    raise AssertionError(f"timed out after {timeout}s waiting for {what}")


async def wait_until_async(predicate, bound: float = 30.0, what: str = "condition") -> None:
    """Poll `predicate` on the event loop until it returns true (fails after `bound` s)."""
    try:
        async with asyncio.timeout(bound):
            while not predicate():
                await asyncio.sleep(0.01)
    except TimeoutError:
        raise AssertionError(f"timed out after {bound}s waiting for {what}") from None


def wait_for_keyset(base: str, token: str, timeout: float = 30.0) -> None:
    """Until the gateway has fetched its keyset (a valid token is no longer refused for it)."""

    def ready() -> bool:
        response = httpx.post(
            f"{base}/mcp", headers={"Authorization": f"Bearer {token}"}, json={}, timeout=5
        )
        return "not yet available" not in response.text

    wait_until(ready, timeout, "the gateway to fetch its keyset")


def second_issuer(idp: str) -> tuple[str, tuple[tuple[str, str], ...]]:
    """A second provider for examples/provider-b's policy, as `(issuer, edits)`: another issuer
    whose tokens the same IdP key signs (alice there is another person), and no `mcp.provider`
    (Facade fronts one provider's metadata, so it cannot front two)."""
    issuer = f"{idp}/application/o/partner/"
    anchor = "              jwksPath: /application/o/mcp/jwks/\n"
    provider = (
        f"        - issuer: {issuer}\n"
        "          audiences: [mcp-public]\n"
        f"          jwks: {{remote: {{url: '{idp}/application/o/mcp/jwks/'}}}}\n"
    )
    return issuer, ((anchor, anchor + provider), ("        provider: ProviderB\n", ""))


def unverified_claims(token: str) -> dict[str, object]:
    """The payload of a token, without verification (for assertions only)."""
    payload = token.split(".")[1]
    return json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))


def read_until(stream, found, timeout: float = 90.0) -> tuple[list[str], object]:
    """Read a child's output line by line until `found(line)` returns something truthy."""
    lines: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = stream.readline()
        if not line:
            break
        lines.append(line)
        result = found(line)
        if result:
            return lines, result
    raise AssertionError("the expected line never came:\n" + "".join(lines)[-3000:])


def backend_requests(backend: str) -> list[dict]:
    """What the MCP backend received, newest last."""
    return httpx.get(f"http://{backend}/debug/requests", timeout=5).json()


def tool_module(name: str) -> ModuleType:
    """`tools/<name>.py`, imported from its path as when it runs as a script: tools/ is not a
    package, and its helper modules (`tools/_*.py`) are imported from tools/ itself."""
    import importlib.util

    if name in sys.modules:
        return sys.modules[name]
    tools = ROOT / "tools"
    if str(tools) not in sys.path:
        sys.path.insert(0, str(tools))
    spec = importlib.util.spec_from_file_location(name, tools / f"{name}.py")
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    # Registered first: its dataclasses look their module up while the class is made.
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
