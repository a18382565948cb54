"""Gateway processes that share a Redis which fails (issue 37): Broker-mode replicas behind
one public address, each with its admin listener, and a rate-limited route beside; the dev
identity provider they sign users in at; the Sentinel set's servers to kill, hang and restart,
and the sentinels' own settings (how long they wait, which primary they name); and a loopback
TCP link, between a gateway (or a replica) and a Redis server, that can be cut like a network.

Replicas are reached the way a load balancer reaches them: every request goes to one replica's
own port with the public host in `Host` (nothing listens on the public port itself, so a request
that skips the balancer fails at once)."""

from __future__ import annotations

import re
import shutil
import socket
import threading
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager, suppress
from dataclasses import dataclass
from pathlib import Path

import httpx
import redis
from joserfc.jwk import RSAKey
from redis.backoff import NoBackoff
from redis.retry import Retry

from mcp_oauth_gateway.broker.store import TAKEN
from redis_ha_support import SENTINEL_PASSWORD, SERVER_PASSWORD, SERVICE, SentinelSet
from support import (
    NODE_DIR,
    Process,
    claims_for,
    free_port,
    gateway_cmd,
    mint,
    node,
    wait_for_keyset,
    wait_for_port,
    wait_until,
)

LIMITED_REQUESTS = 3  # a minute, per subject, on the rate-limited route


@dataclass(frozen=True)
class Gateway:
    """One gateway process: where it serves, where its admin listener answers."""

    name: str
    base: str
    admin: str
    process: Process

    def status(self) -> dict:
        """Its `/status` (the admin listener)."""
        return httpx.get(f"{self.admin}/status", timeout=10).json()

    def readiness(self) -> httpx.Response:
        """Its `/readyz`."""
        return httpx.get(f"{self.admin}/readyz", timeout=10)

    def redis_up(self) -> list[bool | None]:
        """Each Redis connection's health as `/status` shows it."""
        return [row["up"] for row in self.status()["redis"]]

    def metric(self, name: str) -> list[float]:
        """Every sample of `name` in its `/metrics`."""
        text = httpx.get(f"{self.admin}/metrics", timeout=10).text
        return [float(m) for m in re.findall(rf"^{name}{{[^}}]*}} (\S+)$", text, re.MULTILINE)]


# Both policies' rule.
_ALLOW = """\
    authorization:
      action: Allow
      policy:
        matchExpressions: ['"mcp-agent" in jwt.groups']
"""


def _routes(port: int, backend_port: int, idp_port: int) -> str:
    """The Gateway, the Broker route (/mcp and its metadata), the rate-limited route
    (/limited), the MCP server behind both and the identity provider's Service."""
    return f"""\
apiVersion: gateway.networking.k8s.io/v1
kind: Gateway
metadata: {{name: gw, namespace: default}}
spec:
  gatewayClassName: mcp-oauth-gateway
  listeners: [{{name: http, port: {port}, protocol: HTTP}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: mcp, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches:
        - path: {{type: PathPrefix, value: /mcp}}
        - path: {{type: PathPrefix, value: /.well-known/oauth-protected-resource/mcp}}
        - path: {{type: PathPrefix, value: /.well-known/oauth-authorization-server/mcp}}
      backendRefs: [{{group: mcp-oauth-gateway.dev, kind: GatewayBackend, name: backend}}]
---
apiVersion: gateway.networking.k8s.io/v1
kind: HTTPRoute
metadata: {{name: limited, namespace: default}}
spec:
  parentRefs: [{{name: gw}}]
  rules:
    - matches: [{{path: {{type: PathPrefix, value: /limited}}}}]
      backendRefs: [{{group: mcp-oauth-gateway.dev, kind: GatewayBackend, name: backend}}]
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayBackend
metadata: {{name: backend, namespace: default}}
spec:
  mcp:
    targets:
      - name: mcp-server
        static: {{host: 127.0.0.1, port: {backend_port}, path: /mcp}}
---
apiVersion: v1
kind: Service
metadata: {{name: idp, namespace: default}}
spec:
  type: ExternalName
  externalName: 127.0.0.1
  ports: [{{port: {idp_port}}}]
"""


def _authn(idp_port: int) -> str:
    """Both policies' sign-in: the dev identity provider's tokens, keys through its Service."""
    issuer = f"http://127.0.0.1:{idp_port}/application/o/mcp/"
    return f"""\
    jwtAuthentication:
      mode: Strict
      providers:
        - issuer: {issuer}
          audiences: [mcp-public]
          jwks:
            remote:
              backendRef: {{kind: Service, name: idp, namespace: default, port: {idp_port}}}
              jwksPath: /application/o/mcp/jwks/
"""


def _policies(public: str, idp_port: int, limited: str) -> str:
    """The Broker policy on /mcp (public address `public`) and the rate limit on /limited
    (its buckets in the Redis at `limited`)."""
    authn = _authn(idp_port)
    return f"""\
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: broker, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: mcp}}]
  traffic:
{authn}\
      mcp:
        authorizationServerMode: Broker
        provider: ProviderB
        clientId: mcp-public
        resourceMetadata:
          resource: {public}/mcp
          scopesSupported: [openid, profile]
{_ALLOW}\
---
apiVersion: mcp-oauth-gateway.dev/v1alpha1
kind: GatewayPolicy
metadata: {{name: limited, namespace: default}}
spec:
  targetRefs: [{{group: gateway.networking.k8s.io, kind: HTTPRoute, name: limited}}]
  traffic:
{authn}\
    rateLimit:
      key: 'jwt.sub'
      requests: {LIMITED_REQUESTS}
      window: 1m
      redisUrl: '{limited}'
{_ALLOW}"""


def resources(port: int, public: str, idp_port: int, backend_port: int, limited: str) -> str:
    """A Broker route on /mcp whose public address is `public`, and a route on /limited whose
    rate limit keeps its buckets in the Redis at `limited`; both in front of one MCP server."""
    return _routes(port, backend_port, idp_port) + "---\n" + _policies(public, idp_port, limited)


@dataclass(frozen=True)
class Upstreams:
    """What every gateway of a rig stands in front of, and the provider's signing key."""

    idp: Process
    idp_port: int
    backend_port: int
    public: str  # the balancer's address: the route's resource and issuer
    key: RSAKey

    def token(self, sub: str = "alice") -> str:
        """An access token of the provider's for `sub` (in the group the routes allow)."""
        issuer = f"http://127.0.0.1:{self.idp_port}/application/o/mcp/"
        return mint(self.key, claims_for(issuer, "mcp-public", sub=sub))


@contextmanager
def gateway(
    name: str, upstreams: Upstreams, redis_url: str, limited: str, directory: Path, logs: Path
) -> Iterator[Gateway]:
    """A gateway whose Broker keeps its state in `redis_url` (MCP_OAUTH_GATEWAY_REDIS_URL);
    stopped on exit."""
    port, admin = free_port(), free_port()
    directory.mkdir(parents=True, exist_ok=True)
    config = directory / "resources.yaml"
    config.write_text(
        resources(port, upstreams.public, upstreams.idp_port, upstreams.backend_port, limited)
    )
    process = Process(
        name,
        [*gateway_cmd(config), "--admin-port", str(admin)],
        logs,
        env={"MCP_OAUTH_GATEWAY_REDIS_URL": redis_url},
    )
    try:
        wait_for_port(port, process)
        base = f"http://127.0.0.1:{port}"
        wait_for_keyset(base, upstreams.token())
        yield Gateway(name, base, f"http://127.0.0.1:{admin}", process)
    finally:
        process.stop()


@contextmanager
def gateways(
    names: tuple[str, ...], upstreams: Upstreams, redis_url: str, directory: Path, logs: Path
) -> Iterator[dict[str, Gateway]]:
    """Several replicas of one configuration sharing `redis_url` (rate limits too)."""
    with ExitStack() as running:
        yield {
            name: running.enter_context(
                gateway(name, upstreams, redis_url, redis_url, directory / name, logs)
            )
            for name in names
        }


def data_ports(sentinels: SentinelSet) -> list[int]:
    """The ports of the set's data servers (the sentinels' own excluded)."""
    others = (int(p.name.rsplit("-", 1)[1]) for p in sentinels.others)
    return [sentinels.primary_port, sentinels.replica_port, *others]


def settled_primary(sentinels: SentinelSet) -> int | None:
    """The port every sentinel names primary, once that server alone of the set says it is one;
    None while a failover settles. After a contested failover a sentinel may still name the
    loser, and the loser may take writes for seconds after the sentinels agreed on another:
    a test that hung or killed "the primary" then would aim at the wrong server."""
    named: set[int] = set()
    for port in sentinels.sentinel_ports:
        try:
            with redis.Redis(port=port, password=SENTINEL_PASSWORD, socket_timeout=2) as sentinel:
                _, primary = sentinel.sentinel_get_master_addr_by_name(SERVICE)
        except (redis.RedisError, TypeError):
            return None
        named.add(int(primary))
    if len(named) != 1:
        return None
    (primary,) = named
    masters = [port for port in data_ports(sentinels) if role(port) == "master"]
    return primary if masters == [primary] else None


def current_primary(sentinels: SentinelSet) -> int:
    """The port of the primary, once the set has settled on one (`settled_primary`)."""
    seen: list[int | None] = []
    wait_until(
        lambda: seen.append(settled_primary(sentinels)) or seen[-1] is not None,
        60,
        "the sentinels to agree on one primary, and it alone to say it is one",
    )
    primary = seen[-1]
    assert primary is not None
    return primary


def wait_for_new_primary(sentinels: SentinelSet, old: int) -> int:
    """The port of the server the sentinels promoted in place of `old`."""
    wait_until(
        lambda: settled_primary(sentinels) not in (None, old),
        60,
        "the sentinels to promote a replica",
    )
    return current_primary(sentinels)


def stored(port: int, key: str) -> bool:
    """Whether the server at `port` holds `key`, not yet taken."""
    with redis.Redis(port=port, password=SERVER_PASSWORD, socket_timeout=2) as server:
        value = server.get(key)
        return isinstance(value, bytes) and not value.startswith(TAKEN)


def down_after(sentinels: SentinelSet, millis: int) -> None:
    """How long the sentinels wait for a silent primary before they replace it."""
    for port in sentinels.sentinel_ports:
        with redis.Redis(port=port, password=SENTINEL_PASSWORD, socket_timeout=2) as sentinel:
            sentinel.sentinel_set(SERVICE, "down-after-milliseconds", millis)


def failover_timeout(sentinels: SentinelSet, millis: int) -> None:
    """How long the sentinels leave a replica that follows another address than the primary's
    (here: the primary through a `Link`) before they point it at the primary itself."""
    for port in sentinels.sentinel_ports:
        with redis.Redis(port=port, password=SENTINEL_PASSWORD, socket_timeout=2) as sentinel:
            sentinel.sentinel_set(SERVICE, "failover-timeout", millis)


def replicate_through(replica: int, port: int) -> None:
    """Have the server at `replica` follow the primary at `port` (a link to it)."""
    with redis.Redis(port=replica, password=SERVER_PASSWORD, socket_timeout=2) as server:
        server.replicaof("127.0.0.1", port)


def replicas_online(primary: int) -> int:
    """How many replicas the primary at `primary` has in sync."""
    with redis.Redis(port=primary, password=SERVER_PASSWORD, socket_timeout=2) as server:
        info = server.info("replication")
    return sum(1 for k, v in info.items() if k.startswith("slave") and v.get("state") == "online")


def role(port: int) -> str:
    """What a data server of the set says it is (`master`, `slave`), or `down` (a hung one
    within a second: asked once, not through redis-py's retries)."""
    try:
        with redis.Redis(
            port=port, password=SERVER_PASSWORD, socket_timeout=1, retry=Retry(NoBackoff(), 0)
        ) as server:
            return str(server.execute_command("ROLE")[0], "ascii")
    except redis.RedisError:
        return "down"


class Servers:
    """The data servers of a Sentinel set by port, to kill, hang and bring back as replicas."""

    def __init__(self, sentinels: SentinelSet, logs: Path, directory: Path):
        self.logs, self.directory = logs, directory
        # `sentinel_set` names each further replica `redis-replica-PORT`.
        self.by_port = {
            sentinels.primary_port: sentinels.primary,
            sentinels.replica_port: sentinels.replica,
            **{int(p.name.rsplit("-", 1)[1]): p for p in sentinels.others},
        }
        self._restarted: list[Process] = []

    def restart_as_replica(self, port: int, primary: int) -> None:
        """Start the (dead) server at `port` again, empty, as a replica of `primary`."""
        binary = shutil.which("redis-server")
        assert binary, "redis-server is required: `make test` installs the Debian package"
        args = ["--port", str(port), "--bind", "127.0.0.1", "--dir", str(self.directory)]
        args += ["--requirepass", SERVER_PASSWORD, "--masterauth", SERVER_PASSWORD]
        args += ["--save", "", "--appendonly", "no", "--daemonize", "no"]
        args += ["--replicaof", "127.0.0.1", str(primary)]
        name = f"redis-restarted-{port}-{len(self._restarted)}"
        process = Process(name, [binary, *args], self.logs)
        self._restarted.append(process)
        self.by_port[port] = process
        wait_for_port(port, process)

    def stop(self) -> None:
        """Stop the servers this started (`sentinel_set` stops its own)."""
        for process in self._restarted:
            process.stop()


@contextmanager
def identity_provider(logs: Path, key_file: Path, resource: str) -> Iterator[tuple[Process, int]]:
    """The dev identity provider (oidc-provider, authentik layout) signing with `key_file`;
    yields it and its port."""
    port = free_port()
    env = {
        "IDP_PORT": str(port),
        "FLAVOUR": "authentik",
        "KEY_FILE": str(key_file),
        "CLIENT_ID": "mcp-public",
        "RESOURCE": resource,
        "SLUG": "mcp",
    }
    process = Process("idp-failover", [node(), str(NODE_DIR / "idp.mjs")], logs, env=env)
    try:
        wait_for_port(port, process)
        yield process, port
    finally:
        process.stop()


class Link:
    """A loopback TCP link to `upstream` that can be cut like a network. While cut nothing
    crosses it: bytes sent wait (TCP retransmits them) and a connection opened meanwhile never
    reaches the far side. Healed, what waited is delivered, late, and the connections opened
    while it was cut are closed (their handshake never got through)."""

    def __init__(self, upstream: int):
        self.upstream = upstream
        self._server = socket.create_server(("127.0.0.1", 0))
        self.port: int = self._server.getsockname()[1]
        self._open = threading.Event()
        self._open.set()
        self._lock = threading.Lock()
        self._sockets: list[socket.socket] = []
        self._stranded: list[socket.socket] = []
        threading.Thread(target=self._accept, name=f"link-{self.port}", daemon=True).start()

    def cut(self) -> None:
        """From now on nothing crosses."""
        self._open.clear()

    def heal(self) -> None:
        """Deliver what waited; close the connections opened while cut."""
        with self._lock:
            for stranded in self._stranded:
                stranded.close()
            self._stranded.clear()
        self._open.set()

    def close(self) -> None:
        """Stop accepting and close every connection; what waited is lost."""
        self._server.close()
        with self._lock:
            for sock in self._sockets + self._stranded:
                sock.close()
        self._open.set()

    def _accept(self) -> None:
        while True:
            try:
                near, _ = self._server.accept()
            except OSError:
                return
            with self._lock:
                if not self._open.is_set():
                    self._stranded.append(near)
                    continue
            try:
                far = socket.create_connection(("127.0.0.1", self.upstream), timeout=5)
            except OSError:
                near.close()
                continue
            far.settimeout(None)
            with self._lock:
                self._sockets += [near, far]
            for source, sink in ((near, far), (far, near)):
                threading.Thread(target=self._pipe, args=(source, sink), daemon=True).start()

    def _pipe(self, source: socket.socket, sink: socket.socket) -> None:
        while True:
            self._open.wait()
            try:
                data = source.recv(65536)
            except OSError:
                data = b""
            self._open.wait()  # received just as the link was cut: it waits too
            if not data:
                break
            try:
                sink.sendall(data)
            except OSError:
                break
        with suppress(OSError):
            sink.shutdown(socket.SHUT_WR)


@contextmanager
def link(upstream: int) -> Iterator[Link]:
    """A `Link` to `upstream`, closed on exit."""
    running = Link(upstream)
    try:
        yield running
    finally:
        running.close()
