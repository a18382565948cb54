"""Session fixtures: real processes on free loopback ports, always stopped at the end.

- `backend`: a real MCP server from the `mcp` SDK.
- `idp_b` / `idp_a`: the npm `oidc-provider`, set up like provider B (authentik layout, no DCR,
  aud = client id) and like provider A (Keycloak realm layout, DCR, aud = resource URL).
- `stack_b` / `stack_a`: the gateway serving `examples/provider-b` / `examples/provider-a` with
  the example's addresses replaced by the test ports.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from joserfc.jwk import RSAKey

from support import (
    EXAMPLES,
    NODE_DIR,
    Process,
    claims_for,
    free_port,
    gateway_cmd,
    mint,
    new_key,
    node,
    wait_for_keyset,
    wait_for_port,
    with_ports,
)

# Redis, the Kubernetes API servers, Keycloak and third-party MCP servers; how xdist workers
# share the tests.
pytest_plugins = ["xdist_scheduling", "service_fixtures"]

CLIENT_ID = "mcp-public"


@pytest.fixture(scope="session")
def logs(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where every process of the session writes its log."""
    return tmp_path_factory.mktemp("logs")


@pytest.fixture(scope="session")
def idp_key(tmp_path_factory: pytest.TempPathFactory) -> tuple[RSAKey, Path]:
    """The identity providers' signing key, shared with tests that mint edge-case tokens."""
    key = new_key("idp-key-1")
    path = tmp_path_factory.mktemp("keys") / "idp-key.json"
    path.write_text(json.dumps(key.as_dict(private=True)))
    return key, path


@dataclass
class Stack:
    """A gateway in front of the backend with an identity provider."""

    gateway: str
    idp: str
    issuer: str
    audience: str
    key: RSAKey
    config_dir: Path
    process: Process
    backend: str
    status: str = ""

    @property
    def mcp(self) -> str:
        """The protected MCP URL."""
        return f"{self.gateway}/mcp"

    def token(self, **overrides: object) -> str:
        """A valid access token for this stack (claims overridable)."""
        claims = claims_for(self.issuer, self.audience)
        claims.update(overrides)
        return mint(self.key, claims)


def write_example(name: str, target: Path, ports: dict[str, int]) -> Path:
    """Copy an example with its documented ports replaced by the test's ports."""
    target.mkdir(parents=True, exist_ok=True)
    for source in sorted((EXAMPLES / name).glob("*.yaml")):
        (target / source.name).write_text(with_ports(source.read_text(), ports))
    return target


def gateway_beside(
    stack: Stack,
    directory: Path,
    logs: Path,
    name: str,
    policy_insert: str = "",
    args: tuple[str, ...] = (),
    edits: tuple[tuple[str, str], ...] = (),
) -> Iterator[str]:
    """Another gateway serving examples/provider-b against `stack`'s IdP and backend, with
    `policy_insert` placed before the policy's authorization section; yields its base URL."""
    port = free_port()
    config = write_example(
        "provider-b",
        directory,
        {
            "8080": str(port),
            "9000": stack.idp.rsplit(":", 1)[1],
            "8000": stack.backend.rsplit(":", 1)[1],
        },
    )
    policy = config / "policy.yaml"
    text = policy.read_text().replace(
        "    authorization:\n", policy_insert + "    authorization:\n"
    )
    for before, after in edits:
        assert before in text, before
        text = text.replace(before, after)
    policy.write_text(text)
    process = Process(name, [*gateway_cmd(config), *args], logs)
    try:
        wait_for_port(port, process)
        base = f"http://127.0.0.1:{port}"
        wait_for_keyset(base, stack.token())
        yield base
    finally:
        process.stop()


def use_broker(config: Path) -> Path:
    """Switch a copied example's policy to Broker mode."""
    policy = config / "policy.yaml"
    policy.write_text(
        policy.read_text().replace(
            "        provider: ", "        authorizationServerMode: Broker\n        provider: "
        )
    )
    return config


def _example_for_stack(
    example: str,
    target: Path,
    ports: dict[str, int],
    broker: bool,
    policy_extra: str,
    policy_edit: tuple[str, str],
    route_edits: tuple[tuple[str, str], ...],
) -> Path:
    """`example` copied with the test's ports, its route and policy edited as asked."""
    config = write_example(example, target, ports)
    if broker:
        use_broker(config)
    route = config / "gateway.yaml"
    for before, after in route_edits:
        assert before in route.read_text(), before
        route.write_text(route.read_text().replace(before, after))
    policy = config / "policy.yaml"
    if policy_edit[0]:
        assert policy_edit[0] in policy.read_text(), policy_edit
        policy.write_text(policy.read_text().replace(*policy_edit))
    if policy_extra:
        policy.write_text(policy.read_text() + policy_extra)
    return config


def _issuer_and_audience(flavour: str, idp: str, resource: str) -> tuple[str, str]:
    """What the flavour's tokens carry: Keycloak's realm and the resource, or authentik's
    application and the client id."""
    if flavour == "keycloak":
        return f"{idp}/realms/master", resource
    return f"{idp}/application/o/mcp/", CLIENT_ID


def _start_stack(
    flavour: str,
    example: str,
    idp_port_in_example: str,
    logs: Path,
    tmp: Path,
    key: tuple[RSAKey, Path],
    backend: str,
    broker: bool = False,
    gateway_args: tuple[str, ...] = (),
    name: str = "",
    policy_extra: str = "",
    gateway_env: dict[str, str] | None = None,
    idp_extra: dict[str, str] | None = None,
    policy_edit: tuple[str, str] = ("", ""),
    route_edits: tuple[tuple[str, str], ...] = (),
) -> Iterator[Stack]:
    gw_port, idp_port, status_port = free_port(), free_port(), free_port()
    gateway, idp_url = f"http://127.0.0.1:{gw_port}", f"http://127.0.0.1:{idp_port}"
    resource = f"{gateway}/mcp"
    idp_env = {
        "IDP_PORT": str(idp_port),
        "FLAVOUR": flavour,
        "KEY_FILE": str(key[1]),
        "CLIENT_ID": CLIENT_ID,
        "RESOURCE": resource,
        "SLUG": "mcp",
        **(idp_extra or {}),
    }
    idp = Process(f"idp-{flavour}", [node(), str(NODE_DIR / "idp.mjs")], logs, env=idp_env)
    ports = {"8080": gw_port, idp_port_in_example: idp_port, "8000": int(backend.rsplit(":", 1)[1])}
    config = _example_for_stack(
        example, tmp / example, ports, broker, policy_extra, policy_edit, route_edits
    )
    gw = None
    try:
        wait_for_port(idp_port, idp)
        name = name or f"gateway-{flavour}{'-broker' if broker else ''}"
        command = [*gateway_cmd(config), "--status-port", str(status_port), *gateway_args]
        gw = Process(name, command, logs, env=gateway_env)
        wait_for_port(gw_port, gw)
        issuer, audience = _issuer_and_audience(flavour, idp_url, resource)
        status = f"http://127.0.0.1:{status_port}/"
        stack = Stack(gateway, idp_url, issuer, audience, key[0], config, gw, backend, status)
        wait_for_keyset(gateway, stack.token())
        yield stack
    finally:
        if gw is not None:
            gw.stop()
        idp.stop()


@pytest.fixture(scope="session")
def stack_b(
    logs: Path, tmp_path_factory: pytest.TempPathFactory, idp_key: tuple[RSAKey, Path], backend: str
) -> Iterator[Stack]:
    """Provider B: examples/provider-b against oidc-provider in the authentik layout."""
    yield from _start_stack(
        "authentik",
        "provider-b",
        "9000",
        logs,
        tmp_path_factory.mktemp("stack-b"),
        idp_key,
        backend,
    )


@pytest.fixture(scope="session")
def stack_a(
    logs: Path, tmp_path_factory: pytest.TempPathFactory, idp_key: tuple[RSAKey, Path], backend: str
) -> Iterator[Stack]:
    """Provider A: examples/provider-a against oidc-provider in the Keycloak layout."""
    yield from _start_stack(
        "keycloak", "provider-a", "8180", logs, tmp_path_factory.mktemp("stack-a"), idp_key, backend
    )


@pytest.fixture(scope="session")
def stack_json(
    logs: Path, tmp_path_factory: pytest.TempPathFactory, idp_key: tuple[RSAKey, Path], backend: str
) -> Iterator[Stack]:
    """Provider B with `--log-format json`."""
    yield from _start_stack(
        "authentik",
        "provider-b",
        "9000",
        logs,
        tmp_path_factory.mktemp("stack-json"),
        idp_key,
        backend,
        gateway_args=("--log-format", "json"),
        name="gateway-json",
    )


TOOL_RULES = """\
  backend:
    mcp:
      authorization:
        action: Allow
        policy:
          matchExpressions:
            - 'mcp.tool.name == "add"'
            - '"admin" in jwt.groups'
"""


@pytest.fixture(scope="session")
def stack_tools(
    logs: Path, tmp_path_factory: pytest.TempPathFactory, idp_key: tuple[RSAKey, Path], backend: str
) -> Iterator[Stack]:
    """Provider B with tool-level rules: `add` for everyone, every tool for group admin."""
    yield from _start_stack(
        "authentik",
        "provider-b",
        "9000",
        logs,
        tmp_path_factory.mktemp("stack-tools"),
        idp_key,
        backend,
        name="gateway-tools",
        policy_extra=TOOL_RULES,
    )


TS_BACKEND_SECRET = "ts-backend-secret-7"
TS_TOOL_RULES = """\
  backend:
    credentials:
      secretHeader:
        header: X-Api-Key
        value: {env: TS_BACKEND_SECRET}
        identity:
          header: X-Mcp-Identity
    mcp:
      authorization:
        action: Allow
        policy:
          matchExpressions:
            - 'mcp.tool.name in ["add", "admin"]'
      scopes:
        - match: 'has(mcp.tool) && mcp.tool.name == "admin"'
          required: [mcp:admin]
"""


@pytest.fixture(scope="session")
def stack_ts_tools(
    logs: Path,
    tmp_path_factory: pytest.TempPathFactory,
    idp_key: tuple[RSAKey, Path],
    ts_backend: str,
) -> Iterator[Stack]:
    """Provider B in front of the TypeScript backend: tool rules (add, admin), a per-tool scope
    (admin needs mcp:admin), a secret header and the caller's identity."""
    yield from _start_stack(
        "authentik",
        "provider-b",
        "9000",
        logs,
        tmp_path_factory.mktemp("stack-ts-tools"),
        idp_key,
        ts_backend,
        name="gateway-ts-tools",
        policy_extra=TS_TOOL_RULES,
        gateway_env={"TS_BACKEND_SECRET": TS_BACKEND_SECRET},
    )


@pytest.fixture(scope="session")
def stack_traced(
    logs: Path,
    tmp_path_factory: pytest.TempPathFactory,
    idp_key: tuple[RSAKey, Path],
    backend: str,
    otlp_receiver: str,
) -> Iterator[Stack]:
    """Provider B with `--tracing otlp`, exporting to the test receiver."""
    yield from _start_stack(
        "authentik",
        "provider-b",
        "9000",
        logs,
        tmp_path_factory.mktemp("stack-traced"),
        idp_key,
        backend,
        gateway_args=("--tracing", "otlp"),
        name="gateway-traced",
        gateway_env={
            "OTEL_EXPORTER_OTLP_ENDPOINT": otlp_receiver,
            "OTEL_BSP_SCHEDULE_DELAY": "100",
        },
    )


@pytest.fixture(scope="session")
def broker_b(
    logs: Path, tmp_path_factory: pytest.TempPathFactory, idp_key: tuple[RSAKey, Path], backend: str
) -> Iterator[Stack]:
    """Provider B behind the gateway in Broker mode (local client metadata allowed)."""
    yield from _start_stack(
        "authentik",
        "provider-b",
        "9000",
        logs,
        tmp_path_factory.mktemp("broker-b"),
        idp_key,
        backend,
        broker=True,
        gateway_args=("--allow-local-client-metadata",),
    )


# Step-up (MCP 2026-07-28): every request needs mcp:tools; `count` also needs mcp:admin.
STEP_UP_RULES = """\
    scopes:
      required: [mcp:tools]
  backend:
    mcp:
      scopes:
        - match: 'mcp.tool.name == "count"'
          required: [mcp:admin]
"""
STEP_UP_IDP = {"EXTRA_SCOPES": "mcp:tools mcp:admin"}


@pytest.fixture(scope="session")
def step_up_facade(
    logs: Path, tmp_path_factory: pytest.TempPathFactory, idp_key: tuple[RSAKey, Path], backend: str
) -> Iterator[Stack]:
    """Step-up rules, protected resource metadata naming the provider itself (Keycloak layout,
    with DCR): clients sign in at the provider and the gateway checks scopes."""
    yield from _start_stack(
        "keycloak",
        "provider-a",
        "8180",
        logs,
        tmp_path_factory.mktemp("step-up-facade"),
        idp_key,
        backend,
        name="gateway-step-up-facade",
        policy_extra=STEP_UP_RULES,
        idp_extra=STEP_UP_IDP,
        policy_edit=("        provider: Keycloak", "        # provider: none, PRM names the IdP"),
    )


@pytest.fixture(scope="session")
def step_up_broker(
    logs: Path, tmp_path_factory: pytest.TempPathFactory, idp_key: tuple[RSAKey, Path], backend: str
) -> Iterator[Stack]:
    """Step-up rules with the gateway as authorization server (Broker, provider B layout)."""
    yield from _start_stack(
        "authentik",
        "provider-b",
        "9000",
        logs,
        tmp_path_factory.mktemp("step-up-broker"),
        idp_key,
        backend,
        broker=True,
        name="gateway-step-up-broker",
        policy_extra=STEP_UP_RULES,
        idp_extra=STEP_UP_IDP,
    )


# What MCP Inspector needs of a route: the root well-known forms it asks for (RFC 9728 root
# form; 2025-03-26 clients look for the authorization server at the origin) and every header
# its browser code sends (Mcp-Protocol-Version, Mcp-Session-Id, Last-Event-ID…).
ROOT_WELL_KNOWN = (
    (
        "        - path: {type: PathPrefix, value: /mcp}\n",
        "        - path: {type: PathPrefix, value: /mcp}\n"
        "        - path: {type: Exact, value: /.well-known/oauth-protected-resource}\n"
        "        - path: {type: Exact, value: /.well-known/oauth-authorization-server}\n",
    ),
    ("allowHeaders: [Origin, Authorization, Content-Type]", 'allowHeaders: ["*"]'),
)


@pytest.fixture(scope="session")
def inspector_broker(
    logs: Path, tmp_path_factory: pytest.TempPathFactory, idp_key: tuple[RSAKey, Path], backend: str
) -> Iterator[Stack]:
    """Broker mode (provider B layout) on a route that also serves the root well-known forms."""
    yield from _start_stack(
        "authentik",
        "provider-b",
        "9000",
        logs,
        tmp_path_factory.mktemp("inspector-broker"),
        idp_key,
        backend,
        broker=True,
        name="gateway-inspector-broker",
        route_edits=ROOT_WELL_KNOWN,
    )
