"""Redis as operators run it, on loopback, for the tests of issue 37: a Sentinel set (a primary,
a replica and three sentinels, each with a password) and a six-node Redis Cluster, from
Debian's `redis-server` (`--sentinel` is what the `redis-sentinel` command runs) and
`redis-cli --cluster create`."""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path

from support import Process, free_port, wait_for_port, wait_until

SERVER_PASSWORD = "server-pw"
SENTINEL_PASSWORD = "sentinel-pw"
SERVICE = "mymaster"


@dataclass
class SentinelSet:
    """The running set: its data servers by role at start, and its sentinels' ports."""

    primary: Process
    primary_port: int
    replica: Process
    replica_port: int
    sentinel_ports: tuple[int, ...]
    # Replicas beyond the first (`sentinel_set(..., replicas=2)`): after a failover one still
    # acknowledges the new primary's writes.
    others: tuple[Process, ...] = ()

    @property
    def url(self) -> str:
        """The gateway's URL for the set (both passwords)."""
        hosts = ",".join(f"127.0.0.1:{p}" for p in self.sentinel_ports)
        return (
            f"redis+sentinel://:{SERVER_PASSWORD}@{hosts}/{SERVICE}/0"
            f"?sentinel_password={SENTINEL_PASSWORD}"
        )


def _server_conf(directory: Path, port: int, replica_of: int | None) -> Path:
    lines = [
        f"port {port}",
        "bind 127.0.0.1",
        f"dir {directory}",
        f"requirepass {SERVER_PASSWORD}",
        f"masterauth {SERVER_PASSWORD}",
        'save ""',
        "appendonly no",
        "daemonize no",
    ]
    if replica_of is not None:
        lines.append(f"replicaof 127.0.0.1 {replica_of}")
    conf = directory / f"redis-{port}.conf"
    conf.write_text("\n".join(lines) + "\n")
    return conf


def _sentinel_conf(directory: Path, port: int, primary: int) -> Path:
    # Sentinel rewrites its own file: each gets a writable copy.
    conf = directory / f"sentinel-{port}.conf"
    conf.write_text(
        "\n".join(
            [
                f"port {port}",
                "bind 127.0.0.1",
                f"dir {directory}",
                "daemonize no",
                f"requirepass {SENTINEL_PASSWORD}",
                f"sentinel monitor {SERVICE} 127.0.0.1 {primary} 2",
                f"sentinel auth-pass {SERVICE} {SERVER_PASSWORD}",
                f"sentinel sentinel-pass {SENTINEL_PASSWORD}",
                f"sentinel down-after-milliseconds {SERVICE} 1000",
                f"sentinel failover-timeout {SERVICE} 5000",
            ]
        )
        + "\n"
    )
    return conf


@contextmanager
def sentinel_set(logs: Path, directory: Path, replicas: int = 1) -> Iterator[SentinelSet]:
    """A primary, its replicas and three sentinels watching them; all stopped on exit."""
    binary = shutil.which("redis-server")
    assert binary, "redis-server is required: `make test` installs the Debian package"
    directory.mkdir(parents=True, exist_ok=True)
    primary_port, replica_port = free_port(), free_port()
    with ExitStack() as running:

        def start(name: str, port: int, *args: str) -> Process:
            process = Process(name, [binary, *args], logs)
            running.callback(process.stop)
            wait_for_port(port, process)
            return process

        primary = start(
            f"redis-primary-{primary_port}",
            primary_port,
            str(_server_conf(directory, primary_port, None)),
        )
        replica = start(
            f"redis-replica-{replica_port}",
            replica_port,
            str(_server_conf(directory, replica_port, primary_port)),
        )
        others = []
        for _ in range(replicas - 1):
            port = free_port()
            conf = _server_conf(directory, port, primary_port)
            others.append(start(f"redis-replica-{port}", port, str(conf)))
        ports = []
        for _ in range(3):
            port = free_port()
            conf = _sentinel_conf(directory, port, primary_port)
            start(f"redis-sentinel-{port}", port, str(conf), "--sentinel")
            ports.append(port)
        yield SentinelSet(primary, primary_port, replica, replica_port, tuple(ports), tuple(others))


CLUSTER_PASSWORD = "cluster-pw"


@dataclass
class RedisClusterSet:
    """A running six-node Redis Cluster (three primaries, three replicas)."""

    ports: tuple[int, ...]
    processes: tuple[Process, ...]

    @property
    def url(self) -> str:
        """The gateway's URL for the cluster (three seed nodes)."""
        seeds = ",".join(f"127.0.0.1:{p}" for p in self.ports[:3])
        return f"redis+cluster://:{CLUSTER_PASSWORD}@{seeds}/"


def _cluster_node_args(port: int, node_dir: Path) -> list[str]:
    """A cluster-enabled server on `port`, keeping nothing on disk but its cluster state."""
    return [
        *("--port", str(port), "--bind", "127.0.0.1", "--dir", str(node_dir)),
        *("--cluster-enabled", "yes"),
        # Its own free port: the default (the port + 10000) may be another's.
        *("--cluster-port", str(free_port())),
        *("--cluster-config-file", "nodes.conf", "--cluster-node-timeout", "2000"),
        *("--requirepass", CLUSTER_PASSWORD, "--masterauth", CLUSTER_PASSWORD),
        *("--save", "", "--appendonly", "no", "--daemonize", "no"),
    ]


def _cli(cli: str, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
    """`redis-cli` with the cluster's password."""
    return subprocess.run(
        [cli, "-a", CLUSTER_PASSWORD, "--no-auth-warning", *args],
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


@contextmanager
def redis_cluster(logs: Path, directory: Path) -> Iterator[RedisClusterSet]:
    """Six cluster-enabled servers joined by `redis-cli --cluster create`; stopped on exit."""
    binary, cli = shutil.which("redis-server"), shutil.which("redis-cli")
    assert binary, "redis-server is required: `make test` installs the Debian package"
    assert cli, "redis-cli is required: `make test` installs the Debian package"
    ports = tuple(free_port() for _ in range(6))
    with ExitStack() as running:
        processes = []
        for port in ports:
            node_dir = directory / str(port)
            node_dir.mkdir(parents=True, exist_ok=True)
            args = _cluster_node_args(port, node_dir)
            process = Process(f"redis-cluster-{port}", [binary, *args], logs)
            running.callback(process.stop)
            wait_for_port(port, process)
            processes.append(process)
        nodes = [f"127.0.0.1:{p}" for p in ports]
        create = ("--cluster", "create", *nodes, "--cluster-replicas", "1", "--cluster-yes")
        created = _cli(cli, *create, timeout=60)
        assert created.returncode == 0, created.stdout + created.stderr

        def ready() -> bool:
            info = _cli(cli, "-p", str(ports[0]), "cluster", "info", timeout=10)
            return "cluster_state:ok" in info.stdout

        wait_until(ready, 30, "the cluster to cover every slot")
        yield RedisClusterSet(ports, tuple(processes))
